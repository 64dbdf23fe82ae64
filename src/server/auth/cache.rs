//! A small bounded cache with a time to live per entry, for webhook answers. Keys are SHA-256
//! digests so that bearer tokens never sit in memory as map keys and every key has one size.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upper bound on entries; a flood of distinct tokens or requests cannot grow memory past it.
pub const DEFAULT_CAPACITY: usize = 1024;

pub type Key = [u8; 32];

/// SHA-256 of `data`, the cache key for a token or a serialized review.
pub fn key_of(data: &[u8]) -> Key {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let mut key = [0u8; 32];
    key.copy_from_slice(digest.as_ref());
    key
}

struct Entry<V> {
    value: V,
    inserted: Instant,
    expires: Instant,
}

pub struct TtlCache<V> {
    capacity: usize,
    entries: Mutex<HashMap<Key, Entry<V>>>,
}

impl<V: Clone> TtlCache<V> {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn get(&self, key: &Key) -> Option<V> {
        self.get_at(key, Instant::now())
    }

    pub fn insert(&self, key: Key, value: V, ttl: Duration) {
        self.insert_at(key, value, ttl, Instant::now());
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry<V>>> {
        // A panic while holding the lock cannot leave a half-written entry behind (inserts
        // are single map operations), so a poisoned map is still usable.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get_at(&self, key: &Key, now: Instant) -> Option<V> {
        let mut map = self.lock();
        match map.get(key) {
            Some(e) if e.expires > now => Some(e.value.clone()),
            Some(_) => {
                map.remove(key);
                None
            }
            None => None,
        }
    }

    /// A zero TTL caches nothing, as upstream's webhook caches do.
    fn insert_at(&self, key: Key, value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        let mut map = self.lock();
        if map.len() >= self.capacity && !map.contains_key(&key) {
            map.retain(|_, e| e.expires > now);
            if map.len() >= self.capacity
                && let Some(oldest) = map.iter().min_by_key(|(_, e)| e.inserted).map(|(k, _)| *k)
            {
                map.remove(&oldest);
            }
        }
        map.insert(
            key,
            Entry {
                value,
                inserted: now,
                expires: now + ttl,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(n: u8) -> Key {
        key_of(&[n])
    }

    #[test]
    fn entries_expire_after_their_ttl() {
        let c = TtlCache::new(4);
        let t0 = Instant::now();
        c.insert_at(k(1), "a", Duration::from_secs(10), t0);
        assert_eq!(c.get_at(&k(1), t0 + Duration::from_secs(9)), Some("a"));
        assert_eq!(c.get_at(&k(1), t0 + Duration::from_secs(10)), None);
        assert_eq!(c.len(), 0, "an expired entry is dropped when seen");
    }

    #[test]
    fn zero_ttl_is_not_cached() {
        let c = TtlCache::new(4);
        c.insert(k(1), 1, Duration::ZERO);
        assert_eq!(c.get(&k(1)), None);
    }

    #[test]
    fn full_cache_drops_expired_then_oldest() {
        let c = TtlCache::new(2);
        let t0 = Instant::now();
        let s = Duration::from_secs;
        c.insert_at(k(1), 1, s(5), t0);
        c.insert_at(k(2), 2, s(100), t0 + s(1));
        // k(1) has expired by now: it goes, k(2) stays.
        c.insert_at(k(3), 3, s(100), t0 + s(6));
        assert_eq!(c.get_at(&k(1), t0 + s(6)), None);
        assert_eq!(c.get_at(&k(2), t0 + s(6)), Some(2));
        assert_eq!(c.get_at(&k(3), t0 + s(6)), Some(3));
        // Nothing expired: the oldest insert (k(2)) is evicted.
        c.insert_at(k(4), 4, s(100), t0 + s(7));
        assert_eq!(c.len(), 2);
        assert_eq!(c.get_at(&k(2), t0 + s(7)), None);
        assert_eq!(c.get_at(&k(4), t0 + s(7)), Some(4));
    }

    #[test]
    fn replacing_a_key_in_a_full_cache_evicts_nothing() {
        let c = TtlCache::new(2);
        let t0 = Instant::now();
        let s = Duration::from_secs;
        c.insert_at(k(1), 1, s(100), t0);
        c.insert_at(k(2), 2, s(100), t0);
        c.insert_at(k(1), 10, s(100), t0);
        assert_eq!(c.get_at(&k(1), t0), Some(10));
        assert_eq!(c.get_at(&k(2), t0), Some(2));
    }

    #[test]
    fn keys_are_sha256() {
        assert_eq!(
            hex::encode(key_of(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
