//! The kubelet API's command and streaming endpoints: /run, /exec, /attach and /portForward,
//! each with and without the pod UID in the path.
//!
//! Like the upstream kubelet with redirectContainerStreaming off, the kubelet proxies: it asks
//! the runtime (CRI Exec/Attach/PortForward) for a one-time URL on the runtime's streaming
//! server and splices the client's upgraded connection to it, so SPDY/3.1 and the
//! channel.k8s.io WebSocket protocols pass unchanged.

mod errors;
mod handlers;
mod options;
mod proxy;
mod runtime_url;
#[cfg(test)]
mod tests;

use axum::Router;
use axum::routing::{get, post};

use super::ServerState;

pub fn routes() -> Router<ServerState> {
    Router::new()
        .route("/run/{namespace}/{pod}/{container}", post(handlers::run))
        .route(
            "/run/{namespace}/{pod}/{uid}/{container}",
            post(handlers::run),
        )
        .route(
            "/exec/{namespace}/{pod}/{container}",
            get(handlers::exec).post(handlers::exec),
        )
        .route(
            "/exec/{namespace}/{pod}/{uid}/{container}",
            get(handlers::exec).post(handlers::exec),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            get(handlers::attach).post(handlers::attach),
        )
        .route(
            "/attach/{namespace}/{pod}/{uid}/{container}",
            get(handlers::attach).post(handlers::attach),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            get(handlers::port_forward).post(handlers::port_forward),
        )
        .route(
            "/portForward/{namespace}/{pod}/{uid}",
            get(handlers::port_forward).post(handlers::port_forward),
        )
}
