//! The eviction manager: keeps the node alive when memory, disk or process ids run short.
//!
//! Each pass observes every signal fresh (see [`observe`]), tracks which thresholds are met
//! (soft ones after their grace period, all until their minimum reclaim is satisfied), reports
//! MemoryPressure/DiskPressure/PIDPressure (held for `evictionPressureTransitionPeriod`), and
//! when a threshold must be acted on: frees node-level resources first for disk signals (dead
//! containers, unused images), then evicts the first pod in upstream's order, one per pass,
//! and waits until it is gone before looking again.
//!
//! Where upstream decides on stats up to 10 s old every 10 s, the memory signals are read every
//! second here (five small /proc and cgroup files, about 0.1 ms), and a threshold crossed starts a
//! full pass at once. The pods are ranked on a Summary collected for the decision.
//!
//! It also enforces emptyDir `sizeLimit`s on every full pass (grace 1 s), walking usage fresh.

pub mod local_storage;
mod observe;
pub mod rank;
pub mod thresholds;
mod tracker;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::cm::CgroupManager;
use crate::cri::RuntimeClient;
use crate::events::{EventRecorder, EventType};
use crate::stats::fs::FsProbe;
use crate::stats::{Scope, StatsProvider};
use crate::status::{PodFailure, StatusStore, has_finished};
use thresholds::{Condition, Observations, Threshold};

/// Upstream's eviction monitoring interval.
const MONITOR_PERIOD: Duration = Duration::from_secs(10);
/// How often the memory signals are read between full passes.
const MEMORY_PERIOD: Duration = Duration::from_secs(1);
/// A walk older than this is not trusted for a decision.
const FRESH: Duration = Duration::from_secs(5);
/// Upstream's grace for evictions that must free a resource quickly.
const IMMEDIATE_GRACE_SECONDS: i64 = 1;
/// Evictions waiting for the sync loop; a full queue is retried on the next pass.
const QUEUE: usize = 16;
/// Upstream's SystemCriticalPriority: pods at or above it are never evicted.
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// How long an evicted pod is waited for before the next pass (upstream's podCleanupTimeout).
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
const CLEANUP_POLL: Duration = Duration::from_millis(250);

/// What the eviction manager reports for the node's conditions; all false until its first
/// pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

/// A pod the sync loop must fail and stop with this grace period.
#[derive(Clone, Debug)]
pub struct Eviction {
    pub uid: String,
    pub failure: PodFailure,
    pub grace: i64,
}

/// Static, mirror and system-critical pods are never evicted, as upstream (a static pod would
/// not be admitted again); under pressure they are still admitted.
pub fn is_critical(pod: &Pod) -> bool {
    crate::sources::is_static_pod(pod)
        || crate::sources::is_mirror_pod(pod)
        || pod
            .spec
            .as_ref()
            .and_then(|s| s.priority)
            .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

/// The eviction settings of the configuration, parsed.
#[derive(Clone, Debug)]
pub struct EvictionSettings {
    thresholds: Vec<Threshold>,
    transition: Duration,
    max_pod_grace: i64,
}

impl EvictionSettings {
    /// Fails with upstream's message when a threshold cannot be parsed.
    pub fn from_settings(
        settings: &crate::config::Settings,
    ) -> Result<Self, thresholds::ThresholdError> {
        let cfg = &settings.config;
        let mut grace = std::collections::BTreeMap::new();
        for (signal, raw) in &cfg.eviction_soft_grace_period {
            let d = crate::config::duration::parse_go_duration(raw).map_err(|e| {
                thresholds::ThresholdError::Grace {
                    signal: signal.clone(),
                    reason: e.to_string(),
                }
            })?;
            grace.insert(signal.clone(), d);
        }
        let thresholds = thresholds::parse(
            &cfg.eviction_hard,
            &cfg.eviction_soft,
            &grace,
            &cfg.eviction_minimum_reclaim,
            cfg.enforce_node_allocatable.iter().any(|k| k == "pods"),
        )?;
        Ok(EvictionSettings {
            thresholds,
            transition: cfg.eviction_pressure_transition_period.as_duration(),
            max_pod_grace: i64::from(cfg.eviction_max_pod_grace_period),
        })
    }

    fn watches_memory(&self) -> bool {
        self.thresholds.iter().any(|t| t.signal.is_memory())
    }
}

/// What the manager reads and acts through.
pub struct EvictionDeps {
    pub status: Arc<StatusStore>,
    pub root_dir: PathBuf,
    pub events: EventRecorder,
    pub node_name: String,
    pub cri: RuntimeClient,
    pub cgroups: Arc<CgroupManager>,
    pub stats: Arc<StatsProvider>,
    /// Dead containers and unused images go before any pod is evicted for disk.
    pub collectors: crate::gc::Collectors,
}

struct Manager {
    settings: EvictionSettings,
    /// The configured thresholds with containerfs ones added once the filesystems are known.
    thresholds: Option<Vec<Threshold>>,
    dedicated_image_fs: bool,
    status: Arc<StatusStore>,
    root_dir: PathBuf,
    events: EventRecorder,
    node_name: String,
    stats: Arc<StatsProvider>,
    collectors: crate::gc::Collectors,
    probe: observe::Probe,
    tracker: tracker::Tracker,
    pressure: watch::Sender<Pressure>,
    fs: FsProbe,
    out: mpsc::Sender<Eviction>,
    /// Pods already handed over, until their status shows it; bounded by the status store.
    evicted: HashSet<String>,
    /// The last full pass found a memory threshold met and evicted nothing: the next one waits
    /// for the monitoring period (no pass and event every second while nothing can be done).
    memory_stuck: bool,
}

fn pressure_of(conditions: &[Condition]) -> Pressure {
    Pressure {
        memory: conditions.contains(&Condition::Memory),
        disk: conditions.contains(&Condition::Disk),
        pid: conditions.contains(&Condition::Pid),
    }
}

/// Memory first, as upstream orders the thresholds to act on.
fn first_to_reclaim(acting: &[Threshold]) -> Option<&Threshold> {
    acting
        .iter()
        .find(|t| t.signal.is_memory())
        .or_else(|| acting.first())
}

impl Manager {
    fn forget_finished(&mut self) {
        let status = &self.status;
        self.evicted
            .retain(|uid| status.status(uid).is_some_and(|s| !has_finished(&s)));
    }

    /// Whether the memory signals read now meet a memory threshold (a full pass is due).
    async fn memory_crossed(&self) -> bool {
        if self.memory_stuck {
            return false;
        }
        let observations = self.probe.memory().await;
        self.settings
            .thresholds
            .iter()
            .filter(|t| t.signal.is_memory())
            .any(|t| thresholds::met(t, &observations, false))
    }

    /// One full pass. Returns after an evicted pod is gone (or the wait timed out).
    async fn synchronize(&mut self) {
        self.memory_stuck = false;
        self.forget_finished();
        if self.emptydir_pass().await {
            return;
        }
        if self.settings.thresholds.is_empty() {
            return;
        }
        let look = self.probe.look().await;
        if self.thresholds.is_none() || look.dedicated_image_fs.is_some() {
            let dedicated = look.dedicated_image_fs.unwrap_or(false);
            if self.thresholds.is_none() || dedicated != self.dedicated_image_fs {
                self.dedicated_image_fs = dedicated;
                self.thresholds = Some(thresholds::with_containerfs(
                    self.settings.thresholds.clone(),
                    dedicated,
                ));
            }
        }
        let all = self.thresholds.clone().unwrap_or_default();
        let observations = look.observations;
        let step = self.tracker.step(
            &all,
            &observations,
            self.settings.transition,
            Instant::now(),
        );
        let pressure = pressure_of(&step.conditions);
        self.pressure.send_if_modified(|p| {
            let changed = *p != pressure;
            if changed {
                info!(
                    memory = pressure.memory,
                    disk = pressure.disk,
                    pid = pressure.pid,
                    "Eviction manager: node conditions changed"
                );
            }
            *p = pressure;
            changed
        });
        let Some(threshold) = first_to_reclaim(&step.acting).cloned() else {
            debug!("Eviction manager: no resources are starved");
            return;
        };
        let resource = threshold.signal.resource();
        info!(
            resourceName = resource,
            "Eviction manager: attempting to reclaim"
        );
        self.events.node(
            &self.node_name,
            None,
            EventType::Warning,
            "EvictionThresholdMet",
            &format!("Attempting to reclaim {resource}"),
        );
        if self.reclaim_node_level(&threshold).await {
            info!(
                resourceName = resource,
                "Eviction manager: able to reduce resource pressure without evicting pods."
            );
            return;
        }
        info!(
            resourceName = resource,
            "Eviction manager: must evict pod(s) to reclaim"
        );
        let evicted = self
            .evict_one(&threshold, &step.acting, &observations)
            .await;
        self.memory_stuck = !evicted && threshold.signal.is_memory();
    }

    /// Node-level reclaim for disk signals, as upstream's: dead containers, then unused
    /// images; true when, observed afresh, no threshold is met past its minimum reclaim.
    /// With images on a filesystem of their own, nodefs holds only logs and volumes, so there
    /// is nothing to reclaim for it.
    async fn reclaim_node_level(&mut self, threshold: &Threshold) -> bool {
        let signal = threshold.signal;
        if signal.condition() != Condition::Disk {
            return false;
        }
        let on_image_fs = matches!(
            signal,
            thresholds::Signal::ImageFsAvailable
                | thresholds::Signal::ImageFsInodesFree
                | thresholds::Signal::ContainerFsAvailable
                | thresholds::Signal::ContainerFsInodesFree
        );
        if self.dedicated_image_fs && !on_image_fs {
            return false;
        }
        let resource = signal.resource();
        if let Err(err) = self.collectors.containers.delete_all_unused().await {
            info!(resourceName = resource, %err, "Eviction manager: unexpected error when attempting to reduce resource pressure");
        }
        match self.collectors.images.delete_unused().await {
            Ok(freed) => info!(bytes = freed, "Eviction manager: unused images removed"),
            Err(err) => {
                info!(resourceName = resource, %err, "Eviction manager: unexpected error when attempting to reduce resource pressure");
            }
        }
        let look = self.probe.look().await;
        let all = self.thresholds.clone().unwrap_or_default();
        !all.iter()
            .any(|t| thresholds::met(t, &look.observations, true))
    }

    async fn evict_one(
        &mut self,
        threshold: &Threshold,
        acting: &[Threshold],
        observations: &Observations,
    ) -> bool {
        let evicted = &self.evicted;
        let pods = self.status.select(|pod, status| {
            let uid = pod.metadata.uid.as_deref().filter(|u| !u.is_empty())?;
            (!has_finished(status) && !evicted.contains(uid)).then(|| pod.clone())
        });
        if pods.is_empty() {
            error!(
                "Eviction manager: eviction thresholds have been met, but no pods are active to evict"
            );
            return false;
        }
        let scope = if threshold.signal.condition() == Condition::Disk {
            Scope::Full
        } else {
            Scope::CpuAndMemory
        };
        let mut summary = match self.stats.summary(scope).await {
            Ok(s) => s.pods,
            Err(err) => {
                warn!(%err, "Eviction manager: pod stats failed; ranking without them");
                Vec::new()
            }
        };
        let mut candidates: Vec<rank::Candidate> = pods
            .into_iter()
            .map(|pod| {
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                let stats = summary
                    .iter()
                    .position(|s| s.pod_ref.uid == uid)
                    .map(|i| summary.swap_remove(i));
                rank::Candidate { pod, stats }
            })
            .collect();
        rank::rank(&mut candidates, threshold.signal, self.dedicated_image_fs);
        let order: Vec<String> = candidates
            .iter()
            .map(|c| crate::pod::pod_full_name(&c.pod))
            .collect();
        info!(pods = ?order, "Eviction manager: pods ranked for eviction");
        for c in &candidates {
            let grace = if threshold.is_hard() {
                IMMEDIATE_GRACE_SECONDS
            } else {
                self.settings.max_pod_grace
            };
            let failure = PodFailure {
                reason: rank::REASON.into(),
                message: rank::message(c, threshold.signal, acting, observations),
                disruption: true,
            };
            let uid = c.pod.metadata.uid.clone().unwrap_or_default();
            if self.evict(&c.pod, &uid, failure, grace, threshold.signal.name()) {
                self.wait_for_cleanup(&uid).await;
                return true;
            }
        }
        info!("Eviction manager: unable to evict any pods from the node");
        false
    }

    /// Waits until the evicted pod is failed and none of its containers runs, so the next
    /// observation sees what its eviction freed.
    async fn wait_for_cleanup(&self, uid: &str) {
        let deadline = Instant::now() + CLEANUP_TIMEOUT;
        while Instant::now() < deadline {
            let done = self.status.status(uid).is_none_or(|s| {
                has_finished(&s)
                    && s.container_statuses
                        .iter()
                        .flatten()
                        .all(|c| c.state.as_ref().is_none_or(|st| st.running.is_none()))
            });
            if done {
                info!(
                    podUID = uid,
                    "Eviction manager: pods successfully cleaned up"
                );
                return;
            }
            tokio::time::sleep(CLEANUP_POLL).await;
        }
        info!(
            podUID = uid,
            "Eviction manager: timed out waiting for pods to be cleaned up"
        );
    }

    /// emptyDir `sizeLimit`s; true when a pod was evicted.
    async fn emptydir_pass(&mut self) -> bool {
        // Only the running pods that have a limited emptyDir (and were not handed over yet).
        let evicted = &self.evicted;
        let candidates = self.status.select(|pod, status| {
            let uid = pod.metadata.uid.as_deref().filter(|u| !u.is_empty())?;
            if has_finished(status) || evicted.contains(uid) {
                return None;
            }
            let dirs = local_storage::limited_dirs(pod);
            (!dirs.is_empty()).then(|| (pod.clone(), dirs))
        });
        let mut any = false;
        for (pod, dirs) in candidates {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            let pod_dir = crate::volume::pod_dir(&self.root_dir, uid);
            let mut used = Vec::with_capacity(dirs.len());
            for d in &dirs {
                let path = crate::volume::empty_dir::path(&pod_dir, &d.volume);
                // A volume not set up yet, or a walk that failed, holds nothing we can count.
                let usage = self.fs.disk_usage_within(&path, FRESH).await;
                used.push(usage.ok().map(|u| u.bytes));
            }
            let Some(failure) = local_storage::empty_dir_verdict(&dirs, &used) else {
                continue;
            };
            any |= self.evict(
                &pod,
                uid,
                failure,
                IMMEDIATE_GRACE_SECONDS,
                local_storage::EMPTY_DIR_SIGNAL,
            );
        }
        any
    }

    /// Hands the pod to the sync loop; false for a critical pod or a full queue.
    fn evict(
        &mut self,
        pod: &Pod,
        uid: &str,
        failure: PodFailure,
        grace: i64,
        signal: &str,
    ) -> bool {
        let name = crate::pod::pod_full_name(pod);
        if is_critical(pod) {
            error!(pod = %name, evictionMessage = %failure.message, "Eviction manager: cannot evict a critical pod");
            return false;
        }
        let message = failure.message.clone();
        let eviction = Eviction {
            uid: uid.to_string(),
            failure,
            grace,
        };
        if self.out.try_send(eviction).is_err() {
            return false;
        }
        info!(pod = %name, podUID = uid, evictionMessage = %message, "Evicting pod");
        self.events
            .pod(pod, EventType::Warning, rank::REASON, &message);
        crate::metrics::kubelet().evictions.inc(&[signal]);
        self.evicted.insert(uid.to_string());
        true
    }
}

/// The queue of pods the sync loop must fail (the eviction and node shutdown managers fill
/// it).
pub fn queue() -> (mpsc::Sender<Eviction>, mpsc::Receiver<Eviction>) {
    mpsc::channel(QUEUE)
}

/// Starts the manager in `tasks`; its evictions go to `tx`. The returned receiver follows the
/// node's pressure conditions (for the node status and admission).
pub fn spawn(
    settings: EvictionSettings,
    deps: EvictionDeps,
    tx: mpsc::Sender<Eviction>,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> watch::Receiver<Pressure> {
    let (pressure, pressure_rx) = watch::channel(Pressure::default());
    let watch_memory = settings.watches_memory();
    let mut manager = Manager {
        settings,
        thresholds: None,
        dedicated_image_fs: false,
        status: deps.status,
        root_dir: deps.root_dir.clone(),
        events: deps.events,
        node_name: deps.node_name,
        stats: deps.stats,
        collectors: deps.collectors,
        probe: observe::Probe::new(deps.cgroups, deps.root_dir, deps.cri),
        tracker: tracker::Tracker::default(),
        pressure,
        fs: FsProbe::default(),
        out: tx,
        evicted: HashSet::new(),
        memory_stuck: false,
    };
    let cancel = cancel.child_token();
    tasks.critical("eviction manager", async move {
        let mut full = tokio::time::interval(MONITOR_PERIOD);
        full.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut memory = tokio::time::interval(MEMORY_PERIOD);
        memory.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = full.tick() => {}
                _ = memory.tick(), if watch_memory => {
                    if !manager.memory_crossed().await {
                        continue;
                    }
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = manager.synchronize() => {}
            }
            full.reset();
        }
    });
    pressure_rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use std::collections::BTreeMap;

    #[test]
    fn critical_pods_are_static_mirror_or_system_priority() {
        let mut pod = Pod {
            spec: Some(PodSpec::default()),
            ..Default::default()
        };
        assert!(!is_critical(&pod));
        pod.spec.as_mut().unwrap().priority = Some(SYSTEM_CRITICAL_PRIORITY);
        assert!(is_critical(&pod));
        pod.spec.as_mut().unwrap().priority = Some(1000);
        assert!(!is_critical(&pod));
        pod.metadata.annotations = Some(BTreeMap::from([(
            "kubernetes.io/config.source".to_string(),
            "file".to_string(),
        )]));
        assert!(is_critical(&pod));
    }
}
