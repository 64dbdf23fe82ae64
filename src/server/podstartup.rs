//! `/debug/pods/startup`: every tracked pod's start, phase by phase (see `startup`), as JSON;
//! `/debug/pods/startup/{namespace}/{name}` for one pod. A debugging handler, authorized like
//! `/pods`.

use axum::Json;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub async fn list() -> Response {
    Json(json!({ "items": crate::startup::tracker().reports() })).into_response()
}

pub async fn one(Path((namespace, name)): Path<(String, String)>) -> Response {
    let found = crate::startup::tracker().report(&namespace, &name);
    match found {
        Some(r) => Json(r).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("no start recorded for pod {namespace}/{name}\n"),
        )
            .into_response(),
    }
}
