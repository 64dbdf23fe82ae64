//! The eviction manager. This part enforces local-storage limits as upstream's does on every
//! monitoring pass: a pod whose emptyDir holds more than its `sizeLimit` is evicted at once
//! (grace 1 s, phase Failed, reason `Evicted`, a Warning event with upstream's message).
//! Usage is walked fresh for each decision, not read from a sample a minute old.

pub mod local_storage;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::events::{EventRecorder, EventType};
use crate::stats::fs::FsProbe;
use crate::status::{PodFailure, StatusStore, has_finished};

/// Upstream's eviction monitoring interval.
const MONITOR_PERIOD: Duration = Duration::from_secs(10);
/// A walk older than this is not trusted for a decision.
const FRESH: Duration = Duration::from_secs(5);
/// Upstream's grace for evictions that must free a resource quickly.
const IMMEDIATE_GRACE_SECONDS: i64 = 1;
/// Evictions waiting for the sync loop; a full queue is retried on the next pass.
const QUEUE: usize = 16;
/// Upstream's SystemCriticalPriority: pods at or above it are never evicted.
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// A pod the sync loop must fail and stop with this grace period.
#[derive(Clone, Debug)]
pub struct Eviction {
    pub uid: String,
    pub failure: PodFailure,
    pub grace: i64,
}

/// Static, mirror and system-critical pods are never evicted, as upstream (a static pod would
/// not be admitted again).
fn is_critical(pod: &Pod) -> bool {
    crate::sources::is_static_pod(pod)
        || crate::sources::is_mirror_pod(pod)
        || pod
            .spec
            .as_ref()
            .and_then(|s| s.priority)
            .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

struct Monitor {
    status: Arc<StatusStore>,
    root_dir: PathBuf,
    events: EventRecorder,
    fs: FsProbe,
    out: mpsc::Sender<Eviction>,
    /// Pods already handed over, until their status shows it; bounded by the status store.
    evicted: HashSet<String>,
}

impl Monitor {
    async fn pass(&mut self) {
        let status = &self.status;
        self.evicted
            .retain(|uid| status.status(uid).is_some_and(|s| !has_finished(&s)));
        // Only the running pods that have a limited emptyDir (and were not handed over yet).
        let evicted = &self.evicted;
        let candidates = self.status.select(|pod, status| {
            let uid = pod.metadata.uid.as_deref().filter(|u| !u.is_empty())?;
            if has_finished(status) || evicted.contains(uid) {
                return None;
            }
            let dirs = local_storage::limited_dirs(pod);
            (!dirs.is_empty()).then(|| (pod.clone(), dirs))
        });
        for (pod, dirs) in candidates {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            let pod_dir = crate::volume::pod_dir(&self.root_dir, uid);
            let mut used = Vec::with_capacity(dirs.len());
            for d in &dirs {
                let path = crate::volume::empty_dir::path(&pod_dir, &d.volume);
                // A volume not set up yet, or a walk that failed, holds nothing we can count.
                let usage = self.fs.disk_usage_within(&path, FRESH).await;
                used.push(usage.ok().map(|u| u.bytes));
            }
            let Some(failure) = local_storage::empty_dir_verdict(&dirs, &used) else {
                continue;
            };
            self.evict(&pod, uid, failure);
        }
    }

    fn evict(&mut self, pod: &Pod, uid: &str, failure: PodFailure) {
        let name = crate::sources::pod_full_name(pod);
        if is_critical(pod) {
            warn!(pod = %name, message = %failure.message, "Eviction manager: cannot evict a critical pod");
            return;
        }
        let eviction = Eviction {
            uid: uid.to_string(),
            failure,
            grace: IMMEDIATE_GRACE_SECONDS,
        };
        let message = eviction.failure.message.clone();
        if self.out.try_send(eviction).is_err() {
            return;
        }
        info!(pod = %name, %message, "Evicting pod");
        self.events
            .pod(pod, EventType::Warning, local_storage::REASON, &message);
        crate::metrics::kubelet()
            .evictions
            .inc(&[local_storage::EMPTY_DIR_SIGNAL]);
        self.evicted.insert(uid.to_string());
    }
}

/// The queue of pods the sync loop must fail (the eviction and node shutdown managers fill
/// it).
pub fn queue() -> (mpsc::Sender<Eviction>, mpsc::Receiver<Eviction>) {
    mpsc::channel(QUEUE)
}

/// Starts the monitor in `tasks`; its evictions go to `tx`.
pub fn spawn(
    status: Arc<StatusStore>,
    root_dir: PathBuf,
    events: EventRecorder,
    tx: mpsc::Sender<Eviction>,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) {
    let mut monitor = Monitor {
        status,
        root_dir,
        events,
        fs: FsProbe::default(),
        out: tx,
        evicted: HashSet::new(),
    };
    let cancel = cancel.child_token();
    tasks.critical("eviction manager", async move {
        let mut tick = tokio::time::interval(MONITOR_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => monitor.pass().await,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use std::collections::BTreeMap;

    #[test]
    fn critical_pods_are_static_mirror_or_system_priority() {
        let mut pod = Pod {
            spec: Some(PodSpec::default()),
            ..Default::default()
        };
        assert!(!is_critical(&pod));
        pod.spec.as_mut().unwrap().priority = Some(SYSTEM_CRITICAL_PRIORITY);
        assert!(is_critical(&pod));
        pod.spec.as_mut().unwrap().priority = Some(1000);
        assert!(!is_critical(&pod));
        pod.metadata.annotations = Some(BTreeMap::from([(
            "kubernetes.io/config.source".to_string(),
            "file".to_string(),
        )]));
        assert!(is_critical(&pod));
    }
}
