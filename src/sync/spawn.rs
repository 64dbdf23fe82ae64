//! Builds the sync loop from its settings and the managers it drives, and starts it with the
//! watches its admission reads: the runtime's features (for security admission) and, in API
//! server mode, the node's labels.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::admission::Allocatable;
use super::security::{SecurityAdmission, watch_runtime_features};
use super::sysctls::{SysctlAllowlist, SysctlError, kernel_version};
use super::{Admission, Managers, SyncLoop, SyncLoopHealth, SyncLoopInputs, SyncSettings};
use crate::cri::RuntimeClient;
use crate::events::EventRecorder;
use crate::eviction::Pressure;
use crate::gc::KnownPods;
use crate::tasks::Tasks;

/// What the sync loop admits pods with, besides its own settings.
pub struct SecuritySettings {
    sysctls: SysctlAllowlist,
    apparmor_enabled: bool,
}

impl SecuritySettings {
    /// Fails on an `allowedUnsafeSysctls` pattern upstream refuses.
    pub fn new(settings: &crate::config::Settings) -> Result<Self, SysctlError> {
        Ok(SecuritySettings {
            sysctls: SysctlAllowlist::new(
                kernel_version(),
                &settings.config.allowed_unsafe_sysctls,
            )?,
            // Read once at start, as upstream does.
            apparmor_enabled: crate::runtime::apparmor::host_enabled(std::path::Path::new("/sys")),
        })
    }
}

/// The node as the API server has it, for admission in API server mode.
pub struct ApiNode {
    pub client: kube::Client,
    pub name: String,
    /// The labels the kubelet registers the node with, until the watch has read them.
    pub labels: BTreeMap<String, String>,
}

/// Everything the sync loop works with that other parts own.
pub struct SyncDeps {
    pub managers: Managers,
    pub cri: RuntimeClient,
    pub events: EventRecorder,
    /// Shared with the garbage collectors.
    pub known_pods: Arc<KnownPods>,
    /// Where the allocation checkpoint lives.
    pub root_dir: PathBuf,
    pub runtime_name: String,
    /// What the node offers pods.
    pub allocatable: Allocatable,
    /// None when standalone: nothing is admitted against the node then.
    pub api_node: Option<ApiNode>,
    pub shutting_down: watch::Receiver<bool>,
    pub pressure: watch::Receiver<Pressure>,
    /// Device plugins' devices, admitted for every pod (static ones too, as upstream's).
    pub devices: Arc<crate::cm::devicemanager::DeviceManager>,
    pub cpus: Arc<crate::cm::cpumanager::CpuManager>,
    pub memory: Arc<crate::cm::memorymanager::MemoryManager>,
    pub topology: Arc<crate::cm::topologymanager::TopologyManager>,
}

/// Starts the sync loop; its health is for healthz.
pub fn spawn(
    settings: SyncSettings,
    security: SecuritySettings,
    deps: SyncDeps,
    inputs: SyncLoopInputs,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> Arc<SyncLoopHealth> {
    let health = Arc::new(SyncLoopHealth::default());
    let (features_tx, supplemental_groups_policy) = watch::channel(false);
    tasks.background(
        "runtime features",
        watch_runtime_features(deps.cri, features_tx, cancel.child_token()),
    );
    let sync_loop = SyncLoop::new(
        deps.managers,
        settings.resync,
        deps.runtime_name,
        settings.max_pods,
        health.clone(),
        cancel.child_token(),
    )
    .with_known_pods(deps.known_pods)
    .with_devices(deps.devices)
    .with_cpus(deps.cpus)
    .with_memory(deps.memory)
    .with_topology(deps.topology)
    .with_allocation_checkpoint(&deps.root_dir)
    .with_security(
        SecurityAdmission {
            sysctls: security.sysctls,
            apparmor_enabled: security.apparmor_enabled,
            supplemental_groups_policy,
        },
        deps.events,
    );
    let sync_loop = match deps.api_node {
        // Pods from the API server are admitted against what the node offers them and against
        // its labels as they are now (a user may add some after registration).
        Some(node) => {
            let watched = crate::node::labels::spawn_watch(
                node.client,
                node.name,
                node.labels,
                tasks,
                cancel,
            );
            sync_loop.with_admission(Admission {
                allocatable: deps.allocatable,
                node_labels: watched.labels,
                labels_synced: watched.synced,
                shutting_down: deps.shutting_down,
                pressure: deps.pressure,
                fresh_labels: Some(watched.fresh),
            })
        }
        // Standalone: nothing is admitted against it, but resizes still must fit.
        None => sync_loop.with_node_allocatable(deps.allocatable),
    };
    sync_loop.start(inputs, tasks);
    health
}
