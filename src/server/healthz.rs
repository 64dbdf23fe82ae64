//! /healthz with upstream's named checks (ping, log, syncloop) and their output format.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;

use super::ServerState;

const CHECKS: &[&str] = &["ping", "log", "syncloop"];
/// Upstream's PLEG health threshold.
const PLEG_DEADLINE: std::time::Duration = std::time::Duration::from_secs(180);

fn run_check(name: &str, state: &ServerState) -> Option<Result<(), String>> {
    Some(match name {
        "ping" | "log" => Ok(()),
        // Upstream's loop stops going round while the PLEG is unhealthy (older than 3 min),
        // so its check fails once the loop deadline has passed on top of that; a shorter
        // runtime hiccup only shows in the node's Ready condition.
        "syncloop" => match (
            state.sync_health.since_last_iteration(),
            state.pleg_health.since_last_relist(),
        ) {
            (Some(idle), _) if idle > state.sync_loop_deadline => Err(format!(
                "sync Loop took longer than expected: last iteration {idle:?} ago"
            )),
            (_, Some(stale)) if stale > PLEG_DEADLINE + state.sync_loop_deadline => Err(format!(
                "PLEG is not healthy: pleg was last seen active {stale:?} ago"
            )),
            _ => Ok(()),
        },
        _ => return None,
    })
}

fn text(status: StatusCode, body: String) -> Response {
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

pub async fn all(
    State(state): State<ServerState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let mut report = String::new();
    let mut failed = false;
    for name in CHECKS {
        match run_check(name, &state).unwrap_or(Ok(())) {
            Ok(()) => report.push_str(&format!("[+]{name} ok\n")),
            Err(err) => {
                failed = true;
                tracing::info!(check = name, %err, "healthz check failed");
                report.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    if failed {
        report.push_str("healthz check failed\n");
        return text(StatusCode::INTERNAL_SERVER_ERROR, report);
    }
    if q.contains_key("verbose") {
        report.push_str("healthz check passed\n");
        return text(StatusCode::OK, report);
    }
    text(StatusCode::OK, "ok".into())
}

pub async fn one(State(state): State<ServerState>, Path(check): Path<String>) -> Response {
    match run_check(&check, &state) {
        None => text(StatusCode::NOT_FOUND, "404 page not found\n".into()),
        Some(Ok(())) => text(StatusCode::OK, "ok".into()),
        Some(Err(err)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {err}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn state() -> ServerState {
        ServerState::for_tests(crate::cri::RuntimeClient::unreachable())
    }

    #[tokio::test]
    async fn a_stalled_pleg_fails_syncloop_only_after_the_loop_deadline() {
        let st = state();
        st.pleg_health.set_last_relist_ago(Duration::from_secs(200));
        // Unhealthy PLEG (over 3 min) is a node condition; the kubelet is not dead yet.
        assert_eq!(run_check("syncloop", &st), Some(Ok(())));
        st.pleg_health
            .set_last_relist_ago(PLEG_DEADLINE + st.sync_loop_deadline + Duration::from_secs(5));
        assert!(matches!(run_check("syncloop", &st), Some(Err(_))));
        assert_eq!(run_check("nope", &st), None);
    }
}
