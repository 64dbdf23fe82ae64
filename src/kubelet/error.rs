//! Why the kubelet could not start, or stopped on its own.

use std::path::PathBuf;

use crate::tasks::TaskError;
use crate::{certificate, logrotate, podresources, server};

/// Why the kubelet could not start, or stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// The container runtime did not answer.
    #[error("container runtime at {endpoint} is not usable")]
    Runtime {
        /// `containerRuntimeEndpoint`.
        endpoint: String,
        /// What the CRI client saw.
        #[source]
        source: crate::cri::CriError,
    },
    /// The node's cgroups could not be set up.
    #[error("cgroups: {0}")]
    Cgroup(#[from] crate::cm::CgroupError),
    /// One of the kubelet's folders could not be made.
    #[error("{path}")]
    Io {
        /// The folder.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// TLS bootstrap or the API client failed.
    #[error(transparent)]
    ApiServer(#[from] certificate::ConnectError),
    /// A port could not be bound, or TLS or authentication settings are unusable.
    #[error(transparent)]
    Server(#[from] server::ServerError),
    /// The pod-resources socket could not be bound.
    #[error(transparent)]
    PodResources(#[from] podresources::PodResourcesError),
    /// The device plugin folder or its registration socket could not be set up.
    #[error(transparent)]
    DeviceManager(#[from] crate::cm::devicemanager::DeviceManagerError),
    /// The CPU manager's policy, options or state file are unusable.
    #[error(transparent)]
    CpuManager(#[from] crate::cm::cpumanager::CpuManagerError),
    /// The memory manager's policy or reservedMemory is unusable, or its state file belongs
    /// to another policy or another machine.
    #[error(transparent)]
    MemoryManager(#[from] crate::cm::memorymanager::MemoryManagerError),
    /// The topology manager's policy, scope or options are unusable, or the machine has more
    /// NUMA nodes than it allows.
    #[error(transparent)]
    TopologyManager(#[from] crate::cm::topologymanager::TopologyManagerError),
    /// The plugin registry folder could not be made.
    #[error(transparent)]
    PluginManager(#[from] crate::pluginmanager::PluginManagerError),
    /// The eviction thresholds cannot be parsed.
    #[error("eviction settings: {0}")]
    Eviction(#[from] crate::eviction::thresholds::ThresholdError),
    /// The container log rotation settings are unusable.
    #[error("failed to initialize container log manager")]
    LogRotation(#[from] logrotate::PolicyError),
    /// failCgroupV1 is set and the host mounts cgroup v1.
    #[error(
        "kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is in maintenance mode"
    )]
    CgroupV1Refused,
    /// A setting this version cannot honour.
    #[error("{0} is not supported by this version of kubelet-rs")]
    Unsupported(String),
    /// `allowedUnsafeSysctls` holds a pattern upstream refuses.
    #[error(transparent)]
    Sysctls(#[from] crate::sync::sysctls::SysctlError),
    /// A critical loop ended before shutdown.
    #[error(transparent)]
    Task(#[from] TaskError),
}
