//! Filesystem capacity (statvfs) and disk usage (a `du -x` walk), bounded in time: both run on
//! the blocking pool and the caller waits at most a few seconds. A path whose walk is still
//! running (a stuck NFS mount, a huge tree) is not walked again until it finishes, so a hung
//! filesystem ties up one thread, not one per request. Walk results are kept for a while,
//! like upstream's cached volume metrics, and served stale when a new walk is slow.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::StatsError;

const STATVFS_WAIT: Duration = Duration::from_secs(2);
const DU_WAIT: Duration = Duration::from_secs(2);
/// A walk result is reused for this long.
const DU_TTL: Duration = Duration::from_secs(30);
/// Cached walks of paths nobody asked about for this long are dropped.
const DU_FORGET: Duration = Duration::from_secs(600);
const MAX_CACHED: usize = 10_000;
/// A tree with more entries than this is not worth walking on every scrape.
const MAX_WALK_ENTRIES: u64 = 2_000_000;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsInfo {
    pub capacity: u64,
    pub available: u64,
    /// capacity minus free blocks (root's reserve counts as used), as cadvisor computes it.
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    pub bytes: u64,
    pub inodes: u64,
}

type Shared<T> = Arc<Mutex<T>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
pub struct FsProbe {
    in_flight: crate::inflight::InFlight,
    du_cache: Shared<HashMap<PathBuf, (Instant, DiskUsage)>>,
}

impl FsProbe {
    async fn bounded<T, F>(&self, key: String, wait: Duration, f: F) -> Result<T, StatsError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let Some(mark) = self.in_flight.mark(&key) else {
            return Err(StatsError::Busy(key));
        };
        let task = tokio::task::spawn_blocking(move || {
            let _mark = mark;
            f()
        });
        match tokio::time::timeout(wait, task).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(StatsError::Blocking(e.to_string())),
            Err(_) => Err(StatsError::Timeout {
                what: key,
                after: wait,
            }),
        }
    }

    pub async fn statvfs(&self, path: &Path) -> Result<FsInfo, StatsError> {
        let p = path.to_path_buf();
        self.bounded(
            format!("statvfs {}", path.display()),
            STATVFS_WAIT,
            move || statvfs(&p),
        )
        .await?
    }

    /// Bytes on disk and inodes under `path`, not crossing into other filesystems.
    pub async fn disk_usage(&self, path: &Path) -> Result<DiskUsage, StatsError> {
        self.disk_usage_within(path, DU_TTL).await
    }

    /// Like `disk_usage`, with a walk no older than `max_age` unless a new one is slow (the
    /// eviction monitor acts on what it reads and wants it fresh).
    pub async fn disk_usage_within(
        &self,
        path: &Path,
        max_age: Duration,
    ) -> Result<DiskUsage, StatsError> {
        let cached = lock(&self.du_cache).get(path).copied();
        if let Some((at, usage)) = cached
            && at.elapsed() < max_age
        {
            return Ok(usage);
        }
        let cache = self.du_cache.clone();
        let p = path.to_path_buf();
        let walked = self
            .bounded(format!("du {}", path.display()), DU_WAIT, move || {
                let result = walk(&p);
                if let Ok(usage) = &result {
                    remember(&cache, p, *usage);
                }
                result
            })
            .await;
        match (walked, cached) {
            (Ok(result), _) => result,
            (Err(_), Some((_, stale))) => Ok(stale),
            (Err(e), None) => Err(e),
        }
    }
}

fn remember(cache: &Mutex<HashMap<PathBuf, (Instant, DiskUsage)>>, p: PathBuf, u: DiskUsage) {
    let mut c = lock(cache);
    c.retain(|_, (at, _)| at.elapsed() < DU_FORGET);
    if c.len() < MAX_CACHED || c.contains_key(&p) {
        c.insert(p, (Instant::now(), u));
    }
}

/// The mountpoint of the filesystem the runtime keeps its images on (ImageFsInfo's first
/// image filesystem), when it names one.
pub fn image_fs_mountpoint(info: &crate::cri::api::ImageFsInfoResponse) -> Option<PathBuf> {
    info.image_filesystems
        .first()
        .and_then(|u| u.fs_id.as_ref())
        .map(|f| PathBuf::from(&f.mountpoint))
        .filter(|m| !m.as_os_str().is_empty())
}

pub fn statvfs(path: &Path) -> Result<FsInfo, StatsError> {
    let s = crate::sys::statvfs(path).map_err(|source| StatsError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(FsInfo {
        capacity: s.capacity,
        available: s.available,
        used: s.capacity.saturating_sub(s.free),
        inodes: s.inodes,
        inodes_free: s.inodes_free,
    })
}

/// Like `du -x -s` plus an inode count: allocated blocks, hard links counted once.
pub fn walk(root: &Path) -> Result<DiskUsage, StatsError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| StatsError::Io { path: p, source }
    };
    let top = std::fs::symlink_metadata(root).map_err(io(root))?;
    let dev = top.dev();
    let mut usage = DiskUsage::default();
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    let mut stack = vec![(root.to_path_buf(), top)];
    while let Some((path, meta)) = stack.pop() {
        if meta.nlink() > 1 && !meta.is_dir() && !linked.insert((meta.dev(), meta.ino())) {
            continue;
        }
        usage.bytes = usage
            .bytes
            .saturating_add(meta.blocks().saturating_mul(512));
        usage.inodes += 1;
        if usage.inodes > MAX_WALK_ENTRIES {
            return Err(StatsError::TooLarge(root.to_path_buf()));
        }
        if !meta.is_dir() || meta.dev() != dev {
            continue;
        }
        let entries = match std::fs::read_dir(&path) {
            Ok(e) => e,
            // Entries vanish while pods write; what is left still counts.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&path)(e)),
        };
        for entry in entries.flatten() {
            if let Ok(m) = entry.metadata()
                && m.dev() == dev
            {
                stack.push((entry.path(), m));
            }
        }
    }
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_counts_blocks_inodes_and_hard_links_once() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/a"), vec![1u8; 64 * 1024]).unwrap();
        std::fs::hard_link(d.path().join("sub/a"), d.path().join("b")).unwrap();
        std::os::unix::fs::symlink("sub/a", d.path().join("link")).unwrap();
        let u = walk(d.path()).unwrap();
        // root, sub, a (once), link
        assert_eq!(u.inodes, 4);
        assert!(u.bytes >= 64 * 1024, "{u:?}");
        assert!(u.bytes < 64 * 1024 * 2, "hard link counted twice: {u:?}");
        assert!(matches!(
            walk(&d.path().join("missing")),
            Err(StatsError::Io { .. })
        ));
    }

    #[test]
    fn statvfs_of_a_real_directory() {
        let d = tempfile::tempdir().unwrap();
        let info = statvfs(d.path()).unwrap();
        assert!(info.capacity > 0);
        assert!(info.available <= info.capacity);
        assert!(info.used <= info.capacity);
    }

    #[tokio::test]
    async fn disk_usage_is_cached_and_busy_paths_are_not_walked_twice() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), vec![0u8; 8192]).unwrap();
        let probe = FsProbe::default();
        let first = probe.disk_usage(d.path()).await.unwrap();
        std::fs::write(d.path().join("g"), vec![0u8; 8192]).unwrap();
        // Within the TTL the cached walk answers.
        assert_eq!(probe.disk_usage(d.path()).await.unwrap(), first);

        let _held = probe
            .in_flight
            .mark(&format!("statvfs {}", d.path().display()))
            .unwrap();
        assert!(matches!(
            probe.statvfs(d.path()).await,
            Err(StatsError::Busy(_))
        ));
    }

    #[tokio::test]
    async fn slow_work_times_out_and_releases_its_key_later() {
        let probe = FsProbe::default();
        let r = probe
            .bounded("k".into(), Duration::from_millis(20), || {
                std::thread::sleep(Duration::from_millis(200))
            })
            .await;
        assert!(matches!(r, Err(StatsError::Timeout { .. })));
        assert!(probe.in_flight.contains("k"));
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!probe.in_flight.contains("k"));
    }
}
