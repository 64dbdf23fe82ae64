//! The reader: /dev/kmsg opened nonblocking and polled by the runtime, so the task never
//! holds a thread and ends as soon as it is cancelled.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{OomError, OomKills, OomParser, SYSTEM_OOM, handle_kill, record_message};
use crate::events::{EventRecorder, EventType};

const KMSG: &str = "/dev/kmsg";
/// The kernel never hands out a record longer than this (its extended console line limit);
/// a shorter buffer makes read fail with EINVAL.
const RECORD_MAX: usize = 8192;
/// Records read in one go before the task yields to others: a kernel that logs without pause
/// must not monopolise a worker thread.
const BATCH: usize = 256;

pub(super) struct Watcher {
    pub kills: Arc<OomKills>,
    pub events: EventRecorder,
    pub node_name: String,
}

/// Records of the backlog read at most: the ring buffer holds far fewer, this only bounds a
/// kernel that logs faster than we read.
const BACKLOG_MAX: usize = 100_000;

/// /dev/kmsg, opened and with its backlog read, and the parser that read it.
pub(super) type Opened = Result<(File, OomParser), OomError>;

impl Watcher {
    /// Opens /dev/kmsg at the oldest record the ring buffer still holds and reads what is
    /// there now, before the kubelet syncs any pod: a container killed before a restart still
    /// reports `OOMKilled` from its first status after it (the record of its kill is in memory
    /// nowhere else), while the node's events for those kills are not sent again.
    pub fn open_with_backlog(&self) -> Opened {
        let open_err = |source| OomError::Open { path: KMSG, source };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(KMSG)
            .map_err(open_err)?;
        let read_err = |source| OomError::Read { path: KMSG, source };
        let mut parser = OomParser::default();
        let mut buf = vec![0u8; RECORD_MAX];
        for _ in 0..BACKLOG_MAX {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.take_record(&mut parser, &buf[..n], true),
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(read_err(e)),
            }
        }
        Ok((file, parser))
    }

    pub async fn run(self, opened: Opened, cancel: CancellationToken) {
        let started = opened.and_then(|(file, parser)| {
            register(file)
                .map(|fd| (fd, parser))
                .map_err(|source| OomError::Open { path: KMSG, source })
        });
        let (kmsg, parser) = match started {
            Ok(started) => started,
            Err(err) => {
                warn!(%err, "Failed to start the OOM watcher; OOM kills are reported as the runtime sees them");
                return;
            }
        };
        info!("OOM watcher started");
        if let Err(err) = self.read(kmsg, parser, cancel).await {
            warn!(%err, "OOM watcher stopped; OOM kills are reported as the runtime sees them");
        }
    }

    async fn read(
        &self,
        kmsg: AsyncFd<File>,
        mut parser: OomParser,
        cancel: CancellationToken,
    ) -> Result<(), OomError> {
        let read_err = |source| OomError::Read { path: KMSG, source };
        let mut buf = vec![0u8; RECORD_MAX];
        loop {
            let mut ready = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                ready = kmsg.readable() => ready.map_err(read_err)?,
            };
            for _ in 0..BATCH {
                match ready.try_io(|f| f.get_ref().read(&mut buf)) {
                    Ok(Ok(0)) => break,
                    Ok(Ok(n)) => self.take_record(&mut parser, &buf[..n], false),
                    // The ring buffer overwrote records we had not read; the next read goes
                    // on from the oldest one left.
                    Ok(Err(e)) if e.raw_os_error() == Some(libc::EPIPE) => {
                        debug!(
                            "Kernel log records were overwritten before the OOM watcher read them"
                        );
                    }
                    Ok(Err(e)) if e.kind() == ErrorKind::Interrupted => {}
                    Ok(Err(e)) => return Err(read_err(e)),
                    // Nothing more for now: readiness is cleared, wait for the next record.
                    Err(_would_block) => break,
                }
            }
            tokio::task::yield_now().await;
        }
    }

    /// One record of the kernel log, read before the start (`earlier`) or since.
    fn take_record(&self, parser: &mut OomParser, record: &[u8], earlier: bool) {
        if let Some(kill) = record_message(record).and_then(|m| parser.push(m)) {
            self.on_kill(&kill, earlier);
        }
    }

    /// A kill from before the start (`earlier`) only marks its container: an earlier run
    /// reported the node's event already.
    fn on_kill(&self, kill: &super::OomKill, earlier: bool) {
        if earlier {
            debug!(pid = kill.pid, task_memcg = ?kill.task_memcg, "OOM kill before the start");
            handle_kill(kill, &self.kills);
            return;
        }
        info!(pid = kill.pid, comm = %kill.comm, oom_memcg = ?kill.oom_memcg, task_memcg = ?kill.task_memcg, "OOM kill");
        if let Some(message) = handle_kill(kill, &self.kills) {
            self.events.node(
                &self.node_name,
                None,
                EventType::Warning,
                SYSTEM_OOM,
                &message,
            );
        }
    }
}

/// Puts the file under the runtime's poller. Tokio deprecates its safe constructors because
/// a type could hand out a different descriptor later; a `File` owns one descriptor for its
/// whole life and nothing here replaces it, and the unsafe replacement is not allowed in
/// this crate.
#[allow(deprecated)]
fn register(file: File) -> std::io::Result<AsyncFd<File>> {
    AsyncFd::with_interest(file, Interest::READABLE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oom::OomKill;

    #[test]
    fn a_node_oom_becomes_a_warning_on_the_node() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let watcher = Watcher {
            kills: Arc::default(),
            events: EventRecorder::with_sink(tx),
            node_name: "node-a".into(),
        };
        watcher.on_kill(
            &OomKill {
                pid: 4242,
                comm: "stress".into(),
                oom_memcg: None,
                task_memcg: Some("/user.slice".into()),
            },
            false,
        );
        let event = rx.try_recv().expect("an event");
        assert_eq!(
            (event.object.kind, event.object.name.as_str()),
            ("Node", "node-a")
        );
        assert_eq!(
            (event.kind, event.reason.as_str()),
            (EventType::Warning, "SystemOOM")
        );
        assert_eq!(
            event.message,
            "System OOM encountered, victim process: stress, pid: 4242"
        );

        // A container's own limit: its status says so, the node hears nothing.
        watcher.on_kill(
            &OomKill {
                pid: 1,
                comm: "sh".into(),
                oom_memcg: Some("/kubepods/pod1".into()),
                task_memcg: Some(format!("/kubepods/pod1/{}", "a".repeat(64))),
            },
            false,
        );
        assert!(rx.try_recv().is_err());
        assert!(watcher.kills.contains(&"a".repeat(64)));
    }

    #[test]
    fn kills_before_the_start_mark_their_containers_but_tell_the_node_nothing() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let watcher = Watcher {
            kills: Arc::default(),
            events: EventRecorder::with_sink(tx),
            node_name: "node-a".into(),
        };
        for task_memcg in [
            "/user.slice".to_string(),
            format!("/kubepods/pod1/{}", "b".repeat(64)),
        ] {
            watcher.on_kill(
                &OomKill {
                    pid: 7,
                    comm: "sh".into(),
                    oom_memcg: None,
                    task_memcg: Some(task_memcg),
                },
                true,
            );
        }
        assert!(
            rx.try_recv().is_err(),
            "the earlier run sent the node's event"
        );
        assert!(watcher.kills.contains(&"b".repeat(64)));
    }
}
