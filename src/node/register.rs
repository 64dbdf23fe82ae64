//! Registering the Node: create it, or adopt an existing one and reconcile the few things a
//! kubelet owns on it, retrying with a doubling wait (capped at 7 s) until it works or the
//! kubelet shuts down.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::build;
use super::gather::{RuntimeTracker, gather};
use super::{NodeContext, NodeError, api_call, sleep_or_cancel};

const FIRST_WAIT: Duration = Duration::from_millis(100);
const MAX_WAIT: Duration = Duration::from_secs(7);

/// The wait before each registration attempt: 100 ms, then doubling up to 7 s.
pub fn next_wait(step: Duration) -> Duration {
    (step * 2).min(MAX_WAIT)
}

/// Registers until it succeeds; fails only when cancelled.
pub async fn register(
    ctx: &NodeContext,
    tracker: &mut RuntimeTracker,
    cancel: &CancellationToken,
) -> Result<(), NodeError> {
    let mut step = FIRST_WAIT;
    loop {
        if !sleep_or_cancel(cancel, step).await {
            return Err(NodeError::Cancelled);
        }
        step = next_wait(step);
        let inputs = gather(ctx, tracker, cancel).await?;
        let node = build::initial_node(&ctx.settings, &inputs, &jiff::Timestamp::now());
        info!(node = %ctx.node_name, "Attempting to register node");
        match try_register(ctx, &node, cancel).await {
            Ok(()) => {
                info!(node = %ctx.node_name, "Successfully registered node");
                return Ok(());
            }
            Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
            Err(e) => {
                error!(node = %ctx.node_name, err = %e, "Unable to register node with API server")
            }
        }
    }
}

async fn try_register(
    ctx: &NodeContext,
    node: &Node,
    cancel: &CancellationToken,
) -> Result<(), NodeError> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let t = ctx.settings.api_timeout;
    let created = api_call(
        cancel,
        t,
        "creating the node",
        nodes.create(&PostParams::default(), node),
    )
    .await;
    let err = match created {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    // A Forbidden create is also answered by reading the Node: a node authorizer may forbid
    // creating a Node that exists, and upstream adopts it in that case too.
    if !(err.is_already_exists() || err.is_forbidden()) {
        return Err(err);
    }
    let existing = api_call(
        cancel,
        t,
        "getting the existing node",
        nodes.get(&ctx.node_name),
    )
    .await
    .map_err(|e| match e {
        NodeError::Cancelled => e,
        other if err.is_forbidden() => NodeError::Other(format!("{err}; then {other}")),
        other => other,
    })?;
    info!(node = %ctx.node_name, "Node was previously registered");
    if let Some(patch) = build::reconcile_existing(node, &existing) {
        api_call(
            cancel,
            t,
            "reconciling the existing node",
            nodes.patch_status(
                &ctx.node_name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            ),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_seven_seconds() {
        let mut step = FIRST_WAIT;
        let mut seen = vec![step];
        for _ in 0..8 {
            step = next_wait(step);
            seen.push(step);
        }
        let ms: Vec<u128> = seen.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, vec![100, 200, 400, 800, 1600, 3200, 6400, 7000, 7000]);
    }
}
