//! /stats/summary and the metrics endpoints (/metrics, /metrics/resource, /metrics/cadvisor,
//! /metrics/probes).

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::metrics;
use crate::metrics::text::CONTENT_TYPE;
use crate::stats::{Scope, exposition};

use super::ServerState;

pub fn routes() -> Router<ServerState> {
    Router::new()
        .route("/stats/summary", get(summary).post(summary))
        .route("/metrics", get(kubelet_metrics))
        .route("/metrics/resource", get(resource_metrics))
        .route("/metrics/cadvisor", get(cadvisor_metrics))
        .route("/metrics/probes", get(probe_metrics))
}

fn metrics_text(body: String) -> Response {
    (StatusCode::OK, [("content-type", CONTENT_TYPE)], body).into_response()
}

fn internal_error(what: &str, err: impl std::fmt::Display) -> Response {
    tracing::warn!(%err, request = what, "HTTP InternalServerError serving");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [("content-type", "text/plain; charset=utf-8")],
        format!("Internal Error: {err}"),
    )
        .into_response()
}

/// `only_cpu_and_memory=true` (exactly once, exactly "true") narrows the Summary, as upstream.
async fn summary(
    State(state): State<ServerState>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let flags: Vec<&str> = q
        .iter()
        .filter(|(k, _)| k == "only_cpu_and_memory")
        .map(|(_, v)| v.as_str())
        .collect();
    let scope = if flags == ["true"] {
        Scope::CpuAndMemory
    } else {
        Scope::Full
    };
    match state.stats.summary(scope).await {
        Ok(s) => axum::Json(s).into_response(),
        Err(err) => internal_error("/stats/summary", err),
    }
}

async fn kubelet_metrics(State(state): State<ServerState>) -> Response {
    let claimed = state.stats.claimed_volumes().await;
    metrics_text(crate::stats::exposition::kubelet_metrics(&claimed))
}

async fn resource_metrics(State(state): State<ServerState>) -> Response {
    let summary = match state.stats.summary(Scope::CpuAndMemory).await {
        Ok(s) => Some(s),
        Err(err) => {
            tracing::warn!(%err, "Error getting summary for resourceMetric prometheus endpoint");
            None
        }
    };
    metrics_text(exposition::resource::render(summary.as_ref()))
}

async fn cadvisor_metrics(State(state): State<ServerState>) -> Response {
    match state.stats.collect_full().await {
        Ok(c) => metrics_text(exposition::cadvisor::render(&c)),
        Err(err) => internal_error("/metrics/cadvisor", err),
    }
}

async fn probe_metrics() -> Response {
    metrics_text(metrics::render_probes())
}
