//! Wiring: builds every part from the settings, starts the loops, and stops them on shutdown.
//! Shutting down leaves pods running: a restarted kubelet adopts them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cli::Settings;
use crate::cm::{CgroupManager, PodCgroupOptions};
use crate::config;
use crate::cri::RuntimeClient;
use crate::events::{self, EventRecorder};
use crate::node;
use crate::pleg::{Pleg, PlegHealth};
use crate::runtime::images::ImagePuller;
use crate::runtime::{RuntimeManager, RuntimeSettings, dns, paths};
use crate::server::{self, ServerState};
use crate::status::StatusStore;
use crate::status::apiserver::StatusSyncer;
use crate::sync::admission::Allocatable;
use crate::sync::{Admission, SyncLoop, SyncLoopHealth, SyncLoopInputs};
use crate::{apiclient, certificate, podresources};

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("container runtime at {endpoint} is not usable")]
    Runtime {
        endpoint: String,
        #[source]
        source: crate::cri::CriError,
    },
    #[error("cgroups: {0}")]
    Cgroup(#[from] crate::cm::CgroupError),
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("client certificate")]
    Certificate(#[from] certificate::CertError),
    #[error(transparent)]
    Server(#[from] server::ServerError),
    #[error(transparent)]
    ApiClient(#[from] apiclient::ApiClientError),
    #[error(transparent)]
    PodResources(#[from] podresources::PodResourcesError),
    #[error("invalid address {0:?}")]
    Address(String),
    #[error("{0} is not supported by this version of kubelet-rs")]
    Unsupported(String),
}

/// Settings this version parses (so upstream configurations load) but cannot honour yet.
/// Refusing or warning here keeps the kubelet from silently doing something else.
fn check_supported(settings: &Settings) -> Result<(), KubeletError> {
    let cfg = &settings.config;
    if cfg.cgroup_driver != "cgroupfs" {
        return Err(KubeletError::Unsupported(format!(
            "cgroupDriver {:?} (only \"cgroupfs\")",
            cfg.cgroup_driver
        )));
    }
    if cfg.fail_swap_on && swap_enabled() {
        return Err(KubeletError::Unsupported(
            "running with swap on (failSwapOn is true; turn swap off or set failSwapOn: false)"
                .into(),
        ));
    }
    if !cfg.static_pod_url.is_empty() {
        warn!(url = %cfg.static_pod_url, "staticPodURL is not supported yet; ignoring it");
    }
    if settings.flags.bootstrap_kubeconfig.is_some() && settings.flags.kubeconfig.is_none() {
        warn!("--bootstrap-kubeconfig needs --kubeconfig to write to; running standalone");
    }
    Ok(())
}

const PLEG_RELIST_PERIOD: Duration = Duration::from_secs(1);
/// Upstream's bound on how long image pulls may take when nothing else limits them.
const IMAGE_PULL_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// How long shutdown waits for loops to notice cancellation.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

fn create_dir(path: &std::path::Path) -> Result<(), KubeletError> {
    std::fs::create_dir_all(path).map_err(|source| KubeletError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// What API pods are admitted against: the node's allocatable resources and labels, exactly
/// as it registers them.
fn admission(settings: &Settings, node_ip: &str) -> Admission {
    use crate::cm::quantity::parse_nano;
    let node_settings = node::NodeSettings::from_settings(settings, node_ip);
    let (allocatable, node_labels) = node::admission_view(&node_settings, &settings.flags.root_dir);
    let get = |name: &str, scale: i128| {
        allocatable
            .get(name)
            .and_then(|q| parse_nano(q).ok())
            .map(|n| (n / scale) as i64)
            .unwrap_or(0)
    };
    Admission {
        allocatable: Allocatable {
            cpu_millis: get("cpu", 1_000_000),
            memory_bytes: get("memory", 1_000_000_000),
            pods: get("pods", 1_000_000_000),
        },
        node_labels,
    }
}

/// Whether /proc/swaps lists any active swap device (it always has a header line).
fn swap_enabled() -> bool {
    std::fs::read_to_string("/proc/swaps")
        .map(|t| t.lines().skip(1).any(|l| !l.trim().is_empty()))
        .unwrap_or(false)
}

/// The node's IP: --node-ip, else the address of the interface holding the default route.
/// Connecting a UDP socket only selects a route; no packet is sent.
fn detect_node_ip(configured: &[IpAddr]) -> String {
    if let Some(ip) = configured.first() {
        return ip.to_string();
    }
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").and_then(|s| {
        s.connect("192.0.2.1:9")?;
        s.local_addr()
    });
    match probe {
        Ok(addr) if !addr.ip().is_unspecified() => addr.ip().to_string(),
        _ => "127.0.0.1".into(),
    }
}

/// Addresses the self-signed serving certificate names: --node-ip and the detected node IP.
fn serving_ips(configured: &[IpAddr], detected: &str) -> Vec<IpAddr> {
    let mut ips = configured.to_vec();
    if let Ok(ip) = detected.parse::<IpAddr>()
        && !ips.contains(&ip)
    {
        ips.push(ip);
    }
    ips
}

fn machine_memory_bytes() -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<i64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn machine_cpu_millis() -> i64 {
    std::thread::available_parallelism()
        .map(|n| n.get() as i64 * 1000)
        .unwrap_or(1000)
}

fn apply_oom_score_adj(value: i32) {
    if let Err(err) = std::fs::write("/proc/self/oom_score_adj", value.to_string()) {
        // Lowering it needs CAP_SYS_RESOURCE; running without is allowed, just less protected.
        warn!(value, %err, "Failed to set the kubelet's oom_score_adj");
    }
}

fn socket_addr(ip: &str, port: i32) -> Result<SocketAddr, KubeletError> {
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| KubeletError::Address(ip.to_string()))?;
    let port = u16::try_from(port).map_err(|_| KubeletError::Address(format!("{ip}:{port}")))?;
    Ok(SocketAddr::new(ip, port))
}

pub async fn run(settings: Settings, cancel: CancellationToken) -> Result<(), KubeletError> {
    check_supported(&settings)?;
    let flags = &settings.flags;
    let cfg = &settings.config;
    let node_name = settings.node_name();
    let node_ip = detect_node_ip(&flags.node_ip);
    info!(node = %node_name, %node_ip, version = crate::cli::KUBELET_VERSION, "Starting kubelet");

    apply_oom_score_adj(cfg.oom_score_adj);
    create_dir(&flags.root_dir)?;
    create_dir(&flags.root_dir.join("pods"))?;
    let logs_root = PathBuf::from(paths::POD_LOGS_ROOT);
    create_dir(&logs_root)?;

    let endpoint = cfg.container_runtime_endpoint.clone();
    let cri = RuntimeClient::connect(
        &endpoint,
        &cfg.image_service_endpoint,
        cfg.runtime_request_timeout.0,
    )
    .await
    .map_err(|source| KubeletError::Runtime {
        endpoint: endpoint.clone(),
        source,
    })?;
    let version = cri
        .version()
        .await
        .map_err(|source| KubeletError::Runtime {
            endpoint: endpoint.clone(),
            source,
        })?;
    info!(
        runtime = %version.runtime_name,
        runtime_version = %version.runtime_version,
        api = %version.runtime_api_version,
        "Container runtime connected"
    );

    let cgroup_options = PodCgroupOptions {
        enforce_cpu_limits: cfg.cpu_cfs_quota,
        cpu_cfs_period_us: cfg.cpu_cfs_quota_period.0.as_micros() as u64,
        pids_limit: Some(cfg.pod_pids_limit).filter(|n| *n > 0),
    };
    let cgroups = Arc::new(
        CgroupManager::new(&cfg.cgroup_root, cfg.cgroups_per_qos)?.with_options(cgroup_options),
    );
    cgroups.ensure_node_cgroups()?;

    let max_pulls = if cfg.serialize_image_pulls {
        1
    } else {
        cfg.max_parallel_image_pulls
            .map(|n| n.max(1) as usize)
            .unwrap_or(usize::MAX >> 4)
    };
    let images = ImagePuller::new(cri.clone(), max_pulls, IMAGE_PULL_DEADLINE);
    // TLS bootstrap first, so the kubeconfig exists by the time API mode is decided.
    if let (Some(kubeconfig), Some(bootstrap)) = (&flags.kubeconfig, &flags.bootstrap_kubeconfig) {
        let boot = certificate::bootstrap_if_needed(
            kubeconfig,
            Some(bootstrap),
            &flags.cert_dir,
            &node_name,
            cfg.runtime_request_timeout.0,
        );
        tokio::select! {
            r = boot => r?,
            _ = cancel.cancelled() => return Ok(()),
        }
    }
    // API server mode: --kubeconfig names an existing file, as upstream.
    let (client, reloader) = match flags.kubeconfig.as_ref().filter(|k| k.exists()) {
        Some(path) => {
            let (client, reloader) =
                apiclient::reloadable(path, cfg.runtime_request_timeout.0).await?;
            (Some(client), Some(reloader))
        }
        None => (None, None),
    };
    // The API port's TLS and auth are settled before anything runs (bad settings stop the
    // kubelet here, as upstream builds both first); the serving files then show in /configz,
    // which upstream fills in with the generated pair's paths.
    let mut served_settings = settings.clone();
    let secure = if cfg.enable_server {
        let ips = serving_ips(&flags.node_ip, &node_ip);
        let (tls, files) = server::tls::server_config(cfg, &flags.cert_dir, &node_name, &ips)
            .map_err(server::ServerError::from)?;
        let auth = server::auth::KubeletAuth::from_config(cfg, &node_name, client.as_ref())
            .map_err(server::ServerError::from)?;
        served_settings.config.tls_cert_file = files.cert.to_string_lossy().into_owned();
        served_settings.config.tls_private_key_file = files.key.to_string_lossy().into_owned();
        let listener = server::bind(socket_addr(&cfg.address, cfg.port)?).await?;
        Some((listener, tls, auth))
    } else {
        None
    };
    let mut tasks = JoinSet::new();
    // Events go to the API server when there is one; the log gets them either way.
    let recorder = match &client {
        Some(c) => {
            let (recorder, sink) = events::start(
                c.clone(),
                node_name.clone(),
                cfg.event_record_qps,
                cfg.event_burst,
                cancel.child_token(),
            );
            tasks.spawn(sink);
            recorder
        }
        None => EventRecorder::default(),
    };
    if cfg.cgroups_per_qos {
        use crate::cm::allocatable;
        let capacity = allocatable::Capacity {
            cpu_millis: machine_cpu_millis(),
            memory_bytes: machine_memory_bytes(),
            pids: allocatable::pid_max(),
        };
        let limits = allocatable::pods_limits(
            capacity,
            &cfg.enforce_node_allocatable,
            [&cfg.system_reserved, &cfg.kube_reserved],
        );
        tasks.spawn(allocatable::enforce(
            cgroups.clone(),
            limits,
            node_name.clone(),
            recorder.clone(),
            cancel.child_token(),
        ));
    }
    let runtime = Arc::new(
        RuntimeManager::new(
            cri.clone(),
            cgroups.clone(),
            images,
            recorder.clone(),
            RuntimeSettings {
                node_ip: node_ip.clone(),
                logs_root,
                root_dir: flags.root_dir.clone(),
                dns: dns::DnsSettings {
                    cluster_dns: cfg.cluster_dns.clone(),
                    cluster_domain: cfg.cluster_domain.clone(),
                    host: dns::load_host_resolv_conf(std::path::Path::new(&cfg.resolv_conf)),
                },
                machine_memory: machine_memory_bytes(),
                machine_cpu_millis: machine_cpu_millis(),
                cgroup_options,
                runtime_handler: String::new(),
            },
        )
        .with_api_client(client.clone()),
    );
    let (status_tx, status_rx) = mpsc::channel(1024);
    let status = Arc::new(match client {
        Some(_) => StatusStore::with_notifier(status_tx),
        None => StatusStore::default(),
    });

    if let (Some(kubeconfig), Some(reloader), true) =
        (&flags.kubeconfig, reloader, cfg.rotate_certificates)
    {
        tasks.spawn(certificate::run_rotation(
            kubeconfig.clone(),
            flags.cert_dir.clone(),
            node_name.clone(),
            cfg.runtime_request_timeout.0,
            reloader,
            cancel.child_token(),
        ));
    }
    let max_pods = cfg.max_pods.max(1) as usize;

    // Pod sources → PodConfig → sync loop.
    let (source_tx, source_rx) = mpsc::channel(16);
    let (updates_tx, updates_rx) = mpsc::channel(64);
    let mut sources: Vec<&'static str> = Vec::new();
    if !cfg.static_pod_path.is_empty() {
        let path = &cfg.static_pod_path;
        sources.push(config::FILE_SOURCE);
        tasks.spawn(config::file::run_file_source(
            PathBuf::from(path),
            node_name.clone(),
            cfg.file_check_frequency.0,
            source_tx.clone(),
            cancel.child_token(),
        ));
    }
    if let Some(client) = &client {
        sources.push(config::API_SOURCE);
        tasks.spawn(config::api::run_api_source(
            client.clone(),
            node_name.clone(),
            source_tx.clone(),
            cancel.child_token(),
        ));
        let syncer = StatusSyncer::new(client.clone(), status.clone(), node_name.clone());
        tasks.spawn(syncer.run(status_rx, cancel.child_token()));
    }
    drop(source_tx);
    let pod_config = config::PodConfig::new(&sources);
    let sources_ready = pod_config.ready_watch();
    tasks.spawn(config::run_pod_config(
        pod_config,
        source_rx,
        updates_tx,
        cancel.child_token(),
    ));

    let pleg_health = Arc::new(PlegHealth::default());
    let (pleg_tx, pleg_rx) = mpsc::channel(1000);
    let (pleg, runtime_pods) = Pleg::new(
        cri.clone(),
        PLEG_RELIST_PERIOD,
        pleg_tx,
        pleg_health.clone(),
    );
    tasks.spawn(pleg.run(cancel.child_token()));

    if let Some(client) = &client {
        let ctx = node::NodeContext::new(
            client.clone(),
            &settings,
            &node_ip,
            cri.clone(),
            pleg_health.clone(),
        )
        .with_events(recorder.clone());
        tasks.spawn(node::run(ctx, cancel.child_token()));
    }

    let sync_health = Arc::new(SyncLoopHealth::default());
    let sync_loop = SyncLoop::new(
        (runtime.clone(), status.clone()),
        cfg.sync_frequency.0,
        version.runtime_name.clone(),
        max_pods,
        sync_health.clone(),
        cancel.child_token(),
    );
    let sync_loop = match &client {
        Some(_) => sync_loop.with_admission(admission(&settings, &node_ip)),
        None => sync_loop,
    };
    tasks.spawn(sync_loop.run(SyncLoopInputs {
        pod_updates: updates_rx,
        pleg_events: pleg_rx,
        runtime_pods,
        sources_ready,
    }));

    crate::metrics::kubelet().node_name.set(&[&node_name], 1.0);
    let stats = Arc::new(crate::stats::StatsProvider::new(
        cri.clone(),
        cgroups.clone(),
        status.clone(),
        flags.root_dir.clone(),
        node_name.clone(),
        &cfg.cgroup_root,
        cfg.cgroups_per_qos,
    ));
    tasks.spawn(stats.clone().run_sampler(cancel.child_token()));
    let state = ServerState {
        status,
        sync_health,
        pleg_health,
        sync_loop_deadline: (cfg.sync_frequency.0 * 2).max(Duration::from_secs(300)),
        cri: cri.clone(),
        settings: Arc::new(served_settings),
        node_name: node_name.clone(),
        api: client.clone(),
        stats,
    };
    if let Some((listener, tls, auth)) = secure {
        let router = server::secure_router_with(state.clone(), auth);
        let c = cancel.child_token();
        tasks.spawn(async move {
            if let Err(err) = server::serve(listener, Some(tls), router, c).await {
                warn!(%err, "kubelet server stopped");
            }
        });
    }
    if cfg.healthz_port > 0 {
        let addr = socket_addr(&cfg.healthz_bind_address, cfg.healthz_port)?;
        let listener = server::bind(addr).await?;
        let router = server::healthz_router(state.clone());
        let c = cancel.child_token();
        tasks.spawn(async move {
            if let Err(err) = server::serve(listener, None, router, c).await {
                warn!(%err, "healthz server stopped");
            }
        });
    }
    if cfg.read_only_port > 0 {
        let addr = socket_addr(&cfg.address, cfg.read_only_port)?;
        let listener = server::bind(addr).await?;
        let router = server::read_only_router(state.clone());
        let c = cancel.child_token();
        tasks.spawn(async move {
            if let Err(err) = server::serve(listener, None, router, c).await {
                warn!(%err, "read-only server stopped");
            }
        });
    }
    let pod_resources = podresources::bind(&flags.root_dir)?;
    let service = podresources::PodResourcesService::new(
        state.status.clone(),
        podresources::get_enabled(&cfg.feature_gates),
    );
    let c = cancel.child_token();
    tasks.spawn(async move {
        if let Err(err) = podresources::serve(pod_resources, service, c).await {
            warn!(%err, "pod resources server stopped");
        }
    });
    info!("Kubelet started");

    cancel.cancelled().await;
    info!("Shutting down; pods keep running");
    let drained = tokio::time::timeout(SHUTDOWN_WAIT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!("Some loops did not stop in time");
        tasks.abort_all();
    }
    Ok(())
}
