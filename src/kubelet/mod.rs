//! Wiring, in the order of the data flow: pod sources are merged into updates for the sync
//! loop, which drives one worker per pod; workers ask the runtime manager to converge the pod
//! over the CRI, with pod cgroups from cm; the PLEG relists the runtime and wakes workers on
//! change; status turns runtime state into API pod status; the node-level loops (eviction,
//! garbage collection, shutdown, node status) watch over the node; the servers read it all.
//! Each part builds its settings from the kubelet's own and starts its own tasks; this room
//! only builds and starts them: the pod pipeline in `pods`, the node-level loops in
//! `node_loops`.
//!
//! Shutting down leaves pods running: a restarted kubelet adopts them.

mod error;
mod no_effect;
mod node_loops;
mod plugins;
mod pods;
mod preflight;
#[cfg(test)]
mod resource_settings_tests;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cm::CgroupManager;
use crate::config::Settings;
use crate::cri::RuntimeClient;
use crate::events::{EventRecorder, EventType};
use crate::host::Host;
use crate::server::{Listeners, ServerState};
use crate::status::StatusStore;
use crate::sync::{SecuritySettings, SyncLoopInputs};
use crate::tasks::Tasks;
use crate::{certificate, cm, events, logrotate, pleg, podresources, sources, status};
pub use error::KubeletError;

/// What most parts are built with, made before any of them starts.
struct Core {
    settings: Settings,
    host: Host,
    node_name: String,
    cri: RuntimeClient,
    cgroups: Arc<CgroupManager>,
    /// None when standalone.
    api: Option<kube::Client>,
    events: EventRecorder,
    status: Arc<StatusStore>,
    devices: Arc<cm::devicemanager::DeviceManager>,
    cpus: Arc<cm::cpumanager::CpuManager>,
    memory: Arc<cm::memorymanager::MemoryManager>,
    topology: Arc<cm::topologymanager::TopologyManager>,
}

/// Runs the kubelet until `cancel` fires (pods keep running), or until a critical loop ends.
pub async fn run(settings: Settings, cancel: CancellationToken) -> Result<(), KubeletError> {
    // Small procfs reads and one statvfs, once, before anything runs.
    let host = Host::detect(&settings.flags.node_ip, &settings.flags.root_dir);
    preflight::check_supported(&settings, &host)?;
    let cgroup_version = cm::layout::Layout::detect(std::path::Path::new("/")).ok();
    let on_cgroup_v1 = preflight::check_cgroup_version(
        settings.config.fail_cgroup_v1,
        cgroup_version.map(|l| l.version()),
    )?;
    let node_name = settings.node_name();
    let (cfg, root_dir) = (&settings.config, &settings.flags.root_dir);
    let version = crate::config::KUBELET_VERSION;
    info!(node = %node_name, node_ip = %host.node_ip, version, "Starting kubelet");
    preflight::apply_oom_score_adj(cfg.oom_score_adj);
    preflight::create_dirs(root_dir, std::path::Path::new(&cfg.pod_logs_dir))?;
    let security = SecuritySettings::new(&settings)?;
    let (cri, runtime_version) = preflight::connect_runtime(&settings).await?;
    let mut tasks = Tasks::default();
    logrotate::spawn(&settings, cri.clone(), &mut tasks, &cancel)?;
    let mut cgroup_settings = cm::CgroupSettings::from(&settings);
    cgroup_settings.driver = preflight::cgroup_driver(&settings, &cri).await?;
    let cgroups = cgroup_settings.start()?;
    // A state file of another policy, or one this machine no longer matches, stops the kubelet
    // here, before any pod runs (as upstream's container manager does).
    let cpus = cm::cpumanager::CpuManager::start(&(&settings).into())?;
    cpus.spawn_reconcile(cri.clone(), &mut tasks, &cancel);
    let memory_settings = cm::memorymanager::MemorySettings::new(&settings, &host.facts);
    let memory = cm::memorymanager::MemoryManager::start(&memory_settings)?;
    let topology = cm::topologymanager::TopologyManager::start(&(&settings).into())?;

    // API server mode (after TLS bootstrap), then the ports: bad TLS or auth settings and
    // taken ports stop the kubelet here, before any pod runs.
    let client_settings = certificate::ClientSettings::from(&settings);
    let api = tokio::select! {
        api = certificate::connect(&client_settings, &mut tasks, &cancel) => api?,
        _ = cancel.cancelled() => return Ok(()),
    };
    let (listeners, server_settings) = Listeners::bind(&settings, &host, api.as_ref()).await?;
    let pod_resources = podresources::bind(root_dir)?;
    // Upstream's fixed folder, whatever --root-dir says: plugins look for the kubelet there.
    let devices = cm::devicemanager::DeviceManager::new(
        std::path::Path::new(cm::devicemanager::DEVICE_PLUGIN_DIR),
        &host.facts.boot_id,
        cancel.child_token(),
    );
    let device_registration = devices.bind()?;
    devices.spawn(device_registration, &mut tasks);
    let events = events::spawn(api.as_ref(), (&settings).into(), &mut tasks, &cancel);
    if on_cgroup_v1 {
        let warning = preflight::CGROUP_V1_WARNING;
        events.node(&node_name, None, EventType::Warning, "CgroupV1", warning);
    }

    // Pod sources → PodConfig → sync loop ◄── PLEG; the status syncer follows the static pods
    // and the API server's mirror pods.
    let sources = sources::spawn((&settings).into(), api.as_ref(), &mut tasks, &cancel);
    let mirror_inputs = status::MirrorInputs {
        static_pods: sources.static_pods,
        mirror_pods: sources.mirror_pods,
    };
    let status = status::spawn(api.as_ref(), &node_name, mirror_inputs, &mut tasks, &cancel);
    let core = Core {
        settings,
        host,
        node_name,
        cri,
        cgroups,
        api,
        events,
        status,
        devices,
        cpus,
        memory,
        topology,
    };
    // Upstream keeps the runtime's container events behind the EventedPLEG gate, off by
    // default; we follow them whenever the runtime offers them, unless the gate says false.
    let evented = core
        .settings
        .config
        .feature_gates
        .get("EventedPLEG")
        .copied()
        .unwrap_or(true);
    let pleg = pleg::spawn(core.cri.clone(), evented, &mut tasks, &cancel);
    let csi_drivers = plugins::spawn(&core, &mut tasks, &cancel)?;
    let (managers, probe_changes) =
        pods::managers(&core, runtime_version, csi_drivers, &mut tasks, &cancel);
    let runtime_pods = pleg.runtime_pods.clone();
    let volumes = managers.parts.volumes.clone();
    let node = node_loops::spawn(&core, volumes, runtime_pods, &mut tasks, &cancel)?;
    let stats = node.stats;
    let sync_inputs = SyncLoopInputs {
        pod_updates: sources.pods,
        pleg_events: pleg.events,
        probe_changes,
        runtime_pods: pleg.runtime_pods,
        sources_ready: sources.ready,
        evictions: node.evictions,
    };
    let sync_health = pods::spawn_sync(
        &core,
        managers,
        security,
        &node.view,
        sync_inputs,
        &mut tasks,
        &cancel,
    );
    let serving_cert = listeners.serving_cert.clone();
    node_loops::spawn_node_status(
        &core,
        pleg.health.clone(),
        node.view,
        serving_cert,
        &mut tasks,
        &cancel,
    );

    // The servers, which only read.
    crate::metrics::kubelet()
        .node_name
        .set(&[&core.node_name], 1.0);
    stats.spawn_sampler(&mut tasks, &cancel);
    let gates = &core.settings.config.feature_gates;
    let pod_resources_service = podresources::PodResourcesService::new(
        core.status.clone(),
        podresources::get_enabled(gates),
    )
    .with_devices(core.devices.clone())
    .with_cpus(core.cpus.clone())
    .with_memory(core.memory.clone());
    podresources::spawn(pod_resources, pod_resources_service, &mut tasks, &cancel);
    let state = ServerState {
        status: core.status,
        sync_health,
        pleg_health: pleg.health,
        sync_loop_deadline: crate::sync::SyncSettings::from(&core.settings).loop_deadline,
        cri: core.cri,
        settings: Arc::new(server_settings),
        stats,
    };
    listeners.spawn(state, &mut tasks, &cancel);
    info!("Kubelet started");
    Ok(tasks.run_until(cancel).await?)
}
