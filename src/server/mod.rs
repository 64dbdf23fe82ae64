//! The kubelet's HTTP servers: healthz on localhost, the unauthenticated read-only API, and
//! the authenticated API over TLS (`port`, 10250).

pub mod auth;
mod configz;
mod fallbacks;
mod healthz;
mod http_metrics;
mod idle;
mod listen;
mod logs;
pub mod lookup;
mod pods;
mod podstartup;
mod runningpods;
mod stats;
mod streaming;
pub mod tls;
mod trace;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get};
use tokio_util::sync::CancellationToken;

use crate::config::{KubeletConfiguration, Settings};
use crate::cri::RuntimeClient;
use crate::host::Host;
use crate::pleg::PlegHealth;
use crate::status::StatusStore;
use crate::sync::SyncLoopHealth;
use crate::tasks::Tasks;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Auth(#[from] auth::AuthError),
    #[error("invalid address {0:?}")]
    Address(String),
}

/// What the handlers need of the kubelet's settings.
#[derive(Clone, Debug)]
pub struct ServerSettings {
    /// The effective configuration as /configz shows it, rendered once.
    pub configz: Arc<serde_json::Value>,
    pub debugging_handlers: bool,
    pub system_log_handler: bool,
}

impl From<&KubeletConfiguration> for ServerSettings {
    fn from(cfg: &KubeletConfiguration) -> Self {
        ServerSettings {
            configz: Arc::new(cfg.to_configz_json()),
            debugging_handlers: cfg.enable_debugging_handlers,
            system_log_handler: cfg.enable_system_log_handler,
        }
    }
}

#[derive(Clone)]
pub struct ServerState {
    pub status: Arc<StatusStore>,
    pub sync_health: Arc<SyncLoopHealth>,
    pub pleg_health: Arc<PlegHealth>,
    /// The sync loop is unhealthy when it has not gone round for this long.
    pub sync_loop_deadline: Duration,
    pub cri: RuntimeClient,
    pub settings: Arc<ServerSettings>,
    /// Node and pod statistics for /stats/summary and the metrics endpoints.
    pub stats: Arc<crate::stats::StatsProvider>,
}

impl ServerState {
    /// A state for handler tests: no pods, default settings, no API server.
    #[cfg(test)]
    pub fn for_tests(cri: RuntimeClient) -> Self {
        // An empty cgroup v2 tree: handler tests never read cgroups, but the stats provider
        // needs a manager.
        let fs_root = std::env::temp_dir().join("krs-server-tests-fs");
        let base = fs_root.join("sys/fs/cgroup");
        let _ = std::fs::create_dir_all(&base);
        let _ = std::fs::write(base.join("cgroup.controllers"), "cpu memory pids\n");
        let cgroups = Arc::new(
            crate::cm::CgroupManager::with_fs_root(&fs_root, "/", true)
                .unwrap_or_else(|e| panic!("test cgroup tree: {e}")),
        );
        let status = Arc::new(StatusStore::default());
        let stats = Arc::new(crate::stats::StatsProvider::new(
            cri.clone(),
            cgroups,
            status.clone(),
            std::env::temp_dir(),
            "test-node".to_string(),
        ));
        ServerState {
            stats,
            status,
            sync_health: Arc::new(SyncLoopHealth::default()),
            pleg_health: Arc::new(PlegHealth::default()),
            sync_loop_deadline: Duration::from_secs(300),
            cri,
            settings: Arc::new(ServerSettings::from(&KubeletConfiguration::defaulted())),
        }
    }
}

fn healthz_routes() -> Router<ServerState> {
    Router::new()
        .route("/healthz", get(healthz::all))
        .route("/healthz/{check}", get(healthz::one))
}

/// What every API port serves, the read-only port included: health, pods, stats, metrics.
fn default_routes() -> Router<ServerState> {
    healthz_routes()
        .route("/pods", get(pods::list))
        .route("/pods/", get(pods::list))
        .merge(stats::routes())
}

/// What only the authenticated port serves, and only with enableDebuggingHandlers: logs,
/// exec/attach/port-forward, configz, running pods.
fn debugging_routes(system_logs: bool) -> Router<ServerState> {
    Router::new()
        .route("/configz", any(configz::get))
        .route("/runningpods", get(runningpods::list))
        .route("/runningpods/", get(runningpods::list))
        .route("/debug/pods/startup", get(podstartup::list))
        .route(
            "/debug/pods/startup/{namespace}/{name}",
            get(podstartup::one),
        )
        .merge(logs::routes(system_logs))
        .merge(streaming::routes())
}

pub fn healthz_router(state: ServerState) -> Router {
    healthz_routes().with_state(state)
}

/// The read-only port: the default routes; the debugging paths answer 405 as upstream's
/// unauthenticated server does.
pub fn read_only_router(state: ServerState) -> Router {
    default_routes()
        .merge(fallbacks::debugging_disabled())
        .fallback(fallbacks::not_found)
        .layer(axum::middleware::from_fn_with_state(
            "readonly",
            http_metrics::record,
        ))
        .with_state(state)
}

/// The authenticated port's routes, for handler tests: no API server, so only x509,
/// anonymous and AlwaysAllow work.
#[cfg(test)]
fn secure_router(state: ServerState, cfg: &KubeletConfiguration) -> Result<Router, ServerError> {
    let kubelet_auth = auth::KubeletAuth::from_config(cfg, "test-node", None)?;
    Ok(secure_router_with(state, kubelet_auth))
}

/// The authenticated port's routes: the default set, the debugging set when
/// enableDebuggingHandlers is on, all behind authentication and authorization (built at
/// start-up, before any pod runs, so bad settings stop the kubelet early). Handlers find the
/// caller as `Extension<auth::UserInfo>`, the TLS client certificates as
/// `Extension<auth::x509::PeerCertificates>` and the peer address as `ConnectInfo<SocketAddr>`.
pub fn secure_router_with(state: ServerState, kubelet_auth: auth::KubeletAuth) -> Router {
    let cfg = &state.settings;
    let routes = if cfg.debugging_handlers {
        default_routes().merge(debugging_routes(cfg.system_log_handler))
    } else {
        default_routes().merge(fallbacks::debugging_disabled())
    };
    // The fallback goes in before the layer so unknown paths are authenticated too (401, not
    // 404, for a stranger), as upstream's filter sees every request.
    routes
        .fallback(fallbacks::not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(kubelet_auth),
            auth::middleware,
        ))
        .layer(axum::middleware::from_fn(trace::span))
        // Outermost, so refused requests count too, as upstream counts before its filters.
        .layer(axum::middleware::from_fn_with_state(
            "readwrite",
            http_metrics::record,
        ))
        .with_state(state)
}

/// The API ports, bound and configured before anything runs: a taken port or bad TLS and
/// auth settings stop the kubelet at start, as upstream builds them first.
pub struct Listeners {
    secure: Option<(
        tokio::net::TcpListener,
        Arc<rustls::ServerConfig>,
        auth::KubeletAuth,
    )>,
    healthz: Option<tokio::net::TcpListener>,
    read_only: Option<tokio::net::TcpListener>,
    /// What 10250 serves; the serving certificate manager replaces it.
    pub serving_cert: Option<Arc<crate::certificate::dynamic::DynamicCert>>,
}

impl Listeners {
    /// Binds the ports the settings turn on. Also returns the handlers' settings, whose
    /// /configz shows the serving files in use (upstream fills in the generated pair's paths).
    pub async fn bind(
        settings: &Settings,
        host: &Host,
        api: Option<&kube::Client>,
    ) -> Result<(Self, ServerSettings), ServerError> {
        let cfg = &settings.config;
        let node_name = settings.node_name();
        let mut served = cfg.clone();
        let mut serving_cert = None;
        let secure = if cfg.enable_server {
            let ips = crate::host::serving_ips(&settings.flags.node_ip, &host.node_ip);
            let serving = tls::server_config(cfg, &settings.flags.cert_dir, &node_name, &ips)?;
            let auth = auth::KubeletAuth::from_config(cfg, &node_name, api)?;
            if let Some(files) = &serving.files {
                served.tls_cert_file = files.cert.to_string_lossy().into_owned();
                served.tls_private_key_file = files.key.to_string_lossy().into_owned();
            }
            serving_cert = Some(serving.cert);
            Some((
                bind(socket_addr(&cfg.address, cfg.port)?).await?,
                serving.config,
                auth,
            ))
        } else {
            None
        };
        let optional = |ip: &str, port: i32| (port > 0).then(|| socket_addr(ip, port));
        let healthz = match optional(&cfg.healthz_bind_address, cfg.healthz_port) {
            Some(addr) => Some(bind(addr?).await?),
            None => None,
        };
        let read_only = match optional(&cfg.address, cfg.read_only_port) {
            Some(addr) => Some(bind(addr?).await?),
            None => None,
        };
        let listeners = Listeners {
            secure,
            healthz,
            read_only,
            serving_cert,
        };
        Ok((listeners, ServerSettings::from(&served)))
    }

    /// Serves every bound port until `cancel`; each is a critical task.
    pub fn spawn(self, state: ServerState, tasks: &mut Tasks, cancel: &CancellationToken) {
        if let Some((listener, tls, auth)) = self.secure {
            let router = secure_router_with(state.clone(), auth);
            tasks.critical_fallible(
                "kubelet server",
                serve(listener, Some(tls), router, cancel.child_token()),
            );
        }
        if let Some(listener) = self.healthz {
            let router = healthz_router(state.clone());
            tasks.critical_fallible(
                "healthz server",
                serve(listener, None, router, cancel.child_token()),
            );
        }
        if let Some(listener) = self.read_only {
            let router = read_only_router(state);
            tasks.critical_fallible(
                "read-only server",
                serve(listener, None, router, cancel.child_token()),
            );
        }
    }
}

fn socket_addr(ip: &str, port: i32) -> Result<SocketAddr, ServerError> {
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| ServerError::Address(ip.to_string()))?;
    let port = u16::try_from(port).map_err(|_| ServerError::Address(format!("{ip}:{port}")))?;
    Ok(SocketAddr::new(ip, port))
}

/// Binds first (so a taken port is a start-up error), then serves until cancelled.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, ServerError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// Serves `router` until cancelled, over TLS when `tls` is given (the authenticated port).
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    cancel: CancellationToken,
) -> Result<(), ServerError> {
    listen::serve(listener, tls, router, cancel).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    fn state(
        configure: impl FnOnce(&mut KubeletConfiguration),
    ) -> (ServerState, KubeletConfiguration) {
        let mut state = ServerState::for_tests(RuntimeClient::unreachable());
        let mut cfg = KubeletConfiguration::defaulted();
        configure(&mut cfg);
        state.settings = Arc::new(ServerSettings::from(&cfg));
        (state, cfg)
    }

    async fn status(router: Router, path: &str) -> (u16, String) {
        let req = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = router.oneshot(req).await.unwrap();
        let code = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn read_only_port_refuses_debugging_paths_like_upstream() {
        let router = read_only_router(state(|_| {}).0);
        let (code, body) = status(router.clone(), "/exec/ns/pod/c?command=ls").await;
        assert_eq!(
            (code, body.as_str()),
            (405, "Debug endpoints are disabled.\n")
        );
        assert_eq!(status(router.clone(), "/logs/syslog").await.0, 405);
        assert_eq!(status(router.clone(), "/configz").await.0, 404);
        assert_eq!(status(router, "/pods").await.0, 200);
    }

    #[tokio::test]
    async fn system_log_handler_off_closes_logs_only() {
        let (st, cfg) = state(|c| {
            c.enable_system_log_handler = false;
            c.authorization.mode = "AlwaysAllow".into();
            c.authentication.anonymous.enabled = true;
            c.authentication.webhook.enabled = false;
        });
        let router = secure_router(st, &cfg).unwrap();
        let (code, body) = status(router.clone(), "/logs/").await;
        assert_eq!((code, body.as_str()), (405, "logs endpoint is disabled.\n"));
        // Container logs stay: a missing pod is a 404, not a 405.
        assert_eq!(status(router, "/containerLogs/ns/nope/c").await.0, 404);
    }
}
