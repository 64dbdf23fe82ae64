//! The plugin manager: node plugins (CSI drivers and device plugins now, DRA drivers later)
//! announce themselves
//! by serving upstream's Registration service on a socket they put under
//! `<root-dir>/plugins_registry/`. Once a second the folder is scanned (`socket_dir`) and the
//! sockets found are reconciled with the plugins registered (`reconciler`): a new socket is
//! asked who it is (`registration`) and handed to the handler of its type, which accepts or
//! refuses it, and the plugin is told the verdict; a socket that went, or was made anew by a
//! restarted plugin, is deregistered first.

mod reconciler;
pub mod registration;
mod socket_dir;

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cm::devicemanager::DeviceManager;
use crate::volume::csi;

/// The folder under the root dir, upstream's name.
pub const PLUGINS_REGISTRY: &str = "plugins_registry";
/// How often the folder is looked at, as upstream's reconciler loops.
const RECONCILE_PERIOD: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum PluginManagerError {
    #[error("creating the plugin registry {path}: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Who takes plugins of each type; a type without a handler is refused.
#[derive(Clone, Default)]
pub struct Handlers {
    pub csi: Option<csi::Registration>,
    /// Device plugins may announce themselves here too, besides the device manager's socket.
    pub devices: Option<Arc<DeviceManager>>,
}

impl Handlers {
    fn for_type(&self, plugin_type: &str) -> Option<Handler> {
        match plugin_type {
            "CSIPlugin" => self.csi.clone().map(Handler::Csi),
            "DevicePlugin" => self.devices.clone().map(Handler::Device),
            _ => None,
        }
    }
}

/// The handler a registered plugin went to, which also takes its deregistration.
#[derive(Clone)]
enum Handler {
    Csi(csi::Registration),
    Device(Arc<DeviceManager>),
}

impl Handler {
    fn validate(&self, name: &str, endpoint: &Path, versions: &[String]) -> Result<(), String> {
        match self {
            Handler::Csi(h) => h.validate(name, endpoint, versions),
            Handler::Device(_) => crate::cm::devicemanager::registration::validate(name, versions),
        }
    }

    async fn register(
        &self,
        name: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> Result<(), String> {
        match self {
            Handler::Csi(h) => h.register(name, endpoint, versions).await,
            Handler::Device(m) => m
                .connect_at(name, endpoint)
                .await
                .map_err(|e| e.to_string()),
        }
    }

    async fn deregister(&self, name: &str) {
        match self {
            Handler::Csi(h) => h.deregister(name).await,
            Handler::Device(m) => m.deregister(name),
        }
    }
}

/// Creates the registry folder and starts the manager.
pub fn spawn(
    root_dir: &Path,
    handlers: Handlers,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> Result<(), PluginManagerError> {
    let dir = root_dir.join(PLUGINS_REGISTRY);
    std::fs::create_dir_all(&dir).map_err(|source| PluginManagerError::Dir {
        path: dir.clone(),
        source,
    })?;
    tasks.critical("plugin manager", run(dir, handlers, cancel.child_token()));
    Ok(())
}

/// Reconciles until cancelled. Plugins stay registered with the API server when the kubelet
/// stops: a restarted kubelet finds their sockets and registers them again.
pub async fn run(dir: PathBuf, handlers: Handlers, cancel: CancellationToken) {
    info!(path = %dir.display(), "Starting plugin manager");
    let mut reconciler = reconciler::Reconciler::new(handlers);
    let mut tick = tokio::time::interval(RECONCILE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {
                let d = dir.clone();
                let found = tokio::task::spawn_blocking(move || socket_dir::scan(&d))
                    .await
                    .unwrap_or_default();
                reconciler.reconcile(found);
            }
            Some(done) = reconciler.next_finished() => reconciler.finished(done),
        }
    }
}
