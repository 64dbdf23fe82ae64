//! The loops that watch over the node rather than one pod: node allocatable enforcement,
//! eviction (which frees disk through the garbage collectors first), node shutdown, and in API
//! server mode the node's status and lease and its serving certificate.

use std::sync::Arc;

use k8s_openapi::api::core::v1::NodeAddress;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::{Core, KubeletError};
use crate::certificate::dynamic::DynamicCert;
use crate::cm::allocatable::{self, AllocatableSettings};
use crate::eviction::{Eviction, Pressure};
use crate::gc::KnownPods;
use crate::node::NodeSettings;
use crate::pleg::{PlegHealth, RuntimePods};
use crate::stats::StatsProvider;
use crate::sync::admission::Allocatable;
use crate::tasks::Tasks;
use crate::volume::VolumeManager;
use crate::{certificate, eviction, gc, node, nodeshutdown};

/// What the node-level loops tell the pod pipeline and the node status.
pub(super) struct NodeView {
    pub settings: NodeSettings,
    /// What the node offers pods.
    pub allocatable: Allocatable,
    /// The pods with workers, as the garbage collectors see them.
    pub known_pods: Arc<KnownPods>,
    pub shutting_down: watch::Receiver<bool>,
    pub pressure: watch::Receiver<Pressure>,
}

pub(super) struct NodeLoops {
    pub view: NodeView,
    /// Pods the eviction manager and the shutdown manager fail, for the sync loop.
    pub evictions: mpsc::Receiver<Eviction>,
    /// Node and pod stats, sampled for the eviction manager and served.
    pub stats: Arc<StatsProvider>,
}

/// Starts allocatable enforcement, node shutdown, the garbage collectors and eviction, with
/// the stats provider eviction decides on.
pub(super) fn spawn(
    core: &Core,
    volumes: Arc<VolumeManager>,
    runtime_pods: watch::Receiver<RuntimePods>,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> Result<NodeLoops, KubeletError> {
    let settings = &core.settings;
    let stats = StatsProvider::new(
        core.cri.clone(),
        core.cgroups.clone(),
        core.status.clone(),
        settings.flags.root_dir.clone(),
        core.node_name.clone(),
    );
    let pod_logs_dir = std::path::PathBuf::from(&settings.config.pod_logs_dir);
    // KubeletPSI is beta and on by default in upstream v1.34.
    let psi = settings.config.feature_gates.get("KubeletPSI").copied();
    let claimed = crate::stats::ClaimedVolumes {
        volumes: volumes.in_place(),
        drivers: volumes.csi_drivers(),
    };
    let stats = Arc::new(
        stats
            .with_pod_logs_dir(pod_logs_dir)
            .with_psi(psi.unwrap_or(true))
            .with_claimed_volumes(claimed),
    );
    let allocatable_settings = AllocatableSettings::from(settings);
    let (facts, node_name) = (&core.host.facts, core.node_name.clone());
    let (cgroups, events) = (core.cgroups.clone(), core.events.clone());
    allocatable::spawn_enforcement(
        cgroups,
        facts,
        &allocatable_settings,
        node_name,
        events,
        tasks,
        cancel,
    )?;
    let capacity = allocatable::capacity(facts, &allocatable_settings);
    let allocatable = allocatable::allocatable(&allocatable_settings, &capacity);
    let (kills, evictions) = eviction::queue();
    let (shutting_down_tx, shutting_down) = watch::channel(false);
    if let Some(shutdown) = nodeshutdown::ShutdownSettings::from_settings(settings) {
        let status = core.status.clone();
        nodeshutdown::spawn(
            shutdown,
            status,
            kills.clone(),
            shutting_down_tx,
            tasks,
            cancel,
        );
    }
    let known_pods = Arc::new(KnownPods::default());
    let gc_inputs = gc::GcInputs {
        cri: core.cri.clone(),
        events: core.events.clone(),
        known: known_pods.clone(),
        status: core.status.clone(),
        volumes,
        cgroups: core.cgroups.clone(),
        runtime_pods,
    };
    let collectors = gc::spawn(settings.into(), gc_inputs, tasks, cancel);
    let deps = eviction::EvictionDeps {
        status: core.status.clone(),
        root_dir: settings.flags.root_dir.clone(),
        events: core.events.clone(),
        node_name: core.node_name.clone(),
        cri: core.cri.clone(),
        cgroups: core.cgroups.clone(),
        stats: stats.clone(),
        collectors,
    };
    let eviction_settings = eviction::EvictionSettings::from_settings(settings)?;
    let pressure = eviction::spawn(eviction_settings, deps, kills, tasks, cancel);
    let view = NodeView {
        settings: NodeSettings::from_settings(settings, &core.host.node_ip),
        allocatable: Allocatable::from_resources(&allocatable),
        known_pods,
        shutting_down,
        pressure,
    };
    Ok(NodeLoops {
        view,
        evictions,
        stats,
    })
}

/// In API server mode: registers the node and keeps its status and lease current, and keeps
/// the serving certificate issued (when `serverTLSBootstrap` asks for it).
pub(super) fn spawn_node_status(
    core: &Core,
    pleg: Arc<PlegHealth>,
    view: NodeView,
    serving_cert: Option<Arc<DynamicCert>>,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) {
    let Some(client) = &core.api else {
        return;
    };
    let ctx = node::NodeContext {
        client: client.clone(),
        node_name: view.settings.hostname.clone(),
        settings: view.settings,
        cri: core.cri.clone(),
        pleg,
        events: core.events.clone(),
        shutting_down: view.shutting_down,
        pressure: view.pressure,
        addresses: Arc::new(watch::channel(Vec::<NodeAddress>::new()).0),
        devices: Some(core.devices.clone()),
    };
    let addresses = node::spawn(ctx, tasks, cancel);
    let (client, name) = (client.clone(), core.node_name.clone());
    let settings = (&core.settings).into();
    certificate::serving::spawn(
        settings,
        client,
        name,
        serving_cert,
        addresses,
        tasks,
        cancel,
    );
}
