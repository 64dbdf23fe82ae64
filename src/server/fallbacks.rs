//! Answers for paths the authenticated port does not serve, in upstream's words.

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::any;

/// The debugging paths (and everything below them) upstream registers whether or not
/// enableDebuggingHandlers is on.
const DEBUGGING_PATHS: &[&str] = &[
    "run",
    "exec",
    "attach",
    "portForward",
    "containerLogs",
    "runningpods",
    "debug/pprof",
    "logs",
];

fn text(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [
            ("content-type", "text/plain; charset=utf-8"),
            ("x-content-type-options", "nosniff"),
        ],
        body,
    )
        .into_response()
}

pub async fn not_found() -> Response {
    text(StatusCode::NOT_FOUND, "404 page not found\n")
}

async fn disabled() -> Response {
    text(
        StatusCode::METHOD_NOT_ALLOWED,
        "Debug endpoints are disabled.\n",
    )
}

/// With enableDebuggingHandlers off, the debugging paths say why they do not work (405)
/// rather than 404.
pub fn debugging_disabled<S: Clone + Send + Sync + 'static>() -> Router<S> {
    DEBUGGING_PATHS.iter().fold(Router::new(), |r, p| {
        r.route(&format!("/{p}/"), any(disabled))
            .route(&format!("/{p}/{{*rest}}"), any(disabled))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn status(router: Router, method: &str, path: &str) -> u16 {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .body(axum::body::Body::empty())
            .unwrap();
        router.oneshot(req).await.unwrap().status().as_u16()
    }

    #[tokio::test]
    async fn debugging_paths_are_405_when_disabled() {
        let r = || debugging_disabled::<()>().fallback(not_found);
        assert_eq!(status(r(), "POST", "/exec/ns/pod/c").await, 405);
        assert_eq!(status(r(), "GET", "/runningpods/").await, 405);
        assert_eq!(status(r(), "GET", "/debug/pprof/heap").await, 405);
        assert_eq!(status(r(), "GET", "/logs/").await, 405);
        assert_eq!(status(r(), "GET", "/configz").await, 404);
    }
}
