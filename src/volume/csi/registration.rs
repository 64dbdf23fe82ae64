//! The plugin manager's handler for plugins of type "CSIPlugin": checks the versions a driver
//! offers, asks it who this node is (NodeGetInfo), records it in `Drivers` and publishes it
//! (`nodeinfo`); undoes all that when the driver's registration socket goes.

use std::path::Path;
use std::sync::Arc;

use tracing::{error, info};

use super::client::Client;
use super::drivers::{Driver, Drivers};
use super::nodeinfo::NodeInfoPublisher;
use super::version::{Version, highest_supported};
use super::{CsiError, log_prefix};

/// Registers CSI drivers. Cheap to clone.
#[derive(Clone)]
pub struct Registration {
    drivers: Arc<Drivers>,
    /// None when standalone: drivers are then only recorded for this kubelet's own use.
    publisher: Option<NodeInfoPublisher>,
}

impl Registration {
    pub fn new(drivers: Arc<Drivers>, publisher: Option<NodeInfoPublisher>) -> Self {
        Self { drivers, publisher }
    }

    /// Whether a driver offering `versions` can be registered under `name`.
    pub fn validate(&self, name: &str, endpoint: &Path, versions: &[String]) -> Result<(), String> {
        info!(
            driver = name,
            endpoint = %endpoint.display(),
            versions = versions.join(","),
            "{}",
            log_prefix("Trying to validate a new CSI Driver")
        );
        self.check_versions("ValidatePlugin", name, versions)
            .map(drop)
            .map_err(|e| {
                format!(
                    "validation failed for CSI Driver {name} at endpoint {}: {e}",
                    endpoint.display()
                )
            })
    }

    /// Records the driver and publishes what it says of the node; on failure nothing of it
    /// stays recorded.
    pub async fn register(
        &self,
        name: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> Result<(), String> {
        info!(driver = name, endpoint = %endpoint.display(), "{}", log_prefix("Register new plugin"));
        let version = self.check_versions("RegisterPlugin", name, versions)?;
        self.drivers.set(
            name,
            Driver {
                endpoint: endpoint.to_path_buf(),
                version,
            },
        );
        match self.publish(name, endpoint).await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.unregister(name).await;
                Err(e.to_string())
            }
        }
    }

    pub async fn deregister(&self, name: &str) {
        info!(
            driver = name,
            "{}",
            log_prefix("registrationHandler.DeRegisterPlugin request")
        );
        self.unregister(name).await;
    }

    async fn publish(&self, name: &str, endpoint: &Path) -> Result<(), CsiError> {
        let node_info = Client::connect(endpoint).await?.node_get_info().await?;
        if let Some(publisher) = &self.publisher {
            publisher.install(name, &node_info).await?;
        }
        info!(
            driver = name,
            node_id = node_info.node_id,
            "Registered CSI driver"
        );
        Ok(())
    }

    async fn unregister(&self, name: &str) {
        if self.drivers.remove(name).is_none() {
            return;
        }
        if let Some(publisher) = &self.publisher
            && let Err(e) = publisher.uninstall(name).await
        {
            error!(driver = name, err = %e, "{}", log_prefix("Unregistering the driver's node info failed"));
        }
    }

    fn check_versions(
        &self,
        caller: &str,
        name: &str,
        versions: &[String],
    ) -> Result<Version, String> {
        if versions.is_empty() {
            return Err(log_prefix(format!(
                "{caller} for CSI driver {name:?} failed. Plugin returned an empty list for supported versions"
            )));
        }
        let highest = highest_supported(versions).map_err(|e| {
            log_prefix(format!(
                "{caller} for CSI driver {name:?} failed. None of the versions specified {versions:?} are supported. err={e}"
            ))
        })?;
        if let Some(existing) = self.drivers.get(name)
            && existing.version >= highest
        {
            return Err(log_prefix(format!(
                "{caller} for CSI driver {name:?} failed. Another driver with the same name is already registered with a higher supported version: {:?}",
                existing.version.to_string()
            )));
        }
        Ok(highest)
    }
}
