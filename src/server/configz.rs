//! /configz: the effective KubeletConfiguration as v1beta1 JSON under "kubeletconfig",
//! without kind/apiVersion (upstream registers the converted struct, whose TypeMeta is empty).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::ServerState;

pub async fn get(State(state): State<ServerState>) -> Response {
    let body = json!({ "kubeletconfig": state.settings.configz.as_ref() });
    (
        [
            ("content-type", "application/json"),
            ("x-content-type-options", "nosniff"),
        ],
        body.to_string(),
    )
        .into_response()
}
