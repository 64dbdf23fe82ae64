//! usageNanoCores: the CPU rate between two cumulative samples. Like upstream's cached rate,
//! one periodic caller (the sampler) moves the window; requests read the last rate, so two
//! scrapes close together never see a noisy tiny window.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Above this many tracked series new ones are not tracked; the map is pruned to the live
/// ones every sampler round, so this only guards against a runaway runtime.
const MAX_ENTRIES: usize = 20_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSample {
    /// When the cumulative value was read, in nanoseconds since the epoch.
    pub at_ns: i64,
    pub usage_ns: u64,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    last: CpuSample,
    rate: Option<u64>,
}

#[derive(Debug, Default)]
pub struct CpuRates {
    entries: Mutex<HashMap<String, Entry>>,
}

/// Nanocores between two samples; None when time did not move forward or the counter went
/// back (a restarted container reusing the key).
pub fn rate(prev: CpuSample, cur: CpuSample) -> Option<u64> {
    let dt = cur.at_ns.checked_sub(prev.at_ns).filter(|d| *d > 0)?;
    let used = cur.usage_ns.checked_sub(prev.usage_ns)?;
    let nano_cores = u128::from(used) * 1_000_000_000 / dt as u128;
    u64::try_from(nano_cores).ok()
}

impl CpuRates {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a new cumulative sample and returns the rate since the previous one.
    pub fn update(&self, key: &str, cur: CpuSample) -> Option<u64> {
        let mut map = self.lock();
        match map.get_mut(key) {
            Some(e) => {
                if cur.at_ns <= e.last.at_ns {
                    return e.rate;
                }
                e.rate = rate(e.last, cur);
                e.last = cur;
                e.rate
            }
            None => {
                if map.len() < MAX_ENTRIES {
                    map.insert(
                        key.to_string(),
                        Entry {
                            last: cur,
                            rate: None,
                        },
                    );
                }
                None
            }
        }
    }

    /// The rate from the last two samples, if there were two.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.lock().get(key).and_then(|e| e.rate)
    }

    /// Forgets everything not in `live` (containers and pods that are gone).
    pub fn retain(&self, live: &HashSet<String>) {
        self.lock().retain(|k, _| live.contains(k));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at_s: i64, usage_ms: u64) -> CpuSample {
        CpuSample {
            at_ns: at_s * 1_000_000_000,
            usage_ns: usage_ms * 1_000_000,
        }
    }

    #[test]
    fn rate_is_nanocores() {
        // 500 ms of CPU over 10 s is 0.05 cores.
        assert_eq!(rate(s(0, 0), s(10, 500)), Some(50_000_000));
        // Two full cores.
        assert_eq!(rate(s(0, 0), s(1, 2000)), Some(2_000_000_000));
        assert_eq!(rate(s(5, 0), s(5, 10)), None);
        assert_eq!(rate(s(0, 10), s(1, 5)), None);
    }

    #[test]
    fn cache_needs_two_samples_and_forgets_the_dead() {
        let r = CpuRates::default();
        assert_eq!(r.update("c1", s(0, 0)), None);
        assert_eq!(r.get("c1"), None);
        assert_eq!(r.update("c1", s(10, 1000)), Some(100_000_000));
        assert_eq!(r.get("c1"), Some(100_000_000));
        // A sample that does not move time forward keeps the last rate.
        assert_eq!(r.update("c1", s(10, 5000)), Some(100_000_000));
        r.update("c2", s(0, 0));
        assert_eq!(r.len(), 2);
        r.retain(&HashSet::from(["c2".to_string()]));
        assert_eq!(r.get("c1"), None);
        assert_eq!(r.len(), 1);
    }
}
