//! A server span per request on the kubelet API while tracing is on, named by the matched
//! route (`/containerLogs/{podNamespace}/{podID}/{containerName}`) as upstream's restful filter
//! names it, joining the caller's trace when the request carries a `traceparent`.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;
use tracing::field::Empty;

use crate::telemetry::trace::{self, TARGET, propagate};

pub async fn span(req: Request, next: Next) -> Response {
    if !trace::enabled() {
        return next.run(req).await;
    }
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| req.uri().path().to_string());
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "KubeletServer",
        otel.name = route.as_str(),
        otel.kind = "server",
        http.method = req.method().as_str(),
        http.route = route.as_str(),
        http.target = req.uri().path(),
        http.scheme = "https",
        http.status_code = Empty,
    );
    propagate::set_parent(&span, propagate::extract(req.headers()));
    let response = next.run(req).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.status_code", status.as_u16());
    if status.is_server_error() {
        trace::set_failed(&span, status.as_str());
    }
    response
}
