//! The CSI drivers registered on this node: name → where its Node service listens. The
//! volume manager looks drivers up here; registration adds and removes them. One entry per
//! registered plugin socket, so the map stays as small as the plugin folder.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use super::version::Version;

/// One registered driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Driver {
    /// The socket of its Node and Identity services.
    pub endpoint: PathBuf,
    /// The CSI version it is spoken to in.
    pub version: Version,
}

#[derive(Debug, Default)]
pub struct Drivers {
    by_name: Mutex<BTreeMap<String, Driver>>,
}

impl Drivers {
    pub fn get(&self, name: &str) -> Option<Driver> {
        self.lock().get(name).cloned()
    }

    pub(super) fn set(&self, name: &str, driver: Driver) {
        self.lock().insert(name.to_string(), driver);
    }

    pub(super) fn remove(&self, name: &str) -> Option<Driver> {
        self.lock().remove(name)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Driver>> {
        // A panic while holding the lock leaves the map consistent: every change is one call.
        self.by_name.lock().unwrap_or_else(|e| e.into_inner())
    }
}
