//! The sync loop: the one place where pod updates, PLEG events and housekeeping meet. It only
//! routes work to pod workers; all runtime calls happen in the workers.

pub mod admission;
pub mod allocation;
mod allocation_checkpoint;
mod deadline;
mod metrics;
pub mod security;
mod spans;
mod spawn;
pub mod sysctls;
pub mod worker;

pub use spawn::{ApiNode, SecuritySettings, SyncDeps, spawn};

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::pleg::{RuntimePod, RuntimePods};
use crate::pod::pod_full_name;
use crate::sources::PodUpdate;
use worker::{Desired, WorkerContext, WorkerHandle};

const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// Grace for pods found in the runtime that no source knows (upstream kills them promptly too).
const ORPHAN_GRACE_SECONDS: i64 = 2;

/// When the sync loop last went round, for the syncloop health check.
#[derive(Debug, Default)]
pub struct SyncLoopHealth {
    last_iteration_unix_ms: AtomicI64,
}

impl SyncLoopHealth {
    fn mark(&self) {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        self.last_iteration_unix_ms.store(ms, Ordering::Relaxed);
    }

    pub fn since_last_iteration(&self) -> Option<Duration> {
        let ms = self.last_iteration_unix_ms.load(Ordering::Relaxed);
        (ms > 0).then(|| {
            let then = UNIX_EPOCH + Duration::from_millis(ms as u64);
            SystemTime::now().duration_since(then).unwrap_or_default()
        })
    }
}

/// What admission checks pods against.
pub struct Admission {
    pub allocatable: admission::Allocatable,
    /// The node's labels as the API server has them now (node::labels keeps them current).
    pub node_labels: watch::Receiver<std::collections::BTreeMap<String, String>>,
    /// True once `node_labels` comes from the API server (its first list), not only from the
    /// flags: a restarted kubelet must not judge its running pods by labels it has not read.
    pub labels_synced: watch::Receiver<bool>,
    /// True while the node shutdown manager handles a shutdown.
    pub shutting_down: watch::Receiver<bool>,
    /// The node conditions the eviction manager reports.
    pub pressure: watch::Receiver<crate::eviction::Pressure>,
    /// A second look at the labels before a pod is rejected for them (the watch may lag).
    pub fresh_labels: Option<crate::node::labels::FreshLabels>,
}

pub struct SyncLoopInputs {
    pub pod_updates: mpsc::Receiver<PodUpdate>,
    pub pleg_events: mpsc::Receiver<String>,
    /// Pods whose probe verdicts changed.
    pub probe_changes: mpsc::Receiver<String>,
    pub runtime_pods: watch::Receiver<RuntimePods>,
    pub sources_ready: watch::Receiver<bool>,
    /// Pods the eviction manager fails.
    pub evictions: mpsc::Receiver<crate::eviction::Eviction>,
}

/// The sync loop's part of the kubelet configuration.
#[derive(Clone, Copy, Debug)]
pub struct SyncSettings {
    /// `syncFrequency`: how often every pod is synced even without events.
    pub resync: Duration,
    /// `maxPods`, which bounds the worker map.
    pub max_pods: usize,
    /// healthz fails once the loop has not gone round for this long (upstream: twice the
    /// sync frequency, at least 5 minutes).
    pub loop_deadline: Duration,
}

impl From<&crate::config::Settings> for SyncSettings {
    fn from(settings: &crate::config::Settings) -> Self {
        let cfg = &settings.config;
        SyncSettings {
            resync: cfg.sync_frequency.0,
            max_pods: cfg.max_pods.max(1) as usize,
            loop_deadline: (cfg.sync_frequency.0 * 2).max(Duration::from_secs(300)),
        }
    }
}

/// Waits for `rx` to change; never, without one.
async fn changed<T>(rx: Option<watch::Receiver<T>>) -> Result<(), watch::error::RecvError> {
    match rx {
        Some(mut rx) => rx.changed().await,
        None => std::future::pending().await,
    }
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// A pod the API server already records as Succeeded or Failed is never started again (after
/// a kubelet restart, say).
fn finished(pod: &Pod) -> bool {
    !crate::sources::is_static_pod(pod)
        && pod.status.as_ref().is_some_and(crate::status::has_finished)
}

/// The grace period to stop with: the deletion's, when the API server asked for one.
fn grace_of(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or(pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30)
        .max(0)
}

pub struct SyncLoop {
    workers: HashMap<String, WorkerHandle>,
    /// Pods waiting for an older pod of the same full name (or UID) to finish terminating: an
    /// edited static pod manifest gets a new UID, and the new pod must not run beside the old
    /// one (they would fight over host ports and data). Keyed by full name.
    parked: HashMap<String, Arc<Pod>>,
    /// What the runtime ran at the last relist, once `run` has started.
    runtime_pods: Option<watch::Receiver<RuntimePods>>,
    /// Whether the PLEG has listed the runtime yet (it publishes its first relist always).
    runtime_listed: bool,
    /// New API pods waiting for the node's labels before their admission, by UID (their latest
    /// version). Bounded by the source's pods.
    unadmitted: HashMap<String, Arc<Pod>>,
    /// Of `unadmitted`, the pods the watched labels rejected, by UID, with the number of the
    /// fresh read of the node they wait for.
    relabel: HashMap<String, u64>,
    /// The number of the last fresh read asked for.
    asked_reads: u64,
    /// While pods are judged again after a fresh read: the labels it found.
    recheck_labels: Option<std::collections::BTreeMap<String, String>>,
    /// API pods are admitted against this; static pods are not (like upstream's critical pods).
    admission: Option<Admission>,
    /// What each running pod was admitted with, for in-place resize.
    allocations: allocation::Allocations,
    /// Resizes that did not fit (Deferred), or that a restart found undecided: the desired
    /// pod, tried again when a pod goes and at every housekeeping. Bounded by the workers.
    deferred_resizes: HashMap<String, Arc<Pod>>,
    /// What the node offers pods, for a resize's fit when there is no admission (standalone).
    node_allocatable: Option<admission::Allocatable>,
    /// Checked for every pod, static ones too, as upstream does.
    security: Option<(security::SecurityAdmission, crate::events::EventRecorder)>,
    /// Device plugins' devices: admission counts them, a pod that is gone gives them back.
    devices: Option<Arc<crate::cm::devicemanager::DeviceManager>>,
    /// The CPU manager: exclusive CPUs are taken at admission and given back when the pod is
    /// gone.
    cpus: Option<Arc<crate::cm::cpumanager::CpuManager>>,
    /// The memory manager: NUMA-bound memory is booked at admission and given back when the
    /// pod is gone.
    memory: Option<Arc<crate::cm::memorymanager::MemoryManager>>,
    topology: Option<Arc<crate::cm::topologymanager::TopologyManager>>,
    /// UIDs failed at admission, so later updates of the same object are not re-admitted.
    /// Bounded by the source's pods: entries go when the pod is removed.
    rejected: HashSet<String>,
    ctx: Arc<WorkerContext>,
    done_rx: mpsc::Receiver<String>,
    health: Arc<SyncLoopHealth>,
    /// The pods with workers, as the garbage collectors see them.
    known: Arc<crate::gc::KnownPods>,
    cancel: CancellationToken,
}

/// The managers the pod workers drive.
pub struct Managers {
    pub runtime: Arc<crate::runtime::RuntimeManager>,
    pub volumes: Arc<crate::volume::VolumeManager>,
    pub probes: Arc<crate::prober::ProbeManager>,
    pub status: Arc<crate::status::StatusStore>,
    pub inputs: Arc<crate::podinputs::PodInputSource>,
}

impl SyncLoop {
    /// `max_pods` bounds the worker map (plus orphans being cleaned up).
    pub fn new(
        managers: Managers,
        resync: Duration,
        runtime_name: String,
        max_pods: usize,
        health: Arc<SyncLoopHealth>,
        cancel: CancellationToken,
    ) -> Self {
        let (done_tx, done_rx) = mpsc::channel(max_pods.max(16));
        let Managers {
            runtime,
            volumes,
            probes,
            status,
            inputs,
        } = managers;
        SyncLoop {
            workers: HashMap::new(),
            parked: HashMap::new(),
            runtime_pods: None,
            runtime_listed: false,
            unadmitted: HashMap::new(),
            relabel: HashMap::new(),
            asked_reads: 0,
            recheck_labels: None,
            admission: None,
            allocations: Default::default(),
            deferred_resizes: HashMap::new(),
            node_allocatable: None,
            security: None,
            devices: None,
            cpus: None,
            memory: None,
            topology: None,
            rejected: HashSet::new(),
            ctx: Arc::new(WorkerContext {
                runtime,
                volumes,
                inputs,
                probes,
                status,
                resync,
                runtime_name,
                done: done_tx,
            }),
            done_rx,
            health,
            known: Arc::default(),
            cancel,
        }
    }

    /// Shares which pods have workers with the garbage collectors.
    pub fn with_known_pods(mut self, known: Arc<crate::gc::KnownPods>) -> Self {
        self.known = known;
        self
    }

    pub fn with_devices(mut self, devices: Arc<crate::cm::devicemanager::DeviceManager>) -> Self {
        self.devices = Some(devices);
        self
    }

    pub fn with_cpus(mut self, cpus: Arc<crate::cm::cpumanager::CpuManager>) -> Self {
        self.cpus = Some(cpus);
        self
    }

    pub fn with_memory(mut self, memory: Arc<crate::cm::memorymanager::MemoryManager>) -> Self {
        self.memory = Some(memory);
        self
    }

    pub fn with_topology(
        mut self,
        topology: Arc<crate::cm::topologymanager::TopologyManager>,
    ) -> Self {
        self.topology = Some(topology);
        self
    }

    /// Allocations kept in `root_dir` across restarts.
    pub fn with_allocation_checkpoint(mut self, root_dir: &std::path::Path) -> Self {
        self.allocations =
            allocation::Allocations::with_checkpoint(allocation_checkpoint::path_in(root_dir));
        self
    }

    fn spawn(&mut self, uid: String, desired: Desired) {
        // Known before the worker can create anything, so no collector takes it for gone.
        self.known.insert(&uid);
        let desired = match desired {
            Desired::Run(pod) => {
                self.allocations.admit(&uid, &pod);
                // Allocated otherwise before a restart: the resize is decided again once every
                // pod is back, by the next housekeeping (whichever way the pod got here: added,
                // or parked first until the runtime was listed).
                if self.allocations.wants_resize(&uid, &pod) {
                    self.deferred_resizes.insert(uid.clone(), pod.clone());
                }
                Desired::Run(self.allocations.allocated_pod(&uid, pod))
            }
            other => other,
        };
        let handle = WorkerHandle::spawn(
            uid.clone(),
            desired,
            self.ctx.clone(),
            self.cancel.child_token(),
        );
        self.workers.insert(uid, handle);
    }

    /// What the runtime still runs of pods of this full name but another UID that no worker
    /// has: a pod replaced while the kubelet was down, until it is stopped.
    fn runtime_predecessors(&self, full_name: &str, uid: &str) -> Vec<(String, RuntimePod)> {
        let Some(runtime) = &self.runtime_pods else {
            return Vec::new();
        };
        runtime
            .borrow()
            .iter()
            .filter(|(other, rp)| {
                other.as_str() != uid
                    && rp.is_active()
                    && rp.has_full_name(full_name)
                    && !self.workers.contains_key(other.as_str())
            })
            .map(|(other, rp)| (other.clone(), rp.clone()))
            .collect()
    }

    /// Whether an earlier pod of this full name (another UID) still runs or is being torn
    /// down: a worker terminating it, or a runtime predecessor (`runtime_predecessors`).
    /// Before the first relist nobody knows yet, so a new pod waits for it.
    fn previous_named(&self, full_name: &str, uid: &str) -> bool {
        let terminating = self
            .workers
            .values()
            .any(|w| w.is_terminating() && w.full_name() == full_name);
        if terminating {
            return true;
        }
        if self.runtime_pods.is_none() {
            return false;
        }
        !self.runtime_listed || !self.runtime_predecessors(full_name, uid).is_empty()
    }

    /// Starts the parked pods whose predecessors are gone, and stops what the runtime still
    /// runs of the others' (no source wants a pod whose full name another UID now has, so
    /// this need not wait for every source, as the orphan cleanup does: a static apiserver
    /// replaced while the kubelet was down must not wait for the API source).
    fn unpark_ready(&mut self) {
        let parked: Vec<(String, String)> = self
            .parked
            .iter()
            .map(|(name, pod)| (name.clone(), uid_of(pod)))
            .collect();
        for (full_name, uid) in parked {
            if self.previous_named(&full_name, &uid) {
                self.stop_predecessors(&full_name, &uid);
                continue;
            }
            if let Some(pod) = self.parked.remove(&full_name) {
                info!(pod = %full_name, %uid, "Previous pod terminated, starting");
                crate::startup::tracker().mark(&uid, crate::startup::Phase::Admitted);
                self.spawn(uid, Desired::Run(pod));
            }
        }
    }

    /// A pod found finished with no worker (it ended while the kubelet was down, or before a
    /// restart and its volumes were not given back yet) gives back what its volumes hold, as a
    /// worker does when its pod finishes; unless the runtime still runs something of it (the
    /// orphan cleanup stops that first), or has not been listed yet (then they stay until the
    /// pod is deleted, as before).
    fn release_finished(&self, uid: &str) {
        let active = self
            .runtime_pods
            .as_ref()
            .is_none_or(|r| r.borrow().get(uid).is_some_and(RuntimePod::is_active));
        if active || !self.runtime_listed {
            return;
        }
        let (volumes, uid) = (self.ctx.volumes.clone(), uid.to_string());
        tokio::spawn(async move {
            match tokio::time::timeout(worker::RELEASE_WAIT, volumes.release(&uid)).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    warn!(pod_uid = %uid, %err, "Could not release the finished pod's volumes")
                }
                Err(_) => {
                    warn!(pod_uid = %uid, "Releasing the finished pod's volumes is taking long")
                }
            }
        });
    }

    /// Terminates the runtime predecessors of a pod (`runtime_predecessors`).
    fn stop_predecessors(&mut self, full_name: &str, uid: &str) {
        for (other, rp) in self.runtime_predecessors(full_name, uid) {
            info!(pod = %full_name, uid = %other, replaced_by = %uid, "Stopping the pod a new one of the same name replaces");
            self.terminate_runtime_pod(&other, &rp);
        }
    }

    fn handle_update(&mut self, update: PodUpdate) {
        match update {
            PodUpdate::Add(pods) | PodUpdate::Update(pods) => {
                for pod in pods {
                    let uid = uid_of(&pod);
                    let full_name = pod_full_name(&pod);
                    if let Some(waiting) = self.unadmitted.get_mut(&uid) {
                        if pod.metadata.deletion_timestamp.is_none() {
                            *waiting = pod;
                            continue;
                        }
                        self.forget_unadmitted(&uid);
                    }
                    if pod.metadata.deletion_timestamp.is_some() {
                        self.terminate(pod);
                        continue;
                    }
                    if self.rejected.contains(&uid) {
                        continue;
                    }
                    let new = !self.workers.contains_key(&uid);
                    if new && !finished(&pod) {
                        crate::startup::tracker().seen(&pod);
                    }
                    if new && !finished(&pod) && self.awaits_node_labels(&pod) {
                        debug!(pod = %full_name, %uid, "Admission waits for the node's labels from the API server");
                        self.unadmitted.insert(uid, pod);
                        continue;
                    }
                    if new && (finished(&pod) || !self.admitted(&pod)) {
                        if self.relabel.contains_key(&uid) {
                            continue;
                        }
                        crate::startup::tracker().forget(&uid);
                        // No worker, but the pod exists: its dead containers and logs stay
                        // (`kubectl logs` of a completed pod) until its source removes it.
                        if self.known.insert(&uid) && finished(&pod) {
                            self.release_finished(&uid);
                        }
                        continue;
                    }
                    if self.workers.get(&uid).is_some_and(|w| !w.is_terminating()) {
                        let run = self.resize(&uid, pod);
                        if let Some(w) = self.workers.get_mut(&uid) {
                            w.update(Desired::Run(run));
                        }
                    } else if self.previous_named(&full_name, &uid) {
                        if self.runtime_listed {
                            info!(pod = %full_name, %uid, "Waiting for the previous pod of this name to terminate");
                        } else {
                            debug!(pod = %full_name, %uid, "Waiting for the runtime's first listing");
                        }
                        self.stop_predecessors(&full_name, &uid);
                        // Held, so known: a collector sweeping before the first listing would
                        // otherwise take a running pod's folder and cgroup for an orphan's.
                        self.known.insert(&uid);
                        if let Some(old) = self.parked.insert(full_name, pod)
                            && uid_of(&old) != uid
                        {
                            self.known.forget(&uid_of(&old));
                        }
                    } else {
                        info!(pod = %full_name, %uid, "Pod added");
                        crate::startup::tracker().mark(&uid, crate::startup::Phase::Admitted);
                        self.spawn(uid, Desired::Run(pod));
                    }
                }
            }
            PodUpdate::Remove(pods) => {
                for pod in pods {
                    self.forget_unadmitted(&uid_of(&pod));
                    self.terminate(pod);
                }
            }
        }
    }

    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = Some(admission);
        self
    }

    /// What the node offers pods, for resizes when API pods are not admitted (standalone).
    pub fn with_node_allocatable(mut self, node: admission::Allocatable) -> Self {
        self.node_allocatable = Some(node);
        self
    }

    /// A running pod's spec changed: if it asks for other resources, they are allocated when
    /// they fit (the worker then applies them in place), or the resize is shown as pending.
    /// Returns the pod the worker is to run.
    fn resize(&mut self, uid: &str, desired: Arc<Pod>) -> Arc<Pod> {
        let Some(w) = self.workers.get(uid) else {
            return desired;
        };
        if !self.allocations.wants_resize(uid, &desired) {
            self.deferred_resizes.remove(uid);
            w.set_resize_pending(None);
            return self.allocations.allocated_pod(uid, desired);
        }
        // From here the spec no longer says what the pod was allocated, so a restart could not
        // derive it again: an admission not yet written must reach the file before the resize
        // is decided (a kill right after a Deferred resize granted it, before this).
        self.allocations.flush();
        let allocated = self.allocations.allocated_pod(uid, desired.clone());
        let others: Vec<Arc<Pod>> = self
            .workers
            .iter()
            .filter(|(other, w)| other.as_str() != uid && !w.is_terminating())
            .map(|(_, w)| w.pod())
            .collect();
        let (node, labels) = match &self.admission {
            Some(adm) => (Some(&adm.allocatable), adm.node_labels.borrow().clone()),
            None => (self.node_allocatable.as_ref(), Default::default()),
        };
        let room = node.map(|node| allocation::Room {
            node,
            node_labels: &labels,
            others: others.iter().map(|p| p.as_ref()),
        });
        let full_name = pod_full_name(&desired);
        match allocation::check(&allocated, &desired, room) {
            Ok(()) => {
                info!(pod = %full_name, %uid, "Pod resize allocated");
                self.allocations.accept(uid, &desired);
                self.deferred_resizes.remove(uid);
                w.set_resize_pending(None);
                desired
            }
            Err(pending) => {
                if w.set_resize_pending(Some(pending.clone())) {
                    info!(pod = %full_name, %uid, reason = pending.reason, message = %pending.message, "Pod resize pending");
                    let event = if pending.reason == allocation::DEFERRED {
                        "ResizeDeferred"
                    } else {
                        "ResizeInfeasible"
                    };
                    self.ctx.runtime.events().pod(
                        &desired,
                        crate::events::EventType::Warning,
                        event,
                        &pending.message,
                    );
                }
                if pending.reason == allocation::DEFERRED {
                    self.deferred_resizes.insert(uid.to_string(), desired);
                } else {
                    self.deferred_resizes.remove(uid);
                }
                allocated
            }
        }
    }

    /// Deferred resizes get another chance once a pod has gone.
    fn retry_deferred_resizes(&mut self) {
        let waiting: Vec<(String, Arc<Pod>)> = self.deferred_resizes.drain().collect();
        for (uid, desired) in waiting {
            let run = self.resize(&uid, desired);
            // Still deferred: the worker goes on with what it runs.
            if self.deferred_resizes.contains_key(&uid) {
                continue;
            }
            if let Some(w) = self.workers.get_mut(&uid).filter(|w| !w.is_terminating()) {
                w.update(Desired::Run(run));
            }
        }
    }

    /// Security checks for every pod, with the recorder for the rejection events.
    pub fn with_security(
        mut self,
        security: security::SecurityAdmission,
        events: crate::events::EventRecorder,
    ) -> Self {
        self.security = Some((security, events));
        self
    }

    /// Admission of a new pod; a rejected pod gets a Failed status, a warning event with the
    /// reason (as upstream's), and no worker.
    fn admitted(&mut self, pod: &Arc<Pod>) -> bool {
        let verdict = admission::admit_os(pod)
            .and_then(|()| match &self.security {
                Some((security, _)) => security.admit(pod),
                None => Ok(()),
            })
            .and_then(|()| self.admit_to_node(pod))
            .and_then(|()| self.admit_devices(pod))
            .and_then(|()| self.admit_resources(pod));
        let Err(rejection) = verdict else {
            return true;
        };
        if rejection.reason == admission::NODE_AFFINITY && self.ask_fresh_labels(pod) {
            return false;
        }
        self.reject(pod, rejection);
        false
    }

    /// Parks an API pod the watched labels reject until a fresh read of the node is in: the
    /// user may have labelled the node just before creating the pod, and the node's watch may
    /// not have shown it yet. False when this already is the second look, or there is none.
    fn ask_fresh_labels(&mut self, pod: &Arc<Pod>) -> bool {
        if self.recheck_labels.is_some() {
            return false;
        }
        let Some(fresh) = self
            .admission
            .as_ref()
            .and_then(|a| a.fresh_labels.as_ref())
        else {
            return false;
        };
        self.asked_reads += 1;
        fresh.ask.send_replace(self.asked_reads);
        let uid = uid_of(pod);
        debug!(pod = %pod_full_name(pod), %uid, "The node's watched labels reject the pod: reading the node again");
        self.unadmitted.insert(uid.clone(), pod.clone());
        self.relabel.insert(uid, self.asked_reads);
        true
    }

    /// Judges again, against what a fresh read of the node found (or the watched labels if
    /// it failed), the pods that waited for that read.
    fn recheck_relabelled(&mut self) {
        let Some(adm) = self.admission.as_mut() else {
            return;
        };
        let Some(fresh) = adm.fresh_labels.as_mut() else {
            return;
        };
        let (served, labels) = fresh.read.borrow_and_update().clone();
        let labels = labels.unwrap_or_else(|| adm.node_labels.borrow().clone());
        let due: Vec<String> = self
            .relabel
            .iter()
            .filter(|(_, asked)| **asked <= served)
            .map(|(uid, _)| uid.clone())
            .collect();
        let pods: Vec<Arc<Pod>> = due
            .iter()
            .filter_map(|uid| {
                self.relabel.remove(uid);
                self.unadmitted.remove(uid)
            })
            .collect();
        if pods.is_empty() {
            return;
        }
        self.recheck_labels = Some(labels);
        self.handle_update(PodUpdate::Add(pods));
        self.recheck_labels = None;
    }

    fn forget_unadmitted(&mut self, uid: &str) {
        self.unadmitted.remove(uid);
        self.relabel.remove(uid);
    }

    /// A pod failed at admission: a Failed status, a warning event and no worker.
    fn reject(&mut self, pod: &Arc<Pod>, rejection: admission::Rejection) {
        if let Some((_, events)) = &self.security {
            events.pod(
                pod,
                crate::events::EventType::Warning,
                &rejection.reason,
                &rejection.message,
            );
        }
        let uid = uid_of(pod);
        warn!(pod = %pod_full_name(pod), reason = %rejection.reason, message = %rejection.message, "Pod rejected");
        let status = k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Failed".into()),
            reason: Some(rejection.reason),
            message: Some(format!("Pod was rejected: {}", rejection.message)),
            ..Default::default()
        };
        self.ctx.status.set(&uid, pod.clone(), status);
        self.rejected.insert(uid);
    }

    /// Whether `pod` must wait for the node's labels before its admission: an API pod, while the
    /// labels are still only the flags' (right after a start).
    fn awaits_node_labels(&self, pod: &Pod) -> bool {
        self.admission
            .as_ref()
            .is_some_and(|adm| !*adm.labels_synced.borrow())
            && !crate::sources::is_static_pod(pod)
    }

    /// Admits the pods that waited for the node's labels, once the labels are read.
    fn admit_unadmitted(&mut self) {
        // Marked seen, or the loop would wake for the same change again and again.
        let synced = self
            .admission
            .as_mut()
            .is_none_or(|a| *a.labels_synced.borrow_and_update());
        if !synced || self.unadmitted.is_empty() {
            return;
        }
        let pods: Vec<Arc<Pod>> = self.unadmitted.drain().map(|(_, p)| p).collect();
        self.relabel.clear();
        info!(
            pods = pods.len(),
            "The node's labels are read: admitting the pods that waited for them"
        );
        self.handle_update(PodUpdate::Add(pods));
    }

    /// Whether an API pod fits the node; static pods are not checked (like upstream's
    /// critical pods).
    fn admit_to_node(&self, pod: &Arc<Pod>) -> Result<(), admission::Rejection> {
        let Some(adm) = &self.admission else {
            return Ok(());
        };
        if crate::sources::is_static_pod(pod) {
            return Ok(());
        }
        let running: Vec<Arc<Pod>> = self
            .workers
            .values()
            .filter(|w| !w.is_terminating())
            .map(|w| w.pod())
            .collect();
        let node_labels = match &self.recheck_labels {
            Some(labels) => labels.clone(),
            None => adm.node_labels.borrow().clone(),
        };
        let pod = self.allocations.as_admitted(&uid_of(pod), pod.clone());
        admission::admit(
            &pod,
            running.iter().map(|p| p.as_ref()),
            &adm.allocatable,
            &node_labels,
        )
        .and_then(|()| admission::admit_during_shutdown(*adm.shutting_down.borrow()))
        .and_then(|()| admission::admit_under_pressure(&pod, &adm.pressure.borrow()))
    }

    /// The device manager's admission (upstream's resource allocation handler, which runs
    /// for static pods too): a pod asking for more plugin devices than are free is failed.
    fn admit_devices(&self, pod: &Arc<Pod>) -> Result<(), admission::Rejection> {
        let Some(devices) = &self.devices else {
            return Ok(());
        };
        devices.admit(pod).map_err(|e| admission::Rejection {
            reason: "UnexpectedAdmissionError".into(),
            message: format!("Allocate failed due to {e}, which is unexpected"),
        })
    }

    /// The topology manager's admission, last because it takes CPUs and memory (and devices,
    /// when it aligns them) and gives them back itself when the pod does not fit whole:
    /// exclusive CPUs and NUMA-bound memory for Guaranteed containers, on the NUMA nodes the
    /// policy chose.
    fn admit_resources(&self, pod: &Arc<Pod>) -> Result<(), admission::Rejection> {
        let rejection = |reason: &str, message: String| admission::Rejection {
            reason: reason.into(),
            message,
        };
        match &self.topology {
            Some(topology) => topology
                .admit(
                    pod,
                    self.cpus.as_deref(),
                    self.memory.as_deref(),
                    self.devices.as_deref(),
                )
                .map_err(|e| rejection(e.reason(), e.message())),
            None => {
                if let Some(cpus) = &self.cpus {
                    cpus.admit(pod)
                        .map_err(|e| rejection(e.reason(), e.message()))?;
                }
                if let Some(memory) = &self.memory
                    && let Err(e) = memory.admit(pod)
                {
                    if let Some(cpus) = &self.cpus {
                        cpus.forget(uid_of(pod).as_str());
                    }
                    return Err(rejection(
                        "UnexpectedAdmissionError",
                        format!("Allocate failed due to {e}, which is unexpected"),
                    ));
                }
                Ok(())
            }
        }
    }

    /// A pod removed from its source, or whose deletion the API server asked for.
    fn terminate(&mut self, pod: Arc<Pod>) {
        let uid = uid_of(&pod);
        if self.rejected.remove(&uid) {
            // Never started: nothing to stop, only the object to let go.
            self.ctx.status.finish(&uid, &pod);
            self.known.forget(&uid);
            return;
        }
        let grace = grace_of(&pod);
        let full_name = pod_full_name(&pod);
        if self
            .parked
            .get(&full_name)
            .is_some_and(|p| uid_of(p) == uid)
        {
            self.parked.remove(&full_name);
            self.known.forget(&uid);
            return;
        }
        match self.workers.get_mut(&uid) {
            Some(w) if w.is_terminating() => {}
            Some(w) => {
                info!(pod = %full_name, %uid, grace, "Terminating pod");
                w.update(Desired::Terminate { pod, grace });
            }
            None => {
                info!(pod = %full_name, %uid, grace, "Terminating pod");
                self.spawn(uid, Desired::Terminate { pod, grace });
            }
        }
    }

    fn worker_done(&mut self, uid: &str) {
        if !self.workers.get(uid).is_some_and(|w| w.is_terminating()) {
            return;
        }
        self.workers.remove(uid);
        debug!(%uid, "Pod worker finished");
        self.unpark_ready();
        // What the pod left in the runtime and its logs are the garbage collector's now,
        // unless the same pod (a manifest put back) starts again at once.
        if !self.workers.contains_key(uid) {
            self.known.forget(uid);
            self.allocations.forget(uid);
            self.deferred_resizes.remove(uid);
            if let Some(devices) = &self.devices {
                devices.forget(uid);
            }
            if let Some(cpus) = &self.cpus {
                cpus.forget(uid);
            }
            if let Some(memory) = &self.memory {
                memory.forget(uid);
            }
            if let Some(topology) = &self.topology {
                topology.forget(uid);
            }
        }
        self.retry_deferred_resizes();
    }

    /// Pods in the runtime that no source wants and that still run something are terminated,
    /// once every source has spoken (before that, an unknown pod may just not have been read
    /// yet). What a stopped pod left behind is the container garbage collector's.
    fn cleanup_orphans(&mut self, runtime_pods: &RuntimePods) {
        for (uid, rp) in runtime_pods.iter() {
            // A pod waiting for its admission is wanted: what it runs from before a restart
            // stays until the admission decides.
            if !rp.is_active()
                || self.workers.contains_key(uid)
                || self.unadmitted.contains_key(uid)
            {
                continue;
            }
            info!(pod = %format!("{}/{}", rp.namespace, rp.name), %uid, "Cleaning up pod no source knows");
            self.terminate_runtime_pod(uid, rp);
        }
    }

    /// Stops a pod only the runtime knows, with the orphans' grace period.
    fn terminate_runtime_pod(&mut self, uid: &str, rp: &RuntimePod) {
        let pod = Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(rp.name.clone()),
                namespace: Some(rp.namespace.clone()),
                uid: Some(uid.to_string()),
                ..Default::default()
            },
            ..Default::default()
        });
        self.spawn(
            uid.to_string(),
            Desired::Terminate {
                pod,
                grace: ORPHAN_GRACE_SECONDS,
            },
        );
    }

    /// Runs the loop in `tasks` until cancelled.
    pub fn start(self, inputs: SyncLoopInputs, tasks: &mut crate::tasks::Tasks) {
        tasks.critical("sync loop", self.run(inputs));
    }

    pub async fn run(mut self, mut inputs: SyncLoopInputs) {
        // A relist before the loop started shows as a change not yet seen, or as pods.
        self.runtime_listed = inputs.runtime_pods.has_changed().unwrap_or(false)
            || !inputs.runtime_pods.borrow().is_empty();
        self.runtime_pods = Some(inputs.runtime_pods.clone());
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_PERIOD);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.health.mark();
            let labels_synced = self.admission.as_ref().map(|a| a.labels_synced.clone());
            let fresh_read = self
                .admission
                .as_ref()
                .and_then(|a| a.fresh_labels.as_ref())
                .map(|f| f.read.clone());
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                Some(update) = inputs.pod_updates.recv() => self.handle_update(update),
                Ok(()) = changed(labels_synced) => self.admit_unadmitted(),
                Ok(()) = changed(fresh_read) => self.recheck_relabelled(),
                Some(uid) = inputs.pleg_events.recv() => {
                    if let Some(w) = self.workers.get(&uid) {
                        w.poke();
                    }
                }
                Some(uid) = inputs.probe_changes.recv() => {
                    if let Some(w) = self.workers.get(&uid) {
                        w.poke();
                    }
                }
                Some(uid) = self.done_rx.recv() => self.worker_done(&uid),
                Ok(()) = inputs.runtime_pods.changed() => {
                    self.runtime_listed = true;
                    self.unpark_ready();
                }
                Some(eviction) = inputs.evictions.recv() => {
                    if let Some(w) = self.workers.get(&eviction.uid) {
                        w.evict(eviction);
                    }
                }
                _ = housekeeping.tick() => {
                    if *inputs.sources_ready.borrow() {
                        // Updates queued before readiness was published must be known first,
                        // or their running containers would look like orphans.
                        while let Ok(update) = inputs.pod_updates.try_recv() {
                            self.handle_update(update);
                        }
                        let pods = inputs.runtime_pods.borrow().clone();
                        self.cleanup_orphans(&pods);
                        self.known.mark_synced();
                        let (unadmitted, parked) = (&self.unadmitted, &self.parked);
                        self.allocations.prune_restored(|uid| {
                            unadmitted.contains_key(uid)
                                || parked.values().any(|p| uid_of(p) == uid)
                        });
                        let workers = &self.workers;
                        let wanted = |uid: &str| {
                            workers.contains_key(uid)
                                || unadmitted.contains_key(uid)
                                || parked.values().any(|p| uid_of(p) == uid)
                        };
                        if let Some(devices) = &self.devices {
                            devices.retain(wanted);
                        }
                        if let Some(cpus) = &self.cpus {
                            cpus.retain(wanted);
                        }
                        if let Some(memory) = &self.memory {
                            memory.retain(wanted);
                        }
                        if let Some(topology) = &self.topology {
                            topology.retain(wanted);
                        }
                        self.retry_deferred_resizes();
                    }
                    self.unpark_ready();
                    self.allocations.flush();
                }
            }
        }
    }
}
