//! The kernel's OOM kills, read from /dev/kmsg: a container whose process the OOM killer
//! killed reports reason `OOMKilled`, and a node-level OOM records a `SystemOOM` event on the
//! Node, as upstream's OOM watcher does.
//!
//! Why the kernel log and not only the runtime: containerd reports `OOMKilled` only when its
//! shim sees an OOM event on the container's own memory cgroup. A pod cgroup carries the sum
//! of its containers' limits, and the sandbox's pause process is charged to it too, so with
//! one container the pod cgroup reaches the limit first: the kernel kills the container's
//! process, but the OOM belongs to the pod cgroup and containerd says `Error`, exit 137.
//! Upstream's kubelet passes that through; we do better without guessing from exit codes.
//!
//! On cgroup v2 the container cgroups' `memory.events` counters are followed as well (see
//! `memory_events`): they need no /dev/kmsg, but live only while the container's cgroup does,
//! which the runtime removes once the container has exited, often before our relist sees the
//! exit; so they are watched while the containers run. v1's `memory.oom_control` offers no
//! such notification to a reader that did not register an eventfd per cgroup, and is left to
//! the kernel log.
//!
//! The kernel writes one summary per kill with the victim's memory cgroup (`task_memcg`, the
//! container's, whichever cgroup's limit was hit), and the container ID is that cgroup's
//! name. The watcher reads the log as it is written (nonblocking), starting with what the ring
//! buffer still holds from before the kubelet started (those kills mark their containers, so a
//! restart does not turn `OOMKilled` into `Error`, but the node's events for them are not sent
//! again), remembers the IDs of containers that lost a process (bounded, oldest forgotten
//! first) and the runtime manager marks such a container
//! `OOMKilled` once it has exited — as containerd does, whichever process of it was killed.
//! The record is written while the kernel kills, before the process is gone, so it is in
//! place well before the runtime reports the exit.

mod memory_events;
mod parse;
mod watch;

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

pub use parse::{OomKill, OomParser, record_message, system_oom_message};

/// The reason a container killed by the OOM killer reports.
pub const OOM_KILLED: &str = "OOMKilled";
/// Upstream's event reason for a node-level OOM kill.
pub const SYSTEM_OOM: &str = "SystemOOM";

/// How many OOM-killed containers are remembered; a container's exit is seen within seconds,
/// so this only has to outlast a burst of kills.
const REMEMBERED: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum OomError {
    #[error("{path}: {source}")]
    Open {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Containers that lost a process to the OOM killer, by container ID.
#[derive(Debug, Default)]
pub struct OomKills {
    inner: Mutex<Recent>,
}

#[derive(Debug, Default)]
struct Recent {
    order: VecDeque<String>,
    ids: HashSet<String>,
}

impl OomKills {
    pub fn record(&self, container_id: &str) {
        let mut recent = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if !recent.ids.insert(container_id.to_string()) {
            return;
        }
        recent.order.push_back(container_id.to_string());
        while recent.order.len() > REMEMBERED {
            if let Some(old) = recent.order.pop_front() {
                recent.ids.remove(&old);
            }
        }
    }

    pub fn contains(&self, container_id: &str) -> bool {
        let recent = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        recent.ids.contains(container_id)
    }
}

/// What to do about one kill: remember its container, and say whether the node gets a
/// `SystemOOM` event with which message.
pub fn handle_kill(kill: &OomKill, kills: &OomKills) -> Option<String> {
    if let Some(id) = kill.container_id() {
        kills.record(id);
    }
    kill.is_system_oom().then(|| system_oom_message(kill))
}

/// Starts the watchers in `tasks`; returns the record the runtime manager consults. Without a
/// readable /dev/kmsg (an unprivileged container) the kubelet runs on, with the cgroup
/// counters alone on v2 and on v1 reporting what the runtime says, as upstream does when its
/// watcher fails to start. `qos_dirs` are where pod cgroups are made on cgroup v2 (empty on
/// v1 or without cgroupsPerQOS).
pub fn spawn(
    events: crate::events::EventRecorder,
    node_name: String,
    qos_dirs: Vec<std::path::PathBuf>,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> Arc<OomKills> {
    let kills = Arc::new(OomKills::default());
    let watcher = watch::Watcher {
        kills: kills.clone(),
        events,
        node_name,
    };
    // Read now, before any pod's first status: see `Watcher::open_with_backlog`.
    let opened = watcher.open_with_backlog();
    tasks.background("OOM watcher", watcher.run(opened, cancel.child_token()));
    if !qos_dirs.is_empty() {
        match memory_events::MemoryEventsWatcher::new(kills.clone(), qos_dirs) {
            Ok(w) => tasks.background("OOM counter watcher", w.run(cancel.child_token())),
            Err(err) => {
                tracing::warn!(%err, "Failed to follow the cgroups' OOM kill counters")
            }
        }
    }
    kills
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kill(oom_memcg: Option<&str>, task_memcg: &str) -> OomKill {
        OomKill {
            pid: 7,
            comm: "hog".into(),
            oom_memcg: oom_memcg.map(str::to_string),
            task_memcg: Some(task_memcg.into()),
        }
    }

    const ID: &str = "bbd39733dab89f07c713a7e07a8e55bda877f70ef9102ecd42b945bed6d839ad";

    #[test]
    fn a_container_oom_marks_the_container_and_no_event() {
        let kills = OomKills::default();
        let k = kill(Some("/kubepods/pod1"), &format!("/kubepods/pod1/{ID}"));
        assert_eq!(handle_kill(&k, &kills), None);
        assert!(kills.contains(ID));
        assert!(!kills.contains("other"));
    }

    #[test]
    fn a_node_oom_gives_the_event() {
        let kills = OomKills::default();
        let k = kill(None, "/user.slice");
        assert_eq!(
            handle_kill(&k, &kills).as_deref(),
            Some("System OOM encountered, victim process: hog, pid: 7")
        );
        // Upstream's "/" stands for the root cgroup: the same as no memcg.
        assert!(handle_kill(&kill(Some("/"), "/x"), &kills).is_some());
    }

    #[test]
    fn the_record_is_bounded() {
        let kills = OomKills::default();
        for i in 0..REMEMBERED + 10 {
            kills.record(&format!("{i:064x}"));
        }
        assert!(!kills.contains(&format!("{:064x}", 0)));
        assert!(kills.contains(&format!("{:064x}", REMEMBERED + 9)));
        kills.record(&format!("{:064x}", REMEMBERED + 9));
        let recent = kills.inner.lock().unwrap();
        assert_eq!(
            (recent.order.len(), recent.ids.len()),
            (REMEMBERED, REMEMBERED)
        );
    }
}
