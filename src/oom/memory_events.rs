//! OOM kills as cgroup v2 counts them: every container cgroup's `memory.events` has an
//! `oom_kill` counter, raised for the cgroup of the killed process whichever limit was hit
//! (the container's, or the pod's when the pod cgroup reached its own first), and the kernel
//! signals each change to inotify watchers of the file.
//!
//! This backs the kernel log: it needs no /dev/kmsg (unreadable in an unprivileged kubelet,
//! and its ring buffer can lose records), and it names the container by its own cgroup.
//!
//! The counter lives only as long as the container's cgroup, which the runtime removes soon
//! after the container exits, so it must be watched while the container runs. The watcher
//! follows the QoS directories and every pod directory for new children (IN_CREATE), puts a
//! watch on each new container's `memory.events` at once and reads it then (a kill before the
//! watch was in place still counts), and reads it again on every change. A rescan every
//! [`RESCAN`] catches what a lost event (queue overflow) missed.

use std::collections::HashMap;
use std::fs::File;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::OomKills;

const RESCAN: Duration = Duration::from_secs(10);
/// Watches at most: a node runs far fewer pods and containers, this bounds a runaway tree.
const MAX_WATCHES: usize = 16_384;
/// Room for a few hundred events per read.
const EVENT_BUFFER: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum MemoryEventsError {
    #[error("inotify: {0}")]
    Init(#[source] std::io::Error),
    #[error("reading inotify events: {0}")]
    Read(#[source] std::io::Error),
}

/// What a watch descriptor stands for.
#[derive(Debug)]
enum Watched {
    /// A QoS directory (children are pod cgroups) or a pod cgroup (children are containers).
    Dir { path: PathBuf, pod: bool },
    /// A container's memory.events, with the oom_kill count last read.
    Events {
        container_id: String,
        file: PathBuf,
        seen: u64,
    },
}

pub(super) struct MemoryEventsWatcher {
    kills: Arc<OomKills>,
    qos_dirs: Vec<PathBuf>,
    fd: AsyncFd<File>,
    watches: HashMap<i32, Watched>,
}

impl MemoryEventsWatcher {
    /// Sets up the watches on what exists now; `qos_dirs` are where pod cgroups are made.
    pub fn new(kills: Arc<OomKills>, qos_dirs: Vec<PathBuf>) -> Result<Self, MemoryEventsError> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
            .map_err(|e| MemoryEventsError::Init(e.into()))?;
        let fd = register(File::from(fd)).map_err(MemoryEventsError::Init)?;
        let mut watcher = MemoryEventsWatcher {
            kills,
            qos_dirs,
            fd,
            watches: HashMap::new(),
        };
        watcher.rescan();
        Ok(watcher)
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        info!(
            watches = self.watches.len(),
            "Following the OOM kill counters of container cgroups (memory.events)"
        );
        let mut rescan = tokio::time::interval(RESCAN);
        rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut buf = vec![MaybeUninit::<u8>::uninit(); EVENT_BUFFER];
        loop {
            let read = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = rescan.tick() => {
                    self.rescan();
                    continue;
                }
                ready = self.fd.readable() => match ready {
                    Ok(mut guard) => guard.try_io(|fd| read_events(fd.get_ref(), &mut buf)),
                    Err(e) => Ok(Err(e)),
                },
            };
            match read {
                Ok(Ok(events)) => {
                    for event in events {
                        self.on_event(event);
                    }
                }
                Ok(Err(e)) => {
                    warn!(err = %MemoryEventsError::Read(e), "The OOM kill counters of container cgroups are no longer followed");
                    return;
                }
                // Nothing more for now: readiness is cleared, wait for the next event.
                Err(_would_block) => {}
            }
            tokio::task::yield_now().await;
        }
    }

    /// Puts watches on every QoS directory, pod cgroup and container cgroup that exists.
    fn rescan(&mut self) {
        for dir in self.qos_dirs.clone() {
            self.watch_dir(&dir, false);
        }
    }

    fn on_event(&mut self, event: Event) {
        if event.mask.contains(ReadFlags::QUEUE_OVERFLOW) {
            debug!("inotify queue overflowed; rescanning the pod cgroups");
            self.rescan();
            return;
        }
        if event.mask.contains(ReadFlags::IGNORED) {
            // The file or directory went away with its cgroup.
            self.watches.remove(&event.wd);
            return;
        }
        match self.watches.get(&event.wd) {
            Some(Watched::Dir { path, pod }) => {
                let (path, pod) = (path.clone(), *pod);
                let made = ReadFlags::CREATE | ReadFlags::MOVED_TO;
                if let Some(name) = event.name.filter(|_| event.mask.intersects(made)) {
                    self.child(&path, pod, &name);
                }
            }
            Some(Watched::Events { .. }) => self.counter_changed(event.wd),
            None => {}
        }
    }

    /// A child of a QoS directory (`pod` false) or of a pod cgroup.
    fn child(&mut self, parent: &Path, pod: bool, name: &str) {
        let path = parent.join(name);
        if !pod && is_pod_dir(name) {
            self.watch_dir(&path, true);
        } else if pod && let Some(id) = container_id(name) {
            self.watch_events(&path, id);
        }
    }

    /// Watches `dir` for new children and takes the children there now.
    fn watch_dir(&mut self, dir: &Path, pod: bool) {
        // cgroupfs makes a directory with its files at once; MOVED_TO lets the tests do so.
        let flags = WatchFlags::CREATE | WatchFlags::MOVED_TO | WatchFlags::ONLYDIR;
        let Some(wd) = self.add_watch(dir, flags) else {
            return;
        };
        self.watches.entry(wd).or_insert_with(|| Watched::Dir {
            path: dir.to_path_buf(),
            pod,
        });
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir())
                && let Some(name) = entry.file_name().to_str()
            {
                self.child(dir, pod, name);
            }
        }
    }

    /// Watches a container's memory.events; a count already above zero is a kill that came
    /// before the watch.
    fn watch_events(&mut self, dir: &Path, container_id: &str) {
        let file = dir.join("memory.events");
        let Some(wd) = self.add_watch(&file, WatchFlags::MODIFY) else {
            return;
        };
        if self.watches.contains_key(&wd) {
            return;
        }
        self.watches.insert(
            wd,
            Watched::Events {
                container_id: container_id.to_string(),
                file,
                seen: 0,
            },
        );
        self.counter_changed(wd);
    }

    fn counter_changed(&mut self, wd: i32) {
        let Some(Watched::Events {
            container_id,
            file,
            seen,
        }) = self.watches.get_mut(&wd)
        else {
            return;
        };
        // Unreadable: the cgroup is on its way out, and what it counted was read before.
        let Some(count) = std::fs::read_to_string(&*file)
            .ok()
            .and_then(|t| oom_kill_count(&t))
        else {
            return;
        };
        if count > *seen {
            *seen = count;
            info!(container_id = %container_id, oom_kill = count, "OOM kill counted in the container's memory.events");
            self.kills.record(container_id);
        }
    }

    fn add_watch(&self, path: &Path, flags: WatchFlags) -> Option<i32> {
        if self.watches.len() >= MAX_WATCHES {
            debug!(path = %path.display(), "Too many cgroups to watch for OOM kills");
            return None;
        }
        match inotify::add_watch(self.fd.get_ref(), path, flags) {
            Ok(wd) => Some(wd),
            // Gone already, or not a cgroup v2 directory: nothing to follow.
            Err(e) => {
                debug!(path = %path.display(), err = %e, "Not watching for OOM kills");
                None
            }
        }
    }
}

/// One inotify event, owned.
#[derive(Debug)]
struct Event {
    wd: i32,
    mask: ReadFlags,
    name: Option<String>,
}

/// Drains what the inotify descriptor holds now; WouldBlock when it holds nothing.
fn read_events(fd: &File, buf: &mut [MaybeUninit<u8>]) -> std::io::Result<Vec<Event>> {
    let mut reader = inotify::Reader::new(fd, buf);
    let mut out = Vec::new();
    loop {
        match reader.next() {
            Ok(e) => out.push(Event {
                wd: e.wd(),
                mask: e.events(),
                name: e
                    .file_name()
                    .and_then(|n| n.to_str().ok())
                    .map(str::to_string),
            }),
            Err(e) if e == rustix::io::Errno::INTR => {}
            Err(e) => return Err(e.into()),
        }
        if reader.is_buffer_empty() {
            return Ok(out);
        }
    }
}

/// The `oom_kill` line of a memory.events file.
fn oom_kill_count(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// A pod cgroup's directory name: "pod<uid>" (cgroupfs) or "kubepods-besteffort-pod<uid>.slice"
/// (systemd, dashes of the UID turned into underscores).
fn is_pod_dir(name: &str) -> bool {
    let base = name.strip_suffix(".slice").unwrap_or(name);
    base.starts_with("pod") || base.contains("-pod")
}

/// The container ID in a container cgroup's directory name: the name itself (cgroupfs), or
/// the part before ".scope" after the runtime's prefix ("cri-containerd-<id>.scope",
/// "crio-<id>.scope"). Runtime IDs are 64 hex digits.
fn container_id(name: &str) -> Option<&str> {
    let base = name.strip_suffix(".scope").unwrap_or(name);
    let id = base.rsplit('-').next()?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

/// Puts the inotify descriptor under the runtime's poller; see `watch::register` on why the
/// deprecated constructor.
#[allow(deprecated)]
fn register(file: File) -> std::io::Result<AsyncFd<File>> {
    AsyncFd::with_interest(file, Interest::READABLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0f5c2b4e8a1d3c7b9e6f0a2d4c8b1e3f5a7d9c0b2e4f6a8c1d3e5f7a9b0c2d4e";

    #[test]
    fn names() {
        assert_eq!(container_id(ID), Some(ID));
        assert_eq!(
            container_id(&format!("cri-containerd-{ID}.scope")),
            Some(ID)
        );
        assert_eq!(container_id(&format!("crio-{ID}.scope")), Some(ID));
        assert_eq!(container_id("cri-containerd-abc.scope"), None);
        assert_eq!(container_id(&ID.replace('0', "x")), None);
        assert!(is_pod_dir("pod6f1e2d3c-aaaa-bbbb-cccc-0123456789ab"));
        assert!(is_pod_dir("kubepods-burstable-pod6f1e2d3c_aaaa_bbbb.slice"));
        assert!(is_pod_dir("kubepods-pod6f1e2d3c_aaaa.slice"));
        assert!(!is_pod_dir("burstable"));
        assert!(!is_pod_dir("kubepods-besteffort.slice"));
        assert_eq!(
            oom_kill_count("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n"),
            Some(1)
        );
        assert_eq!(oom_kill_count("oom 1\n"), None);
        assert_eq!(oom_kill_count("oom_kill x\n"), None);
    }

    async fn recorded(kills: &OomKills, id: &str) -> bool {
        for _ in 0..200 {
            if kills.contains(id) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    /// The real inotify machinery on an ordinary directory tree shaped like cgroup v2's: a
    /// container made after the start is followed from its creation, one that was there
    /// before with a kill counted is marked at once, and a change of the counter marks its
    /// container.
    #[tokio::test]
    async fn follows_new_pods_containers_and_counters() {
        let tmp = tempfile::tempdir().unwrap();
        let kubepods = tmp.path().join("kubepods");
        let burstable = kubepods.join("burstable");
        let besteffort = kubepods.join("besteffort");
        for d in [&burstable, &besteffort] {
            std::fs::create_dir_all(d).unwrap();
        }
        let events = "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n";
        let killed = "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n";
        // Before the start: one killed container, one quiet one.
        let old_pod = besteffort.join("pod1111");
        let (old_killed, old_quiet) = ("a".repeat(64), "b".repeat(64));
        for (id, text) in [(&old_killed, killed), (&old_quiet, events)] {
            std::fs::create_dir_all(old_pod.join(id)).unwrap();
            std::fs::write(old_pod.join(id).join("memory.events"), text).unwrap();
        }

        let kills = Arc::new(OomKills::default());
        let watcher = MemoryEventsWatcher::new(
            kills.clone(),
            vec![kubepods.clone(), burstable.clone(), besteffort.clone()],
        )
        .unwrap();
        assert!(kills.contains(&old_killed), "counted before the start");
        assert!(!kills.contains(&old_quiet));
        let cancel = CancellationToken::new();
        let task = tokio::spawn(watcher.run(cancel.clone()));

        // A change of a watched counter.
        std::fs::write(old_pod.join(&old_quiet).join("memory.events"), killed).unwrap();
        assert!(recorded(&kills, &old_quiet).await);

        // A new pod in another QoS directory, then a container in it (systemd's names).
        let pod = burstable.join("kubepods-burstable-pod2222.slice");
        std::fs::create_dir(&pod).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let new_id = "c".repeat(64);
        let staged = tmp.path().join("staged");
        std::fs::create_dir(&staged).unwrap();
        std::fs::write(staged.join("memory.events"), events).unwrap();
        let scope = pod.join(format!("cri-containerd-{new_id}.scope"));
        std::fs::rename(&staged, &scope).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!kills.contains(&new_id));
        std::fs::write(scope.join("memory.events"), killed).unwrap();
        assert!(
            recorded(&kills, &new_id).await,
            "followed from its creation"
        );

        cancel.cancel();
        task.await.unwrap();
    }
}
