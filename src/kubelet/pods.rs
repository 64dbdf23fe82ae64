//! The pod pipeline's managers (what pods read from the API server, their volumes, the runtime
//! manager over the CRI, the probers) and the sync loop that drives them.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Core;
use super::node_loops::NodeView;
use crate::podinputs::PodInputSource;
use crate::prober::ProbeManager;
use crate::runtime::images::ImagePuller;
use crate::runtime::{RuntimeManager, RuntimeSettings};
use crate::sync::{ApiNode, Managers, SecuritySettings, SyncDeps, SyncLoopHealth, SyncLoopInputs};
use crate::tasks::Tasks;
use crate::volume::VolumeManager;
use crate::volume::image::RuntimeVersion;

pub(super) struct PodManagers {
    pub parts: Managers,
    /// The CRI runtime's name, as container IDs carry it.
    pub runtime_name: String,
}

/// Builds the managers the pod workers drive (and the OOM watcher the runtime reads), and the
/// stream of pods whose probe verdicts changed.
pub(super) fn managers(
    core: &Core,
    runtime_version: RuntimeVersion,
    csi_drivers: Arc<crate::volume::csi::Drivers>,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> (PodManagers, mpsc::Receiver<String>) {
    let (cri, events) = (&core.cri, &core.events);
    let oom_kills = crate::oom::spawn(
        events.clone(),
        core.node_name.clone(),
        core.cgroups.qos_dirs_v2(),
        tasks,
        cancel,
    );
    let settings = RuntimeSettings::new(&core.settings, &core.host);
    let inputs = Arc::new(PodInputSource::new(core.api.clone()));
    let volumes = VolumeManager::new(
        settings.root_dir.clone(),
        inputs.clone(),
        settings.node_allocatable(),
        events.clone(),
    )
    .with_csi(csi_drivers, &core.node_name);
    let images = ImagePuller::from_settings(cri.clone(), &core.settings);
    let runtime = RuntimeManager::new(
        cri.clone(),
        core.cgroups.clone(),
        images,
        events.clone(),
        settings,
    );
    let (probes, probe_changes) =
        ProbeManager::new(cri.clone(), core.status.clone(), events.clone());
    let runtime_name = runtime_version.name.clone();
    let managers = PodManagers {
        parts: Managers {
            runtime: Arc::new(
                runtime
                    .with_oom_kills(oom_kills)
                    .with_devices(core.devices.clone())
                    .with_cpus(core.cpus.clone())
                    .with_memory(core.memory.clone()),
            ),
            volumes: Arc::new(volumes.with_runtime(runtime_version)),
            probes,
            status: core.status.clone(),
            inputs,
        },
        runtime_name,
    };
    (managers, probe_changes)
}

/// Starts the sync loop over the managers; its health is for healthz.
pub(super) fn spawn_sync(
    core: &Core,
    managers: PodManagers,
    security: SecuritySettings,
    node: &NodeView,
    inputs: SyncLoopInputs,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> Arc<SyncLoopHealth> {
    let deps = SyncDeps {
        managers: managers.parts,
        cri: core.cri.clone(),
        events: core.events.clone(),
        known_pods: node.known_pods.clone(),
        root_dir: core.settings.flags.root_dir.clone(),
        runtime_name: managers.runtime_name,
        allocatable: node.allocatable.clone(),
        api_node: core.api.clone().map(|client| ApiNode {
            client,
            name: core.node_name.clone(),
            labels: crate::node::build::node_labels(&node.settings),
        }),
        shutting_down: node.shutting_down.clone(),
        pressure: node.pressure.clone(),
        devices: core.devices.clone(),
        cpus: core.cpus.clone(),
        memory: core.memory.clone(),
        topology: core.topology.clone(),
    };
    let settings = (&core.settings).into();
    crate::sync::spawn(settings, security, deps, inputs, tasks, cancel)
}
