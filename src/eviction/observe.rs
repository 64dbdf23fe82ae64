//! Fresh signal observations, read when a decision is made rather than taken from a sample
//! seconds old (upstream decides on cadvisor's cached housekeeping stats):
//! - `memory.available`: the machine's memory minus its working set, from /proc/meminfo and
//!   /proc/vmstat (usage less inactive page cache, as cadvisor computes the root's);
//! - `allocatableMemory.available`: the pods' cgroup limit minus its working set;
//! - `nodefs.*`: statvfs of the kubelet's root directory; `imagefs.*`: statvfs of the
//!   filesystem the runtime reports its images on (ImageFsInfo);
//! - `pid.available`: the kernel's pid limit minus the processes running now.
//!
//! The memory reads are five small files (about 0.1 ms), so the monitor can look every second.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::thresholds::{Observation, Observations, Signal};
use crate::cm::CgroupManager;
use crate::cri::RuntimeClient;

/// Local reads are quick; one that is not (a hung filesystem) must not stall the monitor.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub struct Probe {
    cgroups: Arc<CgroupManager>,
    root_dir: PathBuf,
    cri: RuntimeClient,
    /// A full look still running on a blocking thread (a hung statvfs): the next one is
    /// skipped rather than stacking threads up.
    looking: crate::inflight::InFlight,
}

/// What a full look found beside the observations.
#[derive(Debug, Default)]
pub struct Look {
    pub observations: Observations,
    /// Images sit on another filesystem than the kubelet's root directory.
    pub dedicated_image_fs: Option<bool>,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Blocking: memory signals only.
fn memory_now(cgroups: &CgroupManager) -> Observations {
    let mut out = Observations::new();
    if let (Some(meminfo), Some(vmstat)) = (read("/proc/meminfo"), read("/proc/vmstat"))
        && let Some(m) = crate::stats::local::node_memory(&meminfo, &vmstat)
        && let Some(total) = m.limit
    {
        out.insert(
            Signal::MemoryAvailable,
            Observation {
                available: clamp(total.saturating_sub(m.working_set)),
                capacity: clamp(total),
            },
        );
    }
    if let Some(kubepods) = cgroups.node_cgroup() {
        let dirs = crate::stats::cgroup::dirs(cgroups.layout(), &kubepods);
        if let Some(m) = crate::stats::cgroup::sample(&dirs, false).memory
            && let Some(limit) = m.limit
        {
            out.insert(
                Signal::AllocatableMemoryAvailable,
                Observation {
                    available: clamp(limit.saturating_sub(m.working_set)),
                    capacity: clamp(limit),
                },
            );
        }
    }
    out
}

fn fs_observations(path: &Path, bytes: Signal, inodes: Signal, out: &mut Observations) {
    match crate::stats::fs::statvfs(path) {
        Ok(i) => {
            out.insert(
                bytes,
                Observation {
                    available: clamp(i.available),
                    capacity: clamp(i.capacity),
                },
            );
            out.insert(
                inodes,
                Observation {
                    available: clamp(i.inodes_free),
                    capacity: clamp(i.inodes),
                },
            );
        }
        Err(err) => debug!(path = %path.display(), %err, "Eviction manager: statvfs failed"),
    }
}

fn pid_now(out: &mut Observations) {
    let num = |p: &str| read(p).and_then(|t| t.trim().parse::<i64>().ok());
    let max = match (
        num("/proc/sys/kernel/pid_max"),
        num("/proc/sys/kernel/threads-max"),
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let (Some(max), Some(running)) = (max, crate::sys::process_count()) {
        out.insert(
            Signal::PidAvailable,
            Observation {
                available: max - running,
                capacity: max,
            },
        );
    }
}

fn device(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.dev())
}

impl Probe {
    pub fn new(cgroups: Arc<CgroupManager>, root_dir: PathBuf, cri: RuntimeClient) -> Self {
        Probe {
            cgroups,
            root_dir,
            cri,
            looking: Default::default(),
        }
    }

    async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        match tokio::time::timeout(READ_TIMEOUT, tokio::task::spawn_blocking(f)).await {
            Ok(Ok(v)) => Some(v),
            _ => None,
        }
    }

    /// The memory signals now.
    pub async fn memory(&self) -> Observations {
        let cgroups = self.cgroups.clone();
        Self::blocking(move || memory_now(&cgroups))
            .await
            .unwrap_or_default()
    }

    /// Every signal now.
    pub async fn look(&self) -> Look {
        // The image filesystem's mountpoint comes from the runtime (bounded by its timeout).
        let image_mount = match self.cri.image_fs_info().await {
            Ok(r) => crate::stats::fs::image_fs_mountpoint(&r),
            Err(err) => {
                debug!(%err, "Eviction manager: ImageFsInfo failed");
                None
            }
        };
        let Some(mark) = self.looking.mark("look") else {
            debug!("Eviction manager: the last look is still running");
            return Look::default();
        };
        let cgroups = self.cgroups.clone();
        let root = self.root_dir.clone();
        Self::blocking(move || {
            let _mark = mark;
            let mut observations = memory_now(&cgroups);
            fs_observations(
                &root,
                Signal::NodeFsAvailable,
                Signal::NodeFsInodesFree,
                &mut observations,
            );
            let mut dedicated_image_fs = None;
            if let Some(mount) = &image_mount {
                fs_observations(
                    mount,
                    Signal::ImageFsAvailable,
                    Signal::ImageFsInodesFree,
                    &mut observations,
                );
                if let (Some(a), Some(b)) = (device(&root), device(mount)) {
                    dedicated_image_fs = Some(a != b);
                }
            }
            // Containers write to nodefs unless images (and so their layers) sit apart.
            let (bytes, inodes) = match dedicated_image_fs {
                Some(true) => (Signal::ImageFsAvailable, Signal::ImageFsInodesFree),
                _ => (Signal::NodeFsAvailable, Signal::NodeFsInodesFree),
            };
            for (from, to) in [
                (bytes, Signal::ContainerFsAvailable),
                (inodes, Signal::ContainerFsInodesFree),
            ] {
                if let Some(o) = observations.get(&from).copied() {
                    observations.insert(to, o);
                }
            }
            pid_now(&mut observations);
            Look {
                observations,
                dedicated_image_fs,
            }
        })
        .await
        .unwrap_or_default()
    }
}
