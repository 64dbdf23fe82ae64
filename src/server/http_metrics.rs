//! kubelet_http_requests_total, _duration_seconds and kubelet_http_inflight_requests for the
//! API ports, labelled like upstream: the method (known ones, else "other"), the path's root
//! ("metrics/<x>" for metrics paths; unknown roots are "other"), which server, and whether the
//! request is a long-running stream.

use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

/// Roots of the paths the kubelet serves; anything else is counted as "other" so a scanner
/// cannot make new series.
const PATH_BUCKETS: &[&str] = &[
    "healthz",
    "pods",
    "stats",
    "metrics",
    "metrics/cadvisor",
    "metrics/probes",
    "metrics/resource",
    "spec",
    "run",
    "exec",
    "attach",
    "portForward",
    "containerLogs",
    "configz",
    "runningpods",
    "logs",
    "debug",
    "checkpoint",
];

const METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE",
];

/// Upstream's list, spelled as upstream spells it: "portforward" never matches the
/// "portForward" bucket there either, so port-forward counts as short.
const LONG_RUNNING: &[&str] = &["exec", "attach", "portforward", "debug"];

fn path_bucket(path: &str) -> &'static str {
    let mut parts = path.trim_start_matches('/').splitn(3, '/');
    let first = parts.next().unwrap_or_default();
    let root = match (first, parts.next()) {
        ("metrics", Some(second)) if !second.is_empty() => format!("metrics/{second}"),
        _ => first.to_string(),
    };
    PATH_BUCKETS
        .iter()
        .find(|b| **b == root)
        .copied()
        .unwrap_or("other")
}

fn method_bucket(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

/// The middleware; its state is the server type, "readonly" or "readwrite".
pub async fn record(State(server_type): State<&'static str>, req: Request, next: Next) -> Response {
    let method = method_bucket(req.method().as_str());
    let path = path_bucket(req.uri().path());
    let long_running = if LONG_RUNNING.contains(&path) {
        "true"
    } else {
        "false"
    };
    let _in_flight = InFlight::start([method, path, server_type, long_running]);
    next.run(req).await
}

/// Counts a request in on creation and out on drop, so a request whose future is dropped
/// (the client went away mid-way) still leaves the in-flight gauge and gets its duration.
struct InFlight {
    labels: [&'static str; 4],
    started: Instant,
}

impl InFlight {
    fn start(labels: [&'static str; 4]) -> Self {
        let m = crate::metrics::kubelet();
        m.http_requests.inc(&labels);
        m.http_inflight_requests.add(&labels, 1.0);
        InFlight {
            labels,
            started: Instant::now(),
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let m = crate::metrics::kubelet();
        m.http_inflight_requests.add(&self.labels, -1.0);
        m.http_requests_duration
            .observe(&self.labels, self.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_methods_fall_into_fixed_buckets() {
        assert_eq!(path_bucket("/pods"), "pods");
        assert_eq!(path_bucket("/stats/summary"), "stats");
        assert_eq!(path_bucket("/metrics"), "metrics");
        assert_eq!(path_bucket("/metrics/resource"), "metrics/resource");
        assert_eq!(path_bucket("/metrics/whatever"), "other");
        assert_eq!(path_bucket("/containerLogs/ns/p/c"), "containerLogs");
        assert_eq!(path_bucket("/portForward/ns/p"), "portForward");
        assert_eq!(path_bucket("/wp-admin/x"), "other");
        assert_eq!(method_bucket("GET"), "GET");
        assert_eq!(method_bucket("BREW"), "other");
    }

    #[test]
    fn a_dropped_request_leaves_the_in_flight_gauge() {
        let labels = ["DELETE", "debug", "readonly", "true"];
        let m = crate::metrics::kubelet();
        let guard = InFlight::start(labels);
        assert_eq!(m.http_inflight_requests.get(&labels), Some(1.0));
        drop(guard);
        assert_eq!(m.http_inflight_requests.get(&labels), Some(0.0));
        assert_eq!(m.http_requests_duration.count(&labels), 1);
    }

    #[tokio::test]
    async fn requests_are_counted_with_their_labels() {
        use tower::ServiceExt;
        let app = axum::Router::new()
            .route("/exec/{a}/{b}/{c}", axum::routing::get(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state("readwrite", record));
        let labels = ["GET", "exec", "readwrite", "true"];
        let before = crate::metrics::kubelet()
            .http_requests
            .get(&labels)
            .unwrap_or(0.0);
        let req = axum::http::Request::get("/exec/ns/pod/c")
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = app.oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let m = crate::metrics::kubelet();
        assert_eq!(m.http_requests.get(&labels), Some(before + 1.0));
        assert_eq!(m.http_inflight_requests.get(&labels), Some(0.0));
        assert!(m.http_requests_duration.count(&labels) >= 1);
    }
}
