//! Bounds for the rotation jobs: lanes (how many run at once), file work on tokio's blocking
//! pool with a bound on how long a job waits for it, and the marks that keep two rotations of
//! one log from overlapping.
//!
//! A blocking thread cannot be interrupted: a job that stops waiting for it lets the thread
//! run on. The thread keeps its container's [`Mark`], so the container is skipped until the
//! work really ends; a hung file system costs at most one thread per container on it and the
//! other containers go on rotating.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

use super::LogRotateError;

/// The containers whose rotation is under way. Holds at most one entry per running container.
#[derive(Clone, Default)]
pub struct Busy(Arc<Mutex<HashSet<String>>>);

/// A container's rotation under way; the container is free again when the last clone drops.
pub struct Mark {
    busy: Busy,
    id: String,
}

impl Busy {
    /// Marks `id` busy, or `None` when it already is.
    pub fn mark(&self, id: &str) -> Option<Arc<Mark>> {
        let fresh = self.lock().insert(id.to_string());
        fresh.then(|| {
            Arc::new(Mark {
                busy: self.clone(),
                id: id.to_string(),
            })
        })
    }

    #[cfg(test)]
    pub fn contains(&self, id: &str) -> bool {
        self.lock().contains(id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        self.busy.lock().remove(&self.id);
    }
}

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

    #[test]
    fn a_container_is_busy_until_its_last_mark_drops() {
        let busy = Busy::default();
        let mark = busy.mark("a").unwrap();
        assert!(busy.mark("a").is_none());
        let held = Arc::clone(&mark);
        drop(mark);
        assert!(busy.contains("a"));
        drop(held);
        assert!(!busy.contains("a"));
        assert!(busy.mark("a").is_some());
    }

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
