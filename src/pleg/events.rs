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
/// How long a subscription may go unanswered before it counts as up (see `follow`).
const SUBSCRIBE_GRACE: Duration = Duration::from_secs(2);

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

fn no_events() {
    info!(
        "The container runtime offers no container events (GetContainerEvents unimplemented); PLEG relists every second"
    );
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
        let subscribe = cri.get_container_events();
        tokio::pin!(subscribe);
        // A runtime without events, or one that is down, answers at once; one with events
        // answers only with its first event: quiet for SUBSCRIBE_GRACE means subscribed.
        let early = tokio::select! {
            _ = cancel.cancelled() => return,
            r = &mut subscribe => Some(r),
            _ = tokio::time::sleep(SUBSCRIBE_GRACE) => None,
        };
        let mut stream = match early {
            Some(Ok(stream)) => Some(stream),
            Some(Err(CriError::Status { status, .. }))
                if status.code() == tonic::Code::Unimplemented =>
            {
                no_events();
                return;
            }
            Some(Err(err)) => {
                metrics.evented_pleg_connection_error.inc(&[]);
                failures = failures.saturating_add(1);
                warn!(%err, retry_in = ?backoff(failures), "Subscribing to the container runtime's events failed; PLEG relists every second meanwhile");
                continue;
            }
            None => None,
        };
        metrics.evented_pleg_connection_success.inc(&[]);
        info!("Following the container runtime's events (evented PLEG); relisting rarely");
        live.send_replace(true);
        // What changed while nobody listened is found by a relist now.
        nudge(&wake);
        let ended = loop {
            let message = match stream.as_mut() {
                Some(s) => tokio::select! {
                    _ = cancel.cancelled() => return,
                    m = s.message() => m,
                },
                // Still waiting for the answer, which comes with the first event.
                None => match tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = &mut subscribe => r,
                } {
                    Ok(s) => {
                        stream = Some(s);
                        continue;
                    }
                    // A runtime without events, too loaded to say so within the grace.
                    Err(CriError::Status { status, .. })
                        if status.code() == tonic::Code::Unimplemented =>
                    {
                        live.send_replace(false);
                        nudge(&wake);
                        no_events();
                        return;
                    }
                    Err(err) => break err.to_string(),
                },
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
