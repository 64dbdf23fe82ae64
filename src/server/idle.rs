//! Closing connections that sit idle. Upstream's server drops a connection after 90 s with no
//! request in flight (Go's IdleTimeout, HTTP/1 keep-alive and HTTP/2 alike); without it a
//! client could open connections, send nothing and hold a task and a socket each for ever,
//! since authentication only happens per request.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use axum::body::{Body, Bytes};
use hyper::body::{Frame, SizeHint};

pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Requests in flight on one connection and when the last one ended.
pub struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        })
    }

    /// Counts a request as in flight until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// How long nothing has been in flight; None while something is.
    fn idle_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        Some(
            self.last
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed(),
        )
    }
}

pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Resolves once the connection has had nothing in flight for `timeout`.
pub async fn idle(activity: &Activity, timeout: Duration) {
    loop {
        let wait = match activity.idle_for() {
            Some(d) if d >= timeout => return,
            Some(d) => timeout - d,
            None => timeout,
        };
        tokio::time::sleep(wait).await;
    }
}

/// A response body that keeps its request in flight until it is finished or dropped, so a
/// followed log stream is never cut for idleness.
pub struct Tracked {
    inner: Body,
    _in_flight: InFlight,
}

impl Tracked {
    pub fn wrap(inner: Body, in_flight: InFlight) -> Body {
        Body::new(Tracked {
            inner,
            _in_flight: in_flight,
        })
    }
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_waits_for_requests_and_their_bodies() {
        let activity = Activity::new();
        let body = Tracked::wrap(Body::from("x"), activity.begin());
        // A body still being sent keeps the connection busy however long it takes.
        let waited = tokio::time::timeout(
            Duration::from_secs(300),
            idle(&activity, Duration::from_secs(90)),
        )
        .await;
        assert!(waited.is_err(), "idle while a body was in flight");
        drop(body);
        let started = tokio::time::Instant::now();
        idle(&activity, Duration::from_secs(90)).await;
        assert!(started.elapsed() >= Duration::from_secs(89));
    }
}
