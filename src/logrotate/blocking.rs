//! Bounds for the rotation jobs: lanes (how many run at once), file work on tokio's blocking
//! pool with a bound on how long a job waits for it, and the marks that keep two rotations of
//! one log from overlapping.
//!
//! A blocking thread cannot be interrupted: a job that stops waiting for it lets the thread
//! run on. The thread keeps its container's [`Mark`], so the container is skipped until the
//! work really ends; a hung file system costs at most one thread per container on it and the
//! other containers go on rotating.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

use super::LogRotateError;

/// The containers whose rotation is under way (one entry per running container), and one
/// container's rotation under way.
pub use crate::inflight::{InFlight as Busy, Mark};

/// A bounded lane: at most `width` jobs hold a place at once.
#[derive(Clone)]
pub struct Lane {
    places: Arc<Semaphore>,
}

impl Lane {
    pub fn new(width: usize) -> Self {
        Lane {
            places: Arc::new(Semaphore::new(width.max(1))),
        }
    }

    /// Waits for a place, held until the returned permit drops. (The semaphore is never
    /// closed; if it were, going on without a place is harmless.)
    pub async fn enter(&self) -> Option<SemaphorePermit<'_>> {
        self.places.acquire().await.ok()
    }
}

/// Runs `f` on the blocking pool, waiting `within` at most for it. `mark` goes with the work,
/// so the container stays busy while it runs.
pub async fn run<T, F>(
    what: &'static str,
    within: Duration,
    mark: &Arc<Mark>,
    f: F,
) -> Result<T, LogRotateError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let mark = Arc::clone(mark);
    let work = tokio::task::spawn_blocking(move || {
        let _mark = mark;
        f()
    });
    match tokio::time::timeout(within, work).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(LogRotateError::Blocking(e.to_string())),
        Err(_) => Err(LogRotateError::Timeout {
            what,
            after: within,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_that_overruns_keeps_its_container_busy() {
        let busy = Busy::default();
        let mark = busy.mark("slow").unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let err = run("stat", Duration::from_millis(50), &mark, move || {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        })
        .await
        .unwrap_err();
        assert!(matches!(err, LogRotateError::Timeout { what: "stat", .. }));
        drop(mark);
        assert!(busy.contains("slow"));
        tx.send(()).unwrap();
        for _ in 0..100 {
            if !busy.contains("slow") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the mark outlived its work");
    }
}
