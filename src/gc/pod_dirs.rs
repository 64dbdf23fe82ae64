//! Orphaned pod folders (`<root-dir>/pods/<uid>`) and pod cgroups of pods the kubelet no
//! longer has, as upstream's housekeeping removes them: a pod removed while the kubelet was
//! down, or whose teardown failed, leaves them. The volume manager removes a folder; it refuses
//! to delete through a volume that is still mounted, and such a folder is reported once and
//! retried. A removal that hangs (a stuck mount) is not started again while it runs, so stuck
//! folders cannot use up the blocking threads.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::known::KnownPods;
use crate::cm::CgroupManager;
use crate::pleg::RuntimePods;
use crate::volume::VolumeManager;

/// Upstream's housekeeping period.
pub const PERIOD: Duration = Duration::from_secs(2);
/// A teardown that takes longer (a hung mount) is left to finish on its own.
const TEARDOWN_WAIT: Duration = Duration::from_secs(10);

pub struct OrphanDirs {
    pub pods_dir: PathBuf,
    pub known: Arc<KnownPods>,
    pub volumes: Arc<VolumeManager>,
    pub cgroups: Arc<CgroupManager>,
    /// The runtime's pods: a folder whose pod still runs something is not touched.
    pub runtime_pods: watch::Receiver<RuntimePods>,
}

/// What one sweep carries over to the next; both bounded by the folders on disk.
#[derive(Default)]
struct Sweep {
    /// Folders already reported as stuck.
    warned: HashSet<String>,
    /// Teardowns under way, until they really end (after their wait, too).
    in_flight: crate::inflight::InFlight,
}

impl OrphanDirs {
    async fn sweep(&self, state: &mut Sweep, cancel: &CancellationToken) {
        if !self.known.snapshot(None).synced {
            return;
        }
        // Folders first, then the known pods: see KnownPods::snapshot.
        let uids = match super::logs::list_dir(&self.pods_dir).await {
            Ok(u) => u,
            Err(err) => {
                warn!(%err, "Failed to list pod folders");
                return;
            }
        };
        let states = self.known.snapshot(None);
        let active: HashSet<String> = self
            .runtime_pods
            .borrow()
            .values()
            .filter(|p| p.is_active())
            .map(|p| p.uid.clone())
            .collect();
        state.warned.retain(|uid| uids.contains(uid));
        for uid in uids {
            if cancel.is_cancelled() {
                return;
            }
            if !states.content_removable(&uid) || active.contains(&uid) {
                continue;
            }
            let Some(mark) = state.in_flight.mark(&uid) else {
                continue;
            };
            let volumes = self.volumes.clone();
            let task_uid = uid.clone();
            let handle = tokio::spawn(async move {
                let _mark = mark;
                volumes.teardown(&task_uid).await
            });
            match tokio::time::timeout(TEARDOWN_WAIT, handle).await {
                Ok(Ok(Ok(()))) => {
                    info!(pod_uid = %uid, "Removed orphaned pod folder");
                    state.warned.remove(&uid);
                }
                Ok(Ok(Err(err))) => {
                    if state.warned.insert(uid.clone()) {
                        warn!(pod_uid = %uid, %err, "Orphaned pod found, but its folder could not be removed");
                    }
                }
                Ok(Err(err)) => warn!(pod_uid = %uid, %err, "Orphaned pod folder removal failed"),
                Err(_) => {
                    if state.warned.insert(uid.clone()) {
                        warn!(pod_uid = %uid, "Orphaned pod folder removal is taking long");
                    }
                }
            }
        }
        self.sweep_cgroups(&states, &active).await;
    }

    /// Pod cgroups of pods that are gone and run nothing (upstream's
    /// cleanupOrphanedPodCgroups); the worker of a known pod removes its own.
    async fn sweep_cgroups(&self, states: &super::known::PodStates, active: &HashSet<String>) {
        let cgroups = self.cgroups.clone();
        let doomed: Vec<String> = match tokio::time::timeout(
            TEARDOWN_WAIT,
            tokio::task::spawn_blocking(move || cgroups.list_pod_uids()),
        )
        .await
        {
            Ok(Ok(Ok(uids))) => uids
                .into_iter()
                .filter(|u| states.content_removable(u) && !active.contains(u))
                .collect(),
            _ => return,
        };
        for uid in doomed {
            let cgroups = self.cgroups.clone();
            let task_uid = uid.clone();
            let removed = tokio::time::timeout(
                TEARDOWN_WAIT,
                tokio::task::spawn_blocking(move || cgroups.remove_pod_cgroup(&task_uid)),
            )
            .await;
            if !matches!(removed, Ok(Ok(Ok(())))) {
                warn!(pod_uid = %uid, "Orphaned pod cgroup could not be removed");
            }
        }
    }

    /// Sweeps every period (the first once the sources are synced) until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut state = Sweep::default();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.sweep(&mut state, &cancel).await;
        }
    }
}
