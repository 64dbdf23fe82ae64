//! The loop: every monitor interval, list the running containers and start a rotation job
//! for each one that has none under way. Jobs run beside the loop (in a `JoinSet`, one per
//! running container at most), so a slow log never delays the next look at the others;
//! how many rotate at once is the lanes' business.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error};

use super::LogRotateError;
use super::blocking::Busy;
use super::rotate::{Done, Rotator};
use crate::cri::api;

pub struct Monitor {
    rotator: Arc<Rotator>,
    busy: Busy,
    /// Each running container's log path, from its ContainerStatus (a container's log path
    /// never changes), so a pass costs one ListContainers; pruned to the running ones.
    paths: HashMap<String, PathBuf>,
    jobs: JoinSet<Done>,
}

impl Monitor {
    pub fn new(rotator: Rotator) -> Self {
        Monitor {
            rotator: Arc::new(rotator),
            busy: Busy::default(),
            paths: HashMap::new(),
            jobs: JoinSet::new(),
        }
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.rotator.policy.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => {
                    if let Err(e) = self.pass().await {
                        error!(err = %e, "Failed to rotate container logs");
                    }
                }
                Some(done) = self.jobs.join_next(), if !self.jobs.is_empty() => match done {
                    Ok(done) => self.finished(done),
                    // Its container's mark went with it: the next pass tries again.
                    Err(e) => error!(err = %e, "Container log rotation job failed"),
                },
            }
        }
        // Jobs stop where they are; blocking file work already started runs to its end.
        self.jobs.shutdown().await;
    }

    /// Starts a job for every running container that has none under way.
    pub async fn pass(&mut self) -> Result<(), LogRotateError> {
        debug!("Starting container log rotation sequence");
        let filter = api::ContainerFilter {
            state: Some(api::ContainerStateValue {
                state: api::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        };
        let running = self
            .rotator
            .cri
            .list_containers(Some(filter))
            .await
            .map_err(LogRotateError::List)?;
        let ids: HashSet<&str> = running.iter().map(|c| c.id.as_str()).collect();
        self.paths.retain(|id, _| ids.contains(id.as_str()));
        for c in &running {
            // Only running containers write; a busy one is still rotating from a pass before.
            if c.state != api::ContainerState::ContainerRunning as i32 {
                continue;
            }
            let Some(mark) = self.busy.mark(&c.id) else {
                continue;
            };
            let known = self.paths.get(&c.id).cloned();
            let job = Arc::clone(&self.rotator).job(c.id.clone(), known, mark);
            self.jobs.spawn(job);
        }
        Ok(())
    }

    fn finished(&mut self, done: Done) {
        if let Some(log) = done.log {
            self.paths.insert(done.id, log);
        }
    }

    /// Waits for the jobs started so far (tests).
    #[cfg(test)]
    pub async fn settle(&mut self) {
        while let Some(done) = self.jobs.join_next().await {
            if let Ok(done) = done {
                self.finished(done);
            }
        }
    }
}
