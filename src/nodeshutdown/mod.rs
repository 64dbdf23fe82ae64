//! Graceful node shutdown, as upstream: with `shutdownGracePeriod` (or
//! `shutdownGracePeriodByPodPriority`) set, the kubelet holds a delay inhibitor lock from
//! systemd-logind (raising logind's InhibitDelayMaxSec through a drop-in when it is too
//! short). When logind announces a shutdown (PrepareForShutdown), the node turns NotReady
//! ("node is shutting down") and the pods are terminated group by group, lowest priority
//! first, each group within its share of the period; each pod ends Failed with reason
//! `Terminated`. Then the lock goes and the machine may power off. A cancelled shutdown
//! takes the lock again and the node becomes Ready.

pub mod groups;
pub mod logind;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::PodStatus;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::eviction::Eviction;
use crate::status::{PodFailure, StatusStore, has_finished};
use groups::Group;
use logind::LogindError;

/// Upstream's pod status for a pod the shutdown terminated.
pub const REASON: &str = "Terminated";
pub const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// What the Ready condition says meanwhile.
pub const NOT_READY: &str = "node is shutting down";
/// After a lost bus or a failed start, the next try: doubling from the first to the last, so
/// a node without logind is not told so every few seconds; back to the first after a session
/// that lasted.
const RETRY_FIRST: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_millis(200);
/// How long logind may take to apply a raised InhibitDelayMaxSec after SIGHUP.
const RELOAD_WAIT: Duration = Duration::from_secs(5);
/// A pod kill handed to the sync loop waits at most this long for room in its queue.
const HAND_OVER: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct ShutdownSettings {
    pub groups: Vec<Group>,
    /// Where the logind drop-in goes (upstream's path; tests move it).
    pub drop_in: PathBuf,
}

impl ShutdownSettings {
    /// None when the configuration leaves graceful shutdown off.
    pub fn from_settings(settings: &crate::config::Settings) -> Option<ShutdownSettings> {
        let cfg = &settings.config;
        let by_priority: Vec<(i32, i64)> = cfg
            .shutdown_grace_period_by_pod_priority
            .iter()
            .map(|g| (g.priority, g.shutdown_grace_period_seconds))
            .collect();
        let groups = groups::from_config(
            cfg.shutdown_grace_period.as_duration().as_secs() as i64,
            cfg.shutdown_grace_period_critical_pods
                .as_duration()
                .as_secs() as i64,
            &by_priority,
        );
        (!groups.is_empty()).then(|| ShutdownSettings {
            groups,
            drop_in: PathBuf::from(logind::DROP_IN),
        })
    }

    fn total(&self) -> Duration {
        Duration::from_secs(groups::total_seconds(&self.groups).max(0) as u64)
    }
}

struct Manager {
    settings: ShutdownSettings,
    status: Arc<StatusStore>,
    kills: mpsc::Sender<Eviction>,
    shutting_down: watch::Sender<bool>,
}

/// Starts the shutdown manager in `tasks`. `shutting_down` turns true while a shutdown is
/// handled (the node status reads it); `kills` is the sync loop's queue of pods to fail.
pub fn spawn(
    settings: ShutdownSettings,
    status: Arc<StatusStore>,
    kills: mpsc::Sender<Eviction>,
    shutting_down: watch::Sender<bool>,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) {
    let manager = Manager {
        settings,
        status,
        kills,
        shutting_down,
    };
    let cancel = cancel.child_token();
    tasks.background("node shutdown manager", async move {
        let mut retry = RETRY_FIRST;
        loop {
            let started = Instant::now();
            match manager.session(&cancel).await {
                Ok(()) => return,
                Err(e) => warn!(err = %e, ?retry, "Node shutdown manager: no logind; retrying"),
            }
            if started.elapsed() > RETRY_MAX {
                retry = RETRY_FIRST;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(retry) => {}
            }
            retry = (retry * 2).min(RETRY_MAX);
        }
    });
}

impl Manager {
    /// One connection to logind: the lock, then shutdown events until cancelled (Ok) or the
    /// bus fails (Err).
    async fn session(&self, cancel: &CancellationToken) -> Result<(), LogindError> {
        let conn = logind::connect().await?;
        self.ensure_delay(&conn).await?;
        // Subscribed before the lock is taken, so no announcement falls in between.
        let mut signals = logind::shutdown_signals(&conn).await?;
        let mut lock = Some(logind::inhibit(&conn).await?);
        info!(
            delay = ?self.settings.total(),
            groups = ?self.settings.groups,
            "Node shutdown manager: holding a delay inhibitor lock from logind"
        );
        loop {
            let active = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                signal = signals.next() => signal.ok_or(LogindError::Closed)??,
            };
            if active {
                info!("Node shutdown manager: shutdown announced; terminating pods");
                self.shutting_down.send_replace(true);
                let started = Instant::now();
                self.terminate_pods(cancel).await;
                // Dropping the descriptor releases the lock: logind may go on.
                drop(lock.take());
                info!(elapsed = ?started.elapsed(), "Node shutdown manager: pods done; released the inhibitor lock");
            } else {
                info!("Node shutdown manager: shutdown cancelled");
                self.shutting_down.send_replace(false);
                if lock.is_none() {
                    lock = Some(logind::inhibit(&conn).await?);
                }
            }
        }
    }

    /// logind grants a delay lock at most InhibitDelayMaxSec; raise it when it is below the
    /// shutdown grace period, as upstream does.
    async fn ensure_delay(&self, conn: &zbus::Connection) -> Result<(), LogindError> {
        let want = self.settings.total();
        let have = logind::inhibit_delay_max(conn).await?;
        if have >= want {
            return Ok(());
        }
        info!(current = ?have, wanted = ?want, drop_in = %self.settings.drop_in.display(),
              "Raising logind's InhibitDelayMaxSec");
        logind::write_drop_in(&self.settings.drop_in, want)?;
        logind::reload(conn).await?;
        let deadline = Instant::now() + RELOAD_WAIT;
        loop {
            let have = logind::inhibit_delay_max(conn).await?;
            if have >= want {
                return Ok(());
            }
            if Instant::now() >= deadline {
                // Upstream goes on with what logind grants; so do we, loudly.
                warn!(current = ?have, wanted = ?want,
                      "logind did not raise InhibitDelayMaxSec; pods may get less time at shutdown");
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Terminates the running pods group by group, lowest priority first; a group's pods all
    /// at once, each with the shorter of its own grace period and the group's; the next group
    /// starts when every pod of this one has stopped or its period is over.
    async fn terminate_pods(&self, cancel: &CancellationToken) {
        let groups = &self.settings.groups;
        let pods = self.status.select(|pod, status| {
            let uid = pod.metadata.uid.as_deref().filter(|u| !u.is_empty())?;
            if has_finished(status) {
                return None;
            }
            let spec = pod.spec.as_ref();
            let priority = spec.and_then(|s| s.priority).unwrap_or(0);
            let own = spec.and_then(|s| s.termination_grace_period_seconds);
            Some(Target {
                uid: uid.to_string(),
                name: crate::pod::pod_full_name(pod),
                group: groups::index_for(groups, priority),
                own_grace: own,
            })
        });
        for (i, group) in groups.iter().enumerate() {
            let members: Vec<&Target> = pods.iter().filter(|p| p.group == i).collect();
            if members.is_empty() {
                continue;
            }
            for Target {
                uid,
                name,
                own_grace,
                ..
            } in &members
            {
                let grace = groups::pod_grace(group, *own_grace);
                info!(pod = %name, grace_seconds = grace, group_priority = group.priority,
                      "Node shutdown manager: terminating pod");
                let kill = Eviction {
                    uid: uid.clone(),
                    failure: PodFailure {
                        reason: REASON.into(),
                        message: MESSAGE.into(),
                        disruption: true,
                    },
                    grace,
                };
                if tokio::time::timeout(HAND_OVER, self.kills.send(kill))
                    .await
                    .map_or(true, |sent| sent.is_err())
                {
                    warn!(pod = %name, "Node shutdown manager: could not hand the pod to the sync loop");
                }
            }
            let period = Duration::from_secs(group.grace_seconds.max(0) as u64);
            let started = Instant::now();
            loop {
                let left = members.iter().any(|t| {
                    self.status
                        .status(&t.uid)
                        .is_some_and(|s| !has_finished(&s) || any_running(&s))
                });
                if !left || started.elapsed() >= period {
                    break;
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(POLL) => {}
                }
            }
        }
    }
}

/// A running pod the shutdown terminates, and the group it goes with.
struct Target {
    uid: String,
    name: String,
    group: usize,
    own_grace: Option<i64>,
}

fn any_running(status: &PodStatus) -> bool {
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}
