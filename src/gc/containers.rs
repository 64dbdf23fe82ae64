//! Container garbage collection, as upstream's: dead containers beyond the policy go with their
//! log files, then sandboxes nothing needs any more, then the log folders of pods that are gone
//! and have no container left. Runs every minute, and at once when a pod has been removed, so
//! tearing a pod down stays quick while its logs still outlive its containers.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::GcError;
use super::known::KnownPods;
use super::select::{self, ContainerPolicy, Dead};
use crate::cri::{CriError, RuntimeClient};
use crate::events::{EventRecorder, EventType};
use crate::status::StatusStore;

/// Upstream's ContainerGCPeriod.
pub const PERIOD: Duration = Duration::from_secs(60);

struct Inner {
    cri: RuntimeClient,
    policy: ContainerPolicy,
    known: Arc<KnownPods>,
    /// Tells finished pods apart (for the eviction manager's collection).
    status: Option<Arc<StatusStore>>,
    pod_logs_dir: PathBuf,
    events: EventRecorder,
    node_name: String,
}

/// The container collector; clones share everything.
#[derive(Clone)]
pub struct ContainerGc {
    inner: Arc<Inner>,
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Not-found answers mean the object is gone already: what the collector wanted.
fn gone_ok(r: Result<(), CriError>) -> Result<(), CriError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

impl ContainerGc {
    pub fn new(
        cri: RuntimeClient,
        policy: ContainerPolicy,
        known: Arc<KnownPods>,
        status: Option<Arc<StatusStore>>,
        pod_logs_dir: PathBuf,
        events: EventRecorder,
        node_name: String,
    ) -> Self {
        ContainerGc {
            inner: Arc::new(Inner {
                cri,
                policy,
                known,
                status,
                pod_logs_dir,
                events,
                node_name,
            }),
        }
    }

    fn states(&self) -> super::known::PodStates {
        self.inner.known.snapshot(self.inner.status.as_deref())
    }

    /// Removes one dead container, then its log files: the log outlives the container, never
    /// the other way round. Failures are logged; the next pass tries again.
    async fn remove_container(&self, dead: &Dead) {
        let cri = &self.inner.cri;
        if dead.unknown {
            info!(container_id = %dead.id, "Container is in unknown state, try killing it before removal");
            let stopped = cri
                .stop_container(&dead.id, crate::runtime::MIN_GRACE_SECONDS)
                .await;
            if let Err(err) = gone_ok(stopped) {
                error!(container_id = %dead.id, %err, "Failed to stop container");
                return;
            }
        }
        let log_path = match cri.container_status(&dead.id).await {
            Ok(s) => Some(s.log_path).filter(|p| !p.is_empty()),
            Err(err) if err.is_not_found() => None,
            // Without its log path the log would outlive the container for good: the next
            // pass tries again.
            Err(err) => {
                debug!(container_id = %dead.id, %err, "Container status before removal");
                return;
            }
        };
        debug!(container_id = %dead.id, pod_uid = %dead.pod_uid, name = %dead.name, "Removing container");
        if let Err(err) = gone_ok(cri.remove_container(&dead.id).await) {
            error!(container_id = %dead.id, %err, "Failed to remove container");
            return;
        }
        if let Some(path) = log_path {
            super::logs::remove_container_logs(Path::new(&path)).await;
        }
    }

    async fn evict_containers(&self, evict_non_deleted: bool) -> Result<(), GcError> {
        let containers = self
            .inner
            .cri
            .list_containers(None)
            .await
            .map_err(GcError::cri("ListContainers"))?;
        let states = self.states();
        let doomed = select::containers_to_remove(
            &containers,
            &states,
            &self.inner.policy,
            now_nanos(),
            evict_non_deleted,
        );
        for dead in &doomed {
            self.remove_container(dead).await;
        }
        Ok(())
    }

    async fn evict_sandboxes(&self, evict_non_deleted: bool) -> Result<(), GcError> {
        let cri = &self.inner.cri;
        let (containers, sandboxes) = tokio::try_join!(
            async {
                cri.list_containers(None)
                    .await
                    .map_err(GcError::cri("ListContainers"))
            },
            async {
                cri.list_pod_sandbox(None)
                    .await
                    .map_err(GcError::cri("ListPodSandbox"))
            },
        )?;
        let states = self.states();
        for id in select::sandboxes_to_remove(&sandboxes, &containers, &states, evict_non_deleted) {
            debug!(sandbox_id = %id, "Removing sandbox");
            // The kubelet stopped it when the pod ended; stopping again guards against the
            // rare case it did not.
            if let Err(err) = gone_ok(cri.stop_pod_sandbox(&id).await) {
                error!(sandbox_id = %id, %err, "Failed to stop sandbox before removing");
                continue;
            }
            if let Err(err) = gone_ok(cri.remove_pod_sandbox(&id).await) {
                error!(sandbox_id = %id, %err, "Failed to remove sandbox");
            }
        }
        Ok(())
    }

    async fn evict_log_dirs(&self) -> Result<(), GcError> {
        if !self.inner.known.snapshot(None).synced {
            return Ok(());
        }
        let dir = &self.inner.pod_logs_dir;
        // Folders first, then containers, then the pods' states: a pod that appears meanwhile
        // is known by the time its folder could be listed.
        let names = super::logs::list_dir(dir).await?;
        let containers = self
            .inner
            .cri
            .list_containers(None)
            .await
            .map_err(GcError::cri("ListContainers"))?;
        let states = self.states();
        for name in select::log_dirs_to_remove(&names, &containers, &states) {
            info!(pod_uid = %select::uid_of_log_dir(name), "Removing pod logs");
            super::logs::remove_dir(&dir.join(name)).await;
        }
        Ok(())
    }

    /// One pass (upstream's GarbageCollect). With `evict_non_deleted`, finished pods lose
    /// their containers and sandboxes too.
    pub async fn garbage_collect(&self, evict_non_deleted: bool) -> Result<(), GcError> {
        let mut errors = Vec::new();
        if let Err(e) = self.evict_containers(evict_non_deleted).await {
            errors.push(e.to_string());
        }
        if let Err(e) = self.evict_sandboxes(evict_non_deleted).await {
            errors.push(e.to_string());
        }
        if let Err(e) = self.evict_log_dirs().await {
            errors.push(e.to_string());
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(GcError::Aggregate(errors.join(", ")))
        }
    }

    /// Every dead container and sandbox nothing needs, finished pods' included (upstream's
    /// DeleteAllUnusedContainers, for the eviction manager).
    pub async fn delete_all_unused(&self) -> Result<(), GcError> {
        info!("Attempting to delete unused containers");
        self.garbage_collect(true).await
    }

    /// A pass every `period` (the first at once) and whenever a pod has been removed, until
    /// `cancel` fires.
    pub async fn run(self, period: Duration, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failed_before = false;
        let known = self.inner.known.clone();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
                _ = known.forgotten() => {}
            }
            match self.garbage_collect(false).await {
                Ok(()) if failed_before => {
                    info!("Container garbage collection succeeded");
                    failed_before = false;
                }
                Ok(()) => debug!("Container garbage collection succeeded"),
                Err(err) => {
                    warn!(%err, "Container garbage collection failed");
                    self.inner.events.node(
                        &self.inner.node_name,
                        None,
                        EventType::Warning,
                        "ContainerGCFailed",
                        &err.to_string(),
                    );
                    failed_before = true;
                }
            }
        }
    }
}
