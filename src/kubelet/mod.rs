//! Wiring, in the order of the data flow: pod sources are merged into updates for the sync
//! loop, which drives one worker per pod; workers ask the runtime manager to converge the pod
//! over the CRI, with pod cgroups from cm; the PLEG relists the runtime and wakes workers on
//! change; status turns runtime state into API pod status; the servers read it all. Each part
//! builds itself from its own slice of the settings and starts its own tasks.
//!
//! Shutting down leaves pods running: a restarted kubelet adopts them.

mod preflight;

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cm::CgroupSettings;
use crate::cm::allocatable::{self, AllocatableSettings};
use crate::config::Settings;
use crate::host::Host;
use crate::node::NodeSettings;
use crate::prober::ProbeManager;
use crate::runtime::images::ImagePuller;
use crate::runtime::{RuntimeManager, RuntimeSettings};
use crate::server::{Listeners, ServerState};
use crate::sync::admission::Allocatable;
use crate::sync::{Admission, SyncLoop, SyncLoopHealth, SyncLoopInputs, SyncSettings};
use crate::tasks::{TaskError, Tasks};
use crate::volume::VolumeManager;
use crate::{
    certificate, events, eviction, gc, logrotate, node, nodeshutdown, oom, pleg, podresources,
    server, sources, stats, status,
};

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
    /// The eviction thresholds cannot be parsed.
    #[error("eviction settings: {0}")]
    Eviction(String),
    /// The container log rotation settings are unusable.
    #[error("failed to initialize container log manager")]
    LogRotation(#[from] logrotate::PolicyError),
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

/// Runs the kubelet until `cancel` fires (pods keep running), or until a critical loop ends.
pub async fn run(settings: Settings, cancel: CancellationToken) -> Result<(), KubeletError> {
    // Small procfs reads and one statvfs, once, before anything runs.
    let host = Host::detect(&settings.flags.node_ip, &settings.flags.root_dir);
    preflight::check_supported(&settings, &host)?;
    let node_name = settings.node_name();
    let (cfg, root_dir) = (&settings.config, &settings.flags.root_dir);
    info!(node = %node_name, node_ip = %host.node_ip, version = crate::config::KUBELET_VERSION, "Starting kubelet");
    preflight::apply_oom_score_adj(cfg.oom_score_adj);
    preflight::create_dirs(root_dir, std::path::Path::new(&cfg.pod_logs_dir))?;
    let sysctls = crate::sync::sysctls::SysctlAllowlist::new(
        crate::sync::sysctls::kernel_version(),
        &cfg.allowed_unsafe_sysctls,
    )?;
    let (cri, runtime_version) = preflight::connect_runtime(&settings).await?;
    let runtime_name = runtime_version.name.clone();
    let mut tasks = Tasks::default();
    logrotate::spawn(&settings, cri.clone(), &mut tasks, &cancel)?;
    let mut cgroup_settings = CgroupSettings::from(&settings);
    cgroup_settings.driver = preflight::cgroup_driver(&settings, &cri).await?;
    let cgroups = cgroup_settings.start()?;

    // API server mode (after TLS bootstrap), then the ports: bad TLS or auth settings and
    // taken ports stop the kubelet here, before any pod runs.
    let client_settings = certificate::ClientSettings::from(&settings);
    let api = tokio::select! {
        api = certificate::connect(&client_settings, &mut tasks, &cancel) => api?,
        _ = cancel.cancelled() => return Ok(()),
    };
    let (listeners, server_settings) = Listeners::bind(&settings, &host, api.as_ref()).await?;
    let serving_cert = listeners.serving_cert.clone();
    let pod_resources = podresources::bind(root_dir)?;

    let events = events::spawn(api.as_ref(), (&settings).into(), &mut tasks, &cancel);
    let allocatable_settings = AllocatableSettings::from(&settings);
    allocatable::spawn_enforcement(
        cgroups.clone(),
        &host.facts,
        &allocatable_settings,
        node_name.clone(),
        events.clone(),
        &mut tasks,
        &cancel,
    );
    let oom_kills = oom::spawn(events.clone(), node_name.clone(), &mut tasks, &cancel);
    let runtime_settings = RuntimeSettings::new(&settings, &host);
    let pod_inputs = Arc::new(crate::podinputs::PodInputSource::new(api.clone()));
    let volumes = Arc::new(
        VolumeManager::new(
            runtime_settings.root_dir.clone(),
            pod_inputs.clone(),
            runtime_settings.node_allocatable(),
            events.clone(),
        )
        .with_runtime(runtime_version),
    );
    let runtime = Arc::new(
        RuntimeManager::new(
            cri.clone(),
            cgroups.clone(),
            ImagePuller::from_settings(cri.clone(), &settings),
            events.clone(),
            runtime_settings,
        )
        .with_oom_kills(oom_kills),
    );
    // Pod sources → PodConfig → sync loop ◄── PLEG; the status syncer follows the static pods
    // and the API server's mirror pods.
    let sources = sources::spawn((&settings).into(), api.as_ref(), &mut tasks, &cancel);
    let mirror_inputs = status::MirrorInputs {
        static_pods: sources.static_pods,
        mirror_pods: sources.mirror_pods,
    };
    let status = status::spawn(api.as_ref(), &node_name, mirror_inputs, &mut tasks, &cancel);
    let stats = Arc::new(
        stats::StatsProvider::new(
            cri.clone(),
            cgroups.clone(),
            status.clone(),
            root_dir.clone(),
            node_name.clone(),
        )
        .with_pod_logs_dir(PathBuf::from(&cfg.pod_logs_dir)),
    );
    let (kills, evictions) = eviction::queue();
    let (shutting_down_tx, shutting_down) = tokio::sync::watch::channel(false);
    if let Some(shutdown) = nodeshutdown::ShutdownSettings::from_settings(&settings) {
        nodeshutdown::spawn(
            shutdown,
            status.clone(),
            kills.clone(),
            shutting_down_tx,
            &mut tasks,
            &cancel,
        );
    }
    let (probes, probe_changes) = ProbeManager::new(cri.clone(), status.clone(), events.clone());

    let pleg = pleg::spawn(cri.clone(), &mut tasks, &cancel);
    let known_pods = Arc::new(gc::KnownPods::default());
    let gc_inputs = gc::GcInputs {
        cri: cri.clone(),
        events: events.clone(),
        known: known_pods.clone(),
        status: status.clone(),
        volumes: volumes.clone(),
        cgroups: cgroups.clone(),
        runtime_pods: pleg.runtime_pods.clone(),
    };
    // The eviction manager frees disk through the collectors before it evicts pods.
    let collectors = gc::spawn((&settings).into(), gc_inputs, &mut tasks, &cancel);
    let pressure = eviction::spawn(
        eviction::EvictionSettings::from_settings(&settings).map_err(KubeletError::Eviction)?,
        eviction::EvictionDeps {
            status: status.clone(),
            root_dir: root_dir.clone(),
            events: events.clone(),
            node_name: node_name.clone(),
            cri: cri.clone(),
            cgroups: cgroups.clone(),
            stats: stats.clone(),
            collectors,
        },
        kills,
        &mut tasks,
        &cancel,
    );
    let node_settings = NodeSettings::from_settings(&settings, &host.node_ip);
    let sync_settings = SyncSettings::from(&settings);
    let sync_health = Arc::new(SyncLoopHealth::default());
    let sync_loop = SyncLoop::new(
        crate::sync::Managers {
            runtime,
            volumes,
            probes,
            status: status.clone(),
            inputs: pod_inputs,
        },
        sync_settings.resync,
        runtime_name,
        sync_settings.max_pods,
        sync_health.clone(),
        cancel.child_token(),
    )
    .with_known_pods(known_pods)
    .with_allocation_checkpoint(root_dir);
    let (features_tx, supplemental_groups_policy) = tokio::sync::watch::channel(false);
    tasks.background(
        "runtime features",
        crate::sync::security::watch_runtime_features(
            cri.clone(),
            features_tx,
            cancel.child_token(),
        ),
    );
    let sync_loop = sync_loop.with_security(
        crate::sync::security::SecurityAdmission {
            sysctls,
            apparmor_enabled: crate::runtime::apparmor::host_enabled(std::path::Path::new("/sys")),
            supplemental_groups_policy,
        },
        events.clone(),
    );
    let pod_allocatable = Allocatable::from_resources(&allocatable::allocatable(
        &allocatable_settings,
        &allocatable::capacity(&host.facts, &allocatable_settings),
    ));
    let sync_loop = match &api {
        // Pods from the API server are admitted against what the node offers them and against
        // its labels as they are now (a user may add some after registration).
        Some(client) => {
            let (labels_tx, node_labels) =
                tokio::sync::watch::channel(node::build::node_labels(&node_settings));
            let (synced_tx, labels_synced) = tokio::sync::watch::channel(false);
            tasks.background(
                "node label watch",
                node::labels::run_label_watch(
                    client.clone(),
                    node_name.clone(),
                    labels_tx,
                    synced_tx,
                    cancel.child_token(),
                ),
            );
            sync_loop.with_admission(Admission {
                allocatable: pod_allocatable,
                node_labels,
                labels_synced,
                shutting_down: shutting_down.clone(),
                pressure: pressure.clone(),
            })
        }
        // Standalone: nothing is admitted against it, but resizes still must fit.
        None => sync_loop.with_node_allocatable(pod_allocatable),
    };
    sync_loop.start(
        SyncLoopInputs {
            pod_updates: sources.pods,
            pleg_events: pleg.events,
            probe_changes,
            runtime_pods: pleg.runtime_pods,
            sources_ready: sources.ready,
            evictions,
        },
        &mut tasks,
    );
    if let Some(client) = &api {
        let (cri, health) = (cri.clone(), pleg.health.clone());
        let ctx = node::NodeContext {
            client: client.clone(),
            node_name: node_settings.hostname.clone(),
            settings: node_settings,
            cri,
            pleg: health,
            events,
            shutting_down,
            pressure,
            addresses: Arc::new(tokio::sync::watch::channel(Vec::new()).0),
        };
        let addresses = node::spawn(ctx, &mut tasks, &cancel);
        // Upstream starts the serving certificate manager only with an API client.
        if let Some(cert) = serving_cert.filter(|_| cfg.server_tls_bootstrap) {
            let rotation = certificate::serving::ServingRotation {
                client: client.clone(),
                cert_dir: settings.flags.cert_dir.clone(),
                node_name: node_name.clone(),
                timeout: cfg.runtime_request_timeout.0,
                cert,
                addresses,
            };
            tasks.background(
                "serving certificate rotation",
                certificate::serving::run(rotation, cancel.child_token()),
            );
        }
    }

    // The servers, which only read.
    crate::metrics::kubelet().node_name.set(&[&node_name], 1.0);
    stats.spawn_sampler(&mut tasks, &cancel);
    let service = podresources::PodResourcesService::new(
        status.clone(),
        podresources::get_enabled(&cfg.feature_gates),
    );
    let serving = podresources::serve(pod_resources, service, cancel.child_token());
    tasks.critical_fallible("pod-resources server", serving);
    let state = ServerState {
        status,
        sync_health,
        pleg_health: pleg.health,
        sync_loop_deadline: sync_settings.loop_deadline,
        cri,
        settings: Arc::new(server_settings),
        stats,
    };
    listeners.spawn(state, &mut tasks, &cancel);
    info!("Kubelet started");
    Ok(tasks.run_until(cancel).await?)
}
