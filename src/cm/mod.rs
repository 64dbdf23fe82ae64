//! Container management: pod cgroups (the cgroupfs and systemd drivers, each on
//! cgroup v1 and v2) and node allocatable.

pub mod allocatable;
pub mod checkpoint_file;
pub mod cpumanager;
pub mod devicemanager;
pub mod driver;
mod fs;
pub mod layout;
pub mod manager;
pub mod memorymanager;
pub mod name;
pub mod numa;
pub mod resources;
pub mod topologymanager;

use std::path::PathBuf;
use std::sync::Arc;

pub use manager::CgroupManager;
pub use resources::{PodCgroupOptions, PodResources};

use crate::quantity::QuantityError;

/// The cgroup settings of the kubelet configuration.
#[derive(Clone, Debug)]
pub struct CgroupSettings {
    /// "cgroupfs" or "systemd" (--cgroup-driver).
    pub driver: String,
    pub cgroup_root: String,
    pub cgroups_per_qos: bool,
    pub pod: PodCgroupOptions,
}

impl From<&crate::config::Settings> for CgroupSettings {
    fn from(settings: &crate::config::Settings) -> Self {
        let cfg = &settings.config;
        CgroupSettings {
            driver: cfg.cgroup_driver.clone(),
            cgroup_root: cfg.cgroup_root.clone(),
            cgroups_per_qos: cfg.cgroups_per_qos,
            pod: PodCgroupOptions {
                enforce_cpu_limits: cfg.cpu_cfs_quota,
                cpu_cfs_period_us: cfg.cpu_cfs_quota_period.0.as_micros() as u64,
                pids_limit: Some(cfg.pod_pids_limit).filter(|n| *n > 0),
            },
        }
    }
}

impl CgroupSettings {
    /// The manager, with the node-level cgroups (kubepods and the QoS tiers) in place.
    pub fn start(&self) -> Result<Arc<CgroupManager>, CgroupError> {
        let manager = CgroupManager::new(&self.driver, &self.cgroup_root, self.cgroups_per_qos)?
            .with_options(self.pod);
        manager.ensure_node_cgroups()?;
        Ok(Arc::new(manager))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup filesystem found at {0}")]
    NotMounted(PathBuf),
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid cgroup root {0:?}")]
    InvalidRoot(String),
    #[error("invalid pod uid {0:?} for a cgroup name")]
    InvalidUid(String),
    #[error("cgroup {path} is still busy: {source}")]
    Busy {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0:?} cgroup does not exist")]
    Missing(String),
    #[error("{what}: {source}")]
    Enforcement {
        what: String,
        source: Box<CgroupError>,
    },
    #[error("unknown cgroup driver {0:?}")]
    UnknownDriver(String),
    #[error("the systemd cgroup driver needs systemd as the init system, and {0} is missing")]
    SystemdNotRunning(PathBuf),
    #[error("{0}")]
    Systemd(Box<driver::systemd::BusError>),
    #[error("pod resources: {0}")]
    Quantity(#[from] QuantityError),
}
