//! Which pods the kubelet still has: the collectors may only take what belongs to pods that are
//! gone. The sync loop records every pod its sources hold (with a worker, parked until a
//! previous pod of its name is gone or the runtime is first listed, or finished or rejected
//! without one) and forgets it when the pod is removed; until every pod source has spoken and
//! the sync loop has seen what they said, no pod counts as gone (a pod not read yet must not
//! lose its logs).

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::status::StatusStore;

#[derive(Default)]
struct Inner {
    uids: HashSet<String>,
    synced: bool,
}

/// The pods the sync loop holds. Bounded by the pods its sources hold.
#[derive(Default)]
pub struct KnownPods {
    inner: Mutex<Inner>,
    /// Fires when a pod is forgotten, so what it left behind goes promptly.
    forgotten: Notify,
}

impl KnownPods {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sync loop is about to start a worker for `uid`, or holds it without one. Whether
    /// it is new.
    pub fn insert(&self, uid: &str) -> bool {
        self.lock().uids.insert(uid.to_string())
    }

    /// The worker of `uid` has stopped and let go of the pod.
    pub fn forget(&self, uid: &str) {
        if self.lock().uids.remove(uid) {
            self.forgotten.notify_one();
        }
    }

    /// Every pod source has reported and the sync loop has taken in what they sent.
    pub fn mark_synced(&self) {
        let mut inner = self.lock();
        if !inner.synced {
            inner.synced = true;
            drop(inner);
            // Pods that were gone before the kubelet started are collectable now.
            self.forgotten.notify_one();
        }
    }

    /// Resolves once a pod has been forgotten since the last call (one wake-up covers many).
    pub async fn forgotten(&self) {
        self.forgotten.notified().await;
    }

    /// A point-in-time view. Take it *after* listing what is to be collected: a pod that
    /// appears meanwhile is then either in the listing and the view, or in neither.
    pub fn snapshot(&self, status: Option<&StatusStore>) -> PodStates {
        let inner = self.lock();
        let uids = inner.uids.clone();
        let synced = inner.synced;
        drop(inner);
        let finished = match status {
            Some(store) => uids
                .iter()
                .filter(|uid| {
                    store
                        .status(uid)
                        .is_some_and(|s| crate::status::has_finished(&s))
                })
                .cloned()
                .collect(),
            None => HashSet::new(),
        };
        PodStates {
            synced,
            known: uids,
            finished,
        }
    }
}

/// What the collectors decide on, as upstream's pod state provider answers it.
#[derive(Clone, Debug, Default)]
pub struct PodStates {
    /// Every source has spoken (upstream's allSourcesReady).
    pub synced: bool,
    pub known: HashSet<String>,
    /// Known pods that have reached Succeeded or Failed.
    pub finished: HashSet<String>,
}

impl PodStates {
    /// Nothing of the pod may stay (upstream's ShouldPodContentBeRemoved): it is gone.
    pub fn content_removable(&self, uid: &str) -> bool {
        self.synced && !self.known.contains(uid)
    }

    /// Its containers may all go (upstream's ShouldPodRuntimeBeRemoved): gone, or finished.
    pub fn runtime_removable(&self, uid: &str) -> bool {
        self.content_removable(uid) || self.finished.contains(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_gone_before_the_sources_are_synced() {
        let known = KnownPods::default();
        known.insert("a");
        let s = known.snapshot(None);
        assert!(!s.content_removable("b"));
        known.mark_synced();
        let s = known.snapshot(None);
        assert!(s.content_removable("b"));
        assert!(!s.content_removable("a"));
        known.forget("a");
        assert!(known.snapshot(None).content_removable("a"));
    }

    #[test]
    fn finished_pods_lose_their_runtime_but_not_their_content() {
        let s = PodStates {
            synced: true,
            known: ["done".to_string()].into(),
            finished: ["done".to_string()].into(),
        };
        assert!(s.runtime_removable("done"));
        assert!(!s.content_removable("done"));
        assert!(s.runtime_removable("gone"));
    }
}
