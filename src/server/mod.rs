//! The kubelet's HTTP servers: healthz on localhost and the unauthenticated read-only API.

mod healthz;
pub mod lookup;
mod pods;
mod streaming;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::cli::Settings;
use crate::cri::RuntimeClient;
use crate::pleg::PlegHealth;
use crate::status::StatusStore;
use crate::sync::SyncLoopHealth;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("serve on {addr}: {source}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Clone)]
pub struct ServerState {
    pub status: Arc<StatusStore>,
    pub sync_health: Arc<SyncLoopHealth>,
    pub pleg_health: Arc<PlegHealth>,
    /// The sync loop is unhealthy when it has not gone round for this long.
    pub sync_loop_deadline: Duration,
    pub cri: RuntimeClient,
    /// The effective flags and configuration, for /configz and the endpoints' limits.
    pub settings: Arc<Settings>,
    pub node_name: String,
    /// The API server client (token and access reviews); None when standalone.
    pub api: Option<kube::Client>,
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
}

/// What only the authenticated port serves, and only with enableDebuggingHandlers: logs,
/// exec/attach/port-forward, configz, running pods.
#[allow(dead_code)]
fn debugging_routes() -> Router<ServerState> {
    Router::new().merge(streaming::routes())
}

pub fn healthz_router(state: ServerState) -> Router {
    healthz_routes().with_state(state)
}

pub fn read_only_router(state: ServerState) -> Router {
    default_routes().with_state(state)
}

/// Binds first (so a taken port is a start-up error), then serves until cancelled.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, ServerError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    cancel: CancellationToken,
) -> Result<(), ServerError> {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    tracing::info!(%addr, "Serving");
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { cancel.cancelled().await })
        .await
        .map_err(|source| ServerError::Serve { addr, source })
}
