//! The kubelet API's log endpoints: `/containerLogs/{namespace}/{pod}/{container}` (a
//! container's log, what `kubectl logs` reads through the API server) and `/logs/` (the
//! node's /var/log, files and directory listings).

mod containers;
mod cri_format;
mod files;
mod options;
mod reader;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::ServerState;

/// What upstream serves under /logs/.
pub const NODE_LOG_DIR: &str = "/var/log";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LogsError {
    /// A query parameter is not of its type (upstream: 400 "Unable to decode query.").
    #[error("Unable to decode query: {param}={value:?}: {reason}")]
    Decode {
        param: String,
        value: String,
        reason: String,
    },
    /// The options fail upstream's ValidatePodLogOptions (upstream: 422 "Invalid request.").
    #[error("Invalid request: {}", .0.join(", "))]
    Invalid(Vec<String>),
    #[error(
        "unable to return the given log stream: {0:?}. Please enable PodLogsQuerySplitStreams feature gate in kubelet"
    )]
    StreamUnsupported(String),
    #[error("pod {0:?} does not exist")]
    PodNotFound(String),
    #[error("container {container:?} not found in pod {pod:?}")]
    ContainerNotFound { pod: String, container: String },
    /// The container has no log to show in its current state (not started, no previous
    /// instance, ...), in upstream's words.
    #[error("{0}")]
    ContainerState(String),
    /// The runtime cannot say where the log is, or the file cannot be opened: upstream has
    /// written nothing yet at that point and answers 400.
    #[error("{0}")]
    Unreadable(String),
    #[error("404 page not found")]
    FileNotFound,
    #[error("403 Forbidden")]
    FileForbidden,
    #[error("500 Internal Server Error")]
    FileInternal,
    #[error("Error reading directory")]
    ReadDir,
}

impl LogsError {
    fn status(&self) -> StatusCode {
        match self {
            LogsError::Decode { .. }
            | LogsError::StreamUnsupported(_)
            | LogsError::ContainerState(_)
            | LogsError::Unreadable(_) => StatusCode::BAD_REQUEST,
            LogsError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            LogsError::PodNotFound(_)
            | LogsError::ContainerNotFound { .. }
            | LogsError::FileNotFound => StatusCode::NOT_FOUND,
            LogsError::FileForbidden => StatusCode::FORBIDDEN,
            LogsError::FileInternal | LogsError::ReadDir => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for LogsError {
    fn into_response(self) -> Response {
        let headers = [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ];
        (self.status(), headers, format!("{self}\n")).into_response()
    }
}

/// The log endpoints, with /logs/ serving the node's /var/log when `system_logs` is on
/// (enableSystemLogHandler).
pub fn routes(system_logs: bool) -> Router<ServerState> {
    let containers = Router::new().route(
        "/containerLogs/{namespace}/{pod}/{container}",
        get(containers::get),
    );
    if system_logs {
        containers.merge(system_log_routes(PathBuf::from(NODE_LOG_DIR)))
    } else {
        containers.merge(system_logs_disabled())
    }
}

/// The log endpoints with /logs/ serving `root` (tests use a temporary folder).
#[cfg(test)]
pub fn routes_with_root(root: PathBuf) -> Router<ServerState> {
    Router::new()
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(containers::get),
        )
        .merge(system_log_routes(root))
}

/// /logs/: files and listings below `root`.
fn system_log_routes(root: PathBuf) -> Router<ServerState> {
    let root = Arc::new(root);
    let top = root.clone();
    Router::new()
        .route("/logs", get(files::to_slash))
        .route(
            "/logs/",
            get(move |uri: Uri| {
                let root = top.clone();
                async move { files::serve(&root, "", &uri).await }
            }),
        )
        .route(
            "/logs/{*path}",
            get(move |uri: Uri, Path(path): Path<String>| {
                let root = root.clone();
                async move { files::serve(&root, &path, &uri).await }
            }),
        )
}

/// With enableSystemLogHandler off, upstream still answers /logs, with 405 and this text.
fn system_logs_disabled() -> Router<ServerState> {
    async fn disabled() -> Response {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "logs endpoint is disabled.\n",
        )
            .into_response()
    }
    Router::new()
        .route("/logs", axum::routing::any(disabled))
        .route("/logs/", axum::routing::any(disabled))
        .route("/logs/{*path}", axum::routing::any(disabled))
}
