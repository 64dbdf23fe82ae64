//! Orphaned pod folders (`<root-dir>/pods/<uid>` of pods the kubelet no longer has), as
//! upstream's housekeeping removes them: a pod removed while the kubelet was down, or whose
//! teardown failed, leaves one. The volume manager removes it; it refuses to delete through a
//! volume that is still mounted, and such a folder is reported once and retried.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::known::KnownPods;
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
    /// The runtime's pods: a folder whose pod still runs something is not touched.
    pub runtime_pods: watch::Receiver<RuntimePods>,
}

impl OrphanDirs {
    /// One sweep; `warned` holds folders already reported as stuck (bounded by the folders).
    async fn sweep(&self, warned: &mut HashSet<String>) {
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
            .filter(|p| p.running_containers > 0 || p.ready_sandboxes > 0)
            .map(|p| p.uid.clone())
            .collect();
        warned.retain(|uid| uids.contains(uid));
        for uid in uids {
            if !states.content_removable(&uid) || active.contains(&uid) {
                continue;
            }
            match tokio::time::timeout(TEARDOWN_WAIT, self.volumes.teardown(&uid)).await {
                Ok(Ok(())) => {
                    info!(pod_uid = %uid, "Removed orphaned pod folder");
                    warned.remove(&uid);
                }
                Ok(Err(err)) => {
                    if warned.insert(uid.clone()) {
                        warn!(pod_uid = %uid, %err, "Orphaned pod found, but its folder could not be removed");
                    }
                }
                Err(_) => {
                    if warned.insert(uid.clone()) {
                        warn!(pod_uid = %uid, "Orphaned pod folder removal is taking long");
                    }
                }
            }
        }
    }

    /// Sweeps every period (the first once the sources are synced) until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut warned = HashSet::new();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.sweep(&mut warned).await;
        }
    }
}
