//! /pods: the kubelet's pods with their current status, as a v1 PodList.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::ServerState;

pub async fn list(State(state): State<ServerState>) -> Response {
    let items = state.status.pods();
    let body = json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items,
    });
    ([("content-type", "application/json")], body.to_string()).into_response()
}
