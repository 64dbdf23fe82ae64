//! Container management: QoS classes, resource quantities and pod cgroups (cgroupfs driver,
//! cgroup v1 and v2).

pub mod allocatable;
pub mod layout;
pub mod manager;
pub mod qos;
pub mod quantity;
pub mod resources;

use std::path::PathBuf;

pub use layout::CgroupVersion;
pub use manager::CgroupManager;
pub use qos::{QosClass, pod_qos_class, qos_class};
pub use quantity::{QuantityError, parse_bytes, parse_cpu_millis};
pub use resources::{PodCgroupOptions, PodResources, pod_resources};

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
    #[error("pod resources: {0}")]
    Quantity(#[from] QuantityError),
}
