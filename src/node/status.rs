//! The node status loop: every `nodeStatusUpdateFrequency`, gather the facts, recompute the
//! status over the Node as the API server has it, and patch it when it changed or when
//! `nodeStatusReportFrequency` has passed since the last report.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::build::{self, StatusInputs};
use super::gather::{RuntimeTracker, gather};
use super::{NodeContext, NodeError, api_call, register};
use crate::eviction::Pressure;

/// Upstream tries a status update this many times in a row before waiting for the next tick.
const UPDATE_RETRIES: usize = 5;

/// What one update attempt did.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Patched,
    Unchanged,
}

async fn try_update(
    ctx: &NodeContext,
    inputs: &StatusInputs,
    last_report: Option<Instant>,
    cancel: &CancellationToken,
) -> Result<Outcome, NodeError> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let t = ctx.settings.api_timeout;
    let original = api_call(cancel, t, "getting the node", nodes.get(&ctx.node_name)).await?;
    let mut updated = original.clone();
    let labels_fixed = build::ensure_os_arch_labels(&mut updated.metadata);
    build::apply_status(&mut updated, &ctx.settings, inputs, &jiff::Timestamp::now());
    let changed =
        labels_fixed || build::status_changed(original.status.as_ref(), updated.status.as_ref());
    let since = last_report.map(|t| t.elapsed());
    if !build::should_patch(changed, since, ctx.settings.status_report_frequency) {
        return Ok(Outcome::Unchanged);
    }
    let patch = build::status_patch(&original, &updated);
    debug!(node = %ctx.node_name, changed, "Patching node status");
    let patched = api_call(
        cancel,
        t,
        "patching the node status",
        nodes.patch_status(
            &ctx.node_name,
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        ),
    )
    .await?;
    let addresses = patched.status.and_then(|s| s.addresses).unwrap_or_default();
    ctx.addresses.send_if_modified(|seen| {
        let changed = *seen != addresses;
        *seen = addresses;
        changed
    });
    Ok(Outcome::Patched)
}

/// One status sync: up to five attempts, re-registering if the Node has gone.
/// The condition values last announced as events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Announced {
    ready: bool,
    pressure: Pressure,
}

/// Node events for condition changes, as upstream records them (the first sync announces all).
fn announce(ctx: &NodeContext, last: &mut Option<Announced>, inputs: &StatusInputs) {
    use crate::events::EventType::Normal;
    let now = Announced {
        ready: inputs.ready_errors.is_empty(),
        pressure: inputs.pressure,
    };
    let before = *last;
    type Check = (fn(&Announced) -> bool, &'static str, &'static str);
    let checks: [Check; 4] = [
        (
            |a| a.pressure.memory,
            "NodeHasInsufficientMemory",
            "NodeHasSufficientMemory",
        ),
        (
            |a| a.pressure.disk,
            "NodeHasDiskPressure",
            "NodeHasNoDiskPressure",
        ),
        (
            |a| a.pressure.pid,
            "NodeHasInsufficientPID",
            "NodeHasSufficientPID",
        ),
        (|a| a.ready, "NodeReady", "NodeNotReady"),
    ];
    for (get, when_true, when_false) in checks {
        if before.is_none_or(|b| get(&b) != get(&now)) {
            ctx.status_event(Normal, if get(&now) { when_true } else { when_false });
        }
    }
    *last = Some(now);
}

async fn sync_status(
    ctx: &NodeContext,
    tracker: &mut RuntimeTracker,
    last_report: &mut Option<Instant>,
    announced: &mut Option<Announced>,
    cancel: &CancellationToken,
) -> Result<(), NodeError> {
    let inputs = gather(ctx, tracker, cancel).await?;
    announce(ctx, announced, &inputs);
    for attempt in 1..=UPDATE_RETRIES {
        match try_update(ctx, &inputs, *last_report, cancel).await {
            Ok(Outcome::Patched) => {
                *last_report = Some(Instant::now());
                return Ok(());
            }
            Ok(Outcome::Unchanged) => return Ok(()),
            Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
            Err(e) if e.is_not_found() && ctx.settings.register_node => {
                info!(node = %ctx.node_name, "Node object is gone; registering it again");
                register::register(ctx, tracker, cancel).await?;
                // The fresh Node carries a full status already.
                *last_report = Some(Instant::now());
                return Ok(());
            }
            Err(e) => {
                warn!(err = %e, attempt, "Error updating node status, will retry");
            }
        }
    }
    warn!(node = %ctx.node_name, "Unable to update node status: update node status exceeds retry count");
    Ok(())
}

/// Runs until cancelled. The first sync happens at once so a fresh node turns Ready quickly.
pub async fn run_status_loop(
    ctx: &NodeContext,
    mut tracker: RuntimeTracker,
    cancel: &CancellationToken,
) {
    let period = if ctx.settings.status_update_frequency.is_zero() {
        Duration::from_secs(10)
    } else {
        ctx.settings.status_update_frequency
    };
    let mut last_report: Option<Instant> = None;
    let mut announced = None;
    let mut shutting_down = ctx.shutting_down.clone();
    let mut pressure = ctx.pressure.clone();
    let mut devices = ctx.devices.as_ref().map(|d| d.changes());
    loop {
        if let Err(NodeError::Cancelled) =
            sync_status(ctx, &mut tracker, &mut last_report, &mut announced, cancel).await
        {
            return;
        }
        // A shutdown (or its cancellation) is reported at once, as upstream syncs the node
        // status when logind announces one; so is a pressure condition turning on or off
        // (upstream waits for the next period), so the scheduler's taint follows sooner.
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
            Ok(()) = shutting_down.changed() => {}
            Ok(()) = pressure.changed() => {}
            Ok(()) = device_change(devices.as_mut()) => {}
        }
    }
}

/// A device plugin's devices changed: reported at once, so the scheduler sees a device that
/// came or went (or turned unhealthy) without waiting for the period.
async fn device_change(
    rx: Option<&mut tokio::sync::watch::Receiver<u64>>,
) -> Result<(), tokio::sync::watch::error::RecvError> {
    match rx {
        Some(rx) => rx.changed().await,
        None => std::future::pending().await,
    }
}
