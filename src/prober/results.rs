//! The latest verdict of each probe, per container instance (by container ID): what the sync
//! loop reads to decide readiness, `started`, and which containers to restart.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::probe::{Outcome, ProbeKind, Verdicts};

/// Bounded by the containers the workers watch: a worker removes its entry when its
/// container is replaced and when it stops.
#[derive(Default)]
pub struct Results {
    by_container: Mutex<HashMap<String, Verdicts>>,
}

impl Results {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Verdicts>> {
        self.by_container
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a verdict; says whether it changed.
    pub fn set(&self, container_id: &str, kind: ProbeKind, outcome: Outcome) -> bool {
        let mut map = self.lock();
        let slot = map.entry(container_id.to_string()).or_default().slot(kind);
        let changed = *slot != Some(outcome);
        *slot = Some(outcome);
        changed
    }

    pub fn clear(&self, container_id: &str, kind: ProbeKind) {
        let mut map = self.lock();
        if let Some(v) = map.get_mut(container_id) {
            *v.slot(kind) = None;
            if *v == Verdicts::default() {
                map.remove(container_id);
            }
        }
    }

    pub fn get(&self, container_id: &str) -> Verdicts {
        self.lock().get(container_id).copied().unwrap_or_default()
    }

    /// The verdicts of the given containers, for one status or sync.
    pub fn snapshot<'a>(&self, ids: impl Iterator<Item = &'a str>) -> HashMap<String, Verdicts> {
        let map = self.lock();
        ids.filter_map(|id| map.get(id).map(|v| (id.to_string(), *v)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_reports_changes_and_clear_forgets() {
        let r = Results::default();
        assert!(r.set("c1", ProbeKind::Readiness, Outcome::Failure));
        assert!(!r.set("c1", ProbeKind::Readiness, Outcome::Failure));
        assert!(r.set("c1", ProbeKind::Readiness, Outcome::Success));
        assert!(r.set("c1", ProbeKind::Liveness, Outcome::Success));
        assert_eq!(r.get("c1").readiness, Some(Outcome::Success));
        r.clear("c1", ProbeKind::Readiness);
        assert_eq!(r.get("c1").readiness, None);
        r.clear("c1", ProbeKind::Liveness);
        assert!(r.lock().is_empty(), "an empty entry is removed");
        assert!(r.snapshot(["c1"].into_iter()).is_empty());
    }
}
