//! /pods: the kubelet's pods with their current status, as a v1 PodList.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::ServerState;

pub async fn list(State(state): State<ServerState>) -> Response {
    pod_list(state.status.pods())
}

/// A v1 PodList response, as /pods and /runningpods/ answer.
pub fn pod_list(items: Vec<k8s_openapi::api::core::v1::Pod>) -> Response {
    let body = json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items,
    });
    ([("content-type", "application/json")], body.to_string()).into_response()
}
