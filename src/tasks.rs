//! The kubelet's long-running tasks. A critical one (a server, a pod source, the sync loop,
//! the PLEG, the node loops) that ends before shutdown stops the kubelet with an error: a
//! kubelet whose sync loop died must not go on answering healthz as if it worked.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How long shutdown waits for tasks to notice cancellation before aborting them.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{name} stopped unexpectedly{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Ended {
        name: &'static str,
        reason: Option<String>,
    },
}

#[derive(Default)]
pub struct Tasks {
    set: JoinSet<Option<String>>,
    /// Name and criticality per task; one entry per task spawned, so bounded by the wiring.
    names: HashMap<Id, (&'static str, bool)>,
}

impl Tasks {
    /// A task that runs until cancelled; ending earlier stops the kubelet.
    pub fn critical<F>(&mut self, name: &'static str, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.insert(name, true, async move {
            fut.await;
            None
        });
    }

    /// A critical task that may fail with a reason.
    pub fn critical_fallible<F, E>(&mut self, name: &'static str, fut: F)
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display,
    {
        self.insert(
            name,
            true,
            async move { fut.await.err().map(|e| e.to_string()) },
        );
    }

    /// A task that may finish on its own (a one-off job, a loop that gives up with a warning).
    pub fn background<F>(&mut self, name: &'static str, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.insert(name, false, async move {
            fut.await;
            None
        });
    }

    fn insert<F>(&mut self, name: &'static str, critical: bool, fut: F)
    where
        F: Future<Output = Option<String>> + Send + 'static,
    {
        let handle = self.set.spawn(fut);
        self.names.insert(handle.id(), (name, critical));
    }

    /// Waits for `cancel` or for a critical task to end, then cancels everything and waits
    /// (bounded) for the tasks to stop. The error names the task that ended early.
    pub async fn run_until(mut self, cancel: CancellationToken) -> Result<(), TaskError> {
        let mut failure = None;
        while failure.is_none() {
            let joined = tokio::select! {
                _ = cancel.cancelled() => break,
                joined = self.set.join_next_with_id() => joined,
            };
            let (id, reason) = match joined {
                // Nothing left to watch: only cancellation can end the kubelet now.
                None => {
                    cancel.cancelled().await;
                    break;
                }
                Some(Ok((id, reason))) => (id, reason),
                Some(Err(err)) => {
                    let why = if err.is_panic() {
                        "panicked"
                    } else {
                        "was aborted"
                    };
                    (err.id(), Some(format!("task {why}")))
                }
            };
            let (name, critical) = self.names.remove(&id).unwrap_or(("a task", false));
            if critical && !cancel.is_cancelled() {
                failure = Some(TaskError::Ended { name, reason });
            } else if let Some(reason) = reason {
                warn!(task = name, %reason, "Task ended");
            }
        }
        match &failure {
            Some(err) => warn!(%err, "Stopping the kubelet"),
            None => info!("Shutting down; pods keep running"),
        }
        cancel.cancel();
        let drained = tokio::time::timeout(SHUTDOWN_WAIT, async {
            while self.set.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!("Some loops did not stop in time");
            self.set.abort_all();
        }
        failure.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_critical_task_ending_early_stops_everything_with_its_name() {
        let cancel = CancellationToken::new();
        let mut tasks = Tasks::default();
        let c = cancel.clone();
        tasks.critical("sync loop", async move { c.cancelled().await });
        tasks.background("one-off", async {});
        tasks.critical_fallible("server", async { Err::<(), _>("port in use") });
        let err = tasks.run_until(cancel.clone()).await.unwrap_err();
        assert_eq!(err.to_string(), "server stopped unexpectedly: port in use");
        assert!(cancel.is_cancelled(), "the other tasks are told to stop");
    }

    #[tokio::test]
    async fn cancellation_is_a_clean_stop_and_background_tasks_may_end() {
        let cancel = CancellationToken::new();
        let mut tasks = Tasks::default();
        let c = cancel.clone();
        tasks.critical("pleg", async move { c.cancelled().await });
        tasks.background("enforce", async {});
        let stop = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            stop.cancel();
        });
        assert!(tasks.run_until(cancel).await.is_ok());
    }

    #[tokio::test]
    async fn a_panicking_critical_task_is_reported() {
        let cancel = CancellationToken::new();
        let mut tasks = Tasks::default();
        tasks.critical("status sync", async { panic!("boom") });
        let err = tasks.run_until(cancel).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "status sync stopped unexpectedly: task panicked"
        );
    }
}
