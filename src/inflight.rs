//! Marks for work on tokio's blocking pool. Such work cannot be interrupted: a caller that
//! stops waiting lets the thread run on. A mark goes with the work and is released only when
//! the work really ends, so the same work (a statvfs of one path, one container's log
//! rotation, the eviction manager's look) is not started again while a hung one runs, and a
//! hung file system costs one thread per key instead of one per attempt.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// The keys whose work is under way. Holds one entry per piece of work running.
#[derive(Clone, Default)]
pub struct InFlight(Arc<Mutex<HashSet<String>>>);

/// One piece of work under way; its key is free again when the last clone drops.
pub struct Mark {
    set: InFlight,
    key: String,
}

impl InFlight {
    /// Marks `key` as under way, or `None` when it already is.
    pub fn mark(&self, key: &str) -> Option<Arc<Mark>> {
        let fresh = self.lock().insert(key.to_string());
        fresh.then(|| {
            Arc::new(Mark {
                set: self.clone(),
                key: key.to_string(),
            })
        })
    }

    #[cfg(test)]
    pub fn contains(&self, key: &str) -> bool {
        self.lock().contains(key)
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        self.set.lock().remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_under_way_until_its_last_mark_drops() {
        let set = InFlight::default();
        let mark = set.mark("a").unwrap();
        assert!(set.mark("a").is_none());
        let held = Arc::clone(&mark);
        drop(mark);
        assert!(set.contains("a"));
        drop(held);
        assert!(!set.contains("a"));
        assert!(set.mark("a").is_some());
    }
}
