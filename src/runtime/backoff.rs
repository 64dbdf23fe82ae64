//! Crash-loop backoff: a container that keeps exiting waits 10 s, then 20 s, doubling up to
//! 5 min; once it has stayed up (no restart) for twice the maximum, the delay starts over.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last_update: SystemTime,
}

/// Keyed by pod UID + container name (+ spec hash, so a changed spec starts fresh). Entries are
/// dropped when their pod goes away and when stale, so the map is bounded by live containers.
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(INITIAL, MAX)
    }
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    pub fn key(pod_uid: &str, container: &str, hash: u64) -> String {
        format!("{pod_uid}_{container}_{hash:x}")
    }

    /// How long the container must still wait after exiting at `finished`, if at all.
    pub fn remaining(&self, key: &str, finished: SystemTime, now: SystemTime) -> Option<Duration> {
        let entry = self.entries.get(key)?;
        let ready_at = finished + entry.delay;
        ready_at.duration_since(now).ok().filter(|d| !d.is_zero())
    }

    /// Records a restart at `now` and returns the delay that applies to the next one.
    pub fn record_restart(&mut self, key: &str, now: SystemTime) -> Duration {
        let (initial, max) = (self.initial, self.max);
        let entry = self
            .entries
            .entry(key.to_string())
            .and_modify(|e| {
                let idle = now.duration_since(e.last_update).unwrap_or_default();
                e.delay = if idle > 2 * max {
                    initial
                } else {
                    (e.delay * 2).min(max)
                };
                e.last_update = now;
            })
            .or_insert(Entry {
                delay: initial,
                last_update: now,
            });
        entry.delay
    }

    /// Remaining wait counted from the last recorded failure, for things (image pulls) whose
    /// failure time is only known to the kubelet.
    pub fn remaining_since_last(&self, key: &str, now: SystemTime) -> Option<Duration> {
        let entry = self.entries.get(key)?;
        self.remaining(key, entry.last_update, now)
    }

    pub fn forget(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Current delay, for the CrashLoopBackOff message.
    pub fn delay(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.delay)
    }

    #[cfg(test)]
    pub fn forget_pod(&mut self, pod_uid: &str) {
        let prefix = format!("{pod_uid}_");
        self.entries.retain(|k, _| !k.starts_with(&prefix));
    }

    pub fn gc(&mut self, now: SystemTime) {
        let limit = 2 * self.max;
        self.entries.retain(|_, e| {
            now.duration_since(e.last_update)
                .map(|idle| idle <= limit)
                .unwrap_or(true)
        });
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_max_then_resets_after_quiet_period() {
        let mut b = Backoff::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let delays: Vec<u64> = (0..7)
            .map(|i| b.record_restart("k", t0 + Duration::from_secs(i)).as_secs())
            .collect();
        assert_eq!(delays, vec![10, 20, 40, 80, 160, 300, 300]);
        let later = t0 + Duration::from_secs(6) + 2 * MAX + Duration::from_secs(1);
        assert_eq!(b.record_restart("k", later), INITIAL);
    }

    #[test]
    fn remaining_counts_from_finish_time() {
        let mut b = Backoff::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(b.remaining("k", t0, t0), None);
        b.record_restart("k", t0);
        let finished = t0 + Duration::from_secs(5);
        assert_eq!(
            b.remaining("k", finished, finished + Duration::from_secs(4)),
            Some(Duration::from_secs(6))
        );
        assert_eq!(
            b.remaining("k", finished, finished + Duration::from_secs(10)),
            None
        );
    }

    #[test]
    fn forget_and_gc_bound_the_map() {
        let mut b = Backoff::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        b.record_restart(&Backoff::key("u1", "a", 1), t0);
        b.record_restart(&Backoff::key("u2", "a", 1), t0);
        b.forget_pod("u1");
        assert_eq!(b.len(), 1);
        b.gc(t0 + 3 * MAX);
        assert!(b.is_empty());
    }
}
