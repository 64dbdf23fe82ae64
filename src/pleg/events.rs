//! The runtime's container events (CRI GetContainerEvents) as the PLEG's wake-up, as upstream's
//! evented PLEG uses them, with the relist kept as the judge of what changed.
//!
//! An event does not carry the pod status the sync loop goes by: it only makes the PLEG relist
//! at once, so a pod's status is the same whether an event or the timer found the change. While
//! the stream is up the timer relists rarely; while it is down (a runtime without events, such
//! as containerd 1.6, a restarting runtime) it relists every second, as without events.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cri::{CriError, RuntimeClient};

/// First wait before subscribing again after the stream broke; doubled per failure.
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest wait between attempts: a runtime that comes back is found within this.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// What the PLEG learns from the event task.
pub struct EventOutputs {
    /// A relist is due (an event came, the stream came up or broke). Capacity one: wake-ups
    /// that come while one is pending fold into it.
    pub wake: mpsc::Receiver<()>,
    /// Whether the stream is up, which sets the relist period.
    pub live: watch::Receiver<bool>,
}

/// Starts following the runtime's events; the returned task ends with `cancel`, or at once
/// when the runtime does not offer events.
pub fn spawn(
    cri: RuntimeClient,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> EventOutputs {
    let (wake_tx, wake) = mpsc::channel(1);
    let (live_tx, live) = watch::channel(false);
    tasks.background(
        "PLEG container events",
        follow(cri, wake_tx, live_tx, cancel.child_token()),
    );
    EventOutputs { wake, live }
}

fn nudge(wake: &mpsc::Sender<()>) {
    // Full means a relist is pending already; closed means the PLEG is gone.
    let _ = wake.try_send(());
}

fn backoff(failures: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1 << failures.saturating_sub(1).min(6))
        .min(RETRY_MAX)
}

/// Seconds since the runtime stamped the event (`created_at`, Unix nanoseconds).
fn age_secs(created_at_ns: i64) -> Option<f64> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_nanos();
    let created = u128::try_from(created_at_ns).ok().filter(|n| *n > 0)?;
    Some(now.saturating_sub(created) as f64 / 1e9)
}

pub(super) async fn follow(
    cri: RuntimeClient,
    wake: mpsc::Sender<()>,
    live: watch::Sender<bool>,
    cancel: CancellationToken,
) {
    let metrics = crate::metrics::kubelet();
    let mut failures: u32 = 0;
    loop {
        if failures > 0 {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff(failures)) => {}
            }
        }
        let subscribed = tokio::select! {
            _ = cancel.cancelled() => return,
            r = cri.get_container_events() => r,
        };
        let mut stream = match subscribed {
            Ok(stream) => stream,
            Err(CriError::Status { status, .. }) if status.code() == tonic::Code::Unimplemented => {
                info!(
                    "The container runtime offers no container events (GetContainerEvents unimplemented); PLEG relists every second"
                );
                return;
            }
            Err(err) => {
                metrics.evented_pleg_connection_error.inc(&[]);
                failures = failures.saturating_add(1);
                warn!(%err, retry_in = ?backoff(failures), "Subscribing to the container runtime's events failed; PLEG relists every second meanwhile");
                continue;
            }
        };
        metrics.evented_pleg_connection_success.inc(&[]);
        info!("Following the container runtime's events (evented PLEG); relisting rarely");
        live.send_replace(true);
        // What changed while nobody listened is found by a relist now.
        nudge(&wake);
        let ended = loop {
            let message = tokio::select! {
                _ = cancel.cancelled() => return,
                m = stream.message() => m,
            };
            match message {
                Ok(Some(event)) => {
                    if let Some(age) = age_secs(event.created_at) {
                        metrics.evented_pleg_connection_latency.observe(&[], age);
                    }
                    nudge(&wake);
                }
                Ok(None) => break "the runtime ended the stream".to_string(),
                Err(status) => break format!("{}: {}", status.code(), status.message()),
            }
        };
        metrics.evented_pleg_connection_error.inc(&[]);
        failures = 1;
        live.send_replace(false);
        nudge(&wake);
        warn!(reason = %ended, retry_in = ?backoff(failures), "The container runtime's event stream broke; PLEG relists every second until it is back");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_a_minute() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(7), Duration::from_secs(60));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn event_age_needs_a_stamp() {
        assert_eq!(age_secs(0), None);
        assert_eq!(age_secs(-5), None);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64;
        let age = age_secs(now - 2_000_000_000).unwrap();
        assert!((1.9..10.0).contains(&age), "{age}");
        // A stamp from the future (clocks apart) is no negative age.
        assert_eq!(age_secs(now + 60_000_000_000), Some(0.0));
    }
}
