//! Retrying token and access reviews that failed for a passing reason, as upstream's
//! webhooks do (DefaultAuthWebhookRetryBackoff: 500 ms, growing 1.5× per try, 5 tries), so a
//! single API server hiccup is not a 401 or a 500 for the caller. All tries together stay
//! within one overall bound.

use std::future::Future;
use std::time::Duration;

const FIRST_DELAY: Duration = Duration::from_millis(500);
const FACTOR: f64 = 1.5;
const TRIES: u32 = 5;

/// Whether trying again may help: no answer at all, throttling, or a server-side failure.
pub fn is_transient(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

pub enum Failure<E> {
    TimedOut,
    Failed(E),
}

/// Why a token or access review got no answer from the API server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    #[error("{review} timed out after {}s", .after.as_secs())]
    TimedOut {
        review: &'static str,
        after: std::time::Duration,
    },
    #[error("{review} failed: {reason}")]
    Failed {
        review: &'static str,
        reason: String,
    },
}

impl ReviewError {
    /// The review's end when `with_backoff` gave up.
    pub fn of<E: std::fmt::Display>(
        review: &'static str,
        after: std::time::Duration,
        failure: Failure<E>,
    ) -> Self {
        match failure {
            Failure::TimedOut => ReviewError::TimedOut { review, after },
            Failure::Failed(err) => ReviewError::Failed {
                review,
                reason: err.to_string(),
            },
        }
    }
}

/// Calls `attempt` until it succeeds, fails for good (`transient` says no), runs out of tries,
/// or `overall` passes.
pub async fn with_backoff<T, E, F, Fut>(
    overall: Duration,
    transient: impl Fn(&E) -> bool,
    mut attempt: F,
) -> Result<T, Failure<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let tries = async {
        let mut delay = FIRST_DELAY;
        let mut tried = 1;
        loop {
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(e) if tried < TRIES && transient(&e) => {
                    tokio::time::sleep(delay).await;
                    delay = delay.mul_f64(FACTOR);
                    tried += 1;
                }
                Err(e) => return Err(Failure::Failed(e)),
            }
        }
    };
    tokio::time::timeout(overall, tries)
        .await
        .unwrap_or(Err(Failure::TimedOut))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn transient_errors_are_retried_then_given_up() {
        let calls = AtomicU32::new(0);
        let r: Result<(), Failure<&str>> = with_backoff(
            Duration::from_secs(60),
            |_| true,
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err("503")
            },
        )
        .await;
        assert!(matches!(r, Err(Failure::Failed("503"))));
        assert_eq!(calls.load(Ordering::SeqCst), TRIES);
    }

    #[tokio::test(start_paused = true)]
    async fn success_after_a_hiccup_and_final_errors_at_once() {
        let calls = AtomicU32::new(0);
        let r = with_backoff(
            Duration::from_secs(60),
            |_: &&str| true,
            || async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Err("reset"),
                    _ => Ok(7),
                }
            },
        )
        .await;
        assert!(matches!(r, Ok(7)));
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = with_backoff(
            Duration::from_secs(60),
            |_: &&str| false,
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err("403")
            },
        )
        .await;
        assert!(matches!(r, Err(Failure::Failed("403"))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_overall_bound_holds() {
        let r: Result<(), Failure<&str>> =
            with_backoff(Duration::from_secs(1), |_| true, || async { Err("503") }).await;
        assert!(matches!(r, Err(Failure::TimedOut)));
    }

    #[test]
    fn which_api_errors_are_transient() {
        let api = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("x", "y")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(is_transient(&api(503)));
        assert!(is_transient(&api(429)));
        assert!(!is_transient(&api(403)));
    }
}
