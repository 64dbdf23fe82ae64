//! The sync loop: the one place where pod updates, PLEG events and housekeeping meet. It only
//! routes work to pod workers; all runtime calls happen in the workers.

pub mod worker;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::config::PodUpdate;
use crate::pleg::RuntimePods;
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

pub struct SyncLoopInputs {
    pub pod_updates: mpsc::Receiver<PodUpdate>,
    pub pleg_events: mpsc::Receiver<String>,
    pub runtime_pods: watch::Receiver<RuntimePods>,
    pub sources_ready: watch::Receiver<bool>,
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn grace_of(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
        .max(0)
}

pub struct SyncLoop {
    workers: HashMap<String, WorkerHandle>,
    /// Specs that arrived for a UID whose worker is still tearing the old pod down (a manifest
    /// removed and put back): started once the teardown finishes.
    readded: HashMap<String, Arc<Pod>>,
    ctx: Arc<WorkerContext>,
    done_rx: mpsc::Receiver<String>,
    health: Arc<SyncLoopHealth>,
    cancel: CancellationToken,
}

impl SyncLoop {
    /// `max_pods` bounds the worker map (plus orphans being cleaned up).
    pub fn new(
        ctx_parts: (
            Arc<crate::runtime::RuntimeManager>,
            Arc<crate::status::StatusStore>,
        ),
        resync: Duration,
        runtime_name: String,
        max_pods: usize,
        health: Arc<SyncLoopHealth>,
        cancel: CancellationToken,
    ) -> Self {
        let (done_tx, done_rx) = mpsc::channel(max_pods.max(16));
        let (runtime, status) = ctx_parts;
        SyncLoop {
            workers: HashMap::new(),
            readded: HashMap::new(),
            ctx: Arc::new(WorkerContext {
                runtime,
                status,
                resync,
                runtime_name,
                done: done_tx,
            }),
            done_rx,
            health,
            cancel,
        }
    }

    fn spawn(&mut self, uid: String, desired: Desired) {
        let handle = WorkerHandle::spawn(
            uid.clone(),
            desired,
            self.ctx.clone(),
            self.cancel.child_token(),
        );
        self.workers.insert(uid, handle);
    }

    fn handle_update(&mut self, update: PodUpdate) {
        match update {
            PodUpdate::Add(pods) | PodUpdate::Update(pods) => {
                for pod in pods {
                    let uid = uid_of(&pod);
                    match self.workers.get_mut(&uid) {
                        Some(w) if w.is_terminating() => {
                            self.readded.insert(uid, pod);
                        }
                        Some(w) => w.update(Desired::Run(pod)),
                        None => {
                            info!(pod = %pod.metadata.name.as_deref().unwrap_or_default(), %uid, "Pod added");
                            self.spawn(uid, Desired::Run(pod));
                        }
                    }
                }
            }
            PodUpdate::Remove(pods) => {
                for pod in pods {
                    let uid = uid_of(&pod);
                    let grace = grace_of(&pod);
                    info!(pod = %pod.metadata.name.as_deref().unwrap_or_default(), %uid, grace, "Pod removed, terminating");
                    self.readded.remove(&uid);
                    let desired = Desired::Terminate { pod, grace };
                    match self.workers.get_mut(&uid) {
                        Some(w) => w.update(desired),
                        None => self.spawn(uid, desired),
                    }
                }
            }
        }
    }

    /// Pods in the runtime that no source wants are terminated, once every source has spoken
    /// (before that, an unknown pod may just not have been read yet).
    fn cleanup_orphans(&mut self, runtime_pods: &RuntimePods) {
        for (uid, rp) in runtime_pods.iter() {
            if self.workers.contains_key(uid) {
                continue;
            }
            info!(pod = %format!("{}/{}", rp.namespace, rp.name), %uid, "Cleaning up pod no source knows");
            let pod = Arc::new(Pod {
                metadata: ObjectMeta {
                    name: Some(rp.name.clone()),
                    namespace: Some(rp.namespace.clone()),
                    uid: Some(uid.clone()),
                    ..Default::default()
                },
                ..Default::default()
            });
            self.spawn(
                uid.clone(),
                Desired::Terminate {
                    pod,
                    grace: ORPHAN_GRACE_SECONDS,
                },
            );
        }
    }

    pub async fn run(mut self, mut inputs: SyncLoopInputs) {
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_PERIOD);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.health.mark();
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                Some(update) = inputs.pod_updates.recv() => self.handle_update(update),
                Some(uid) = inputs.pleg_events.recv() => {
                    if let Some(w) = self.workers.get(&uid) {
                        w.poke();
                    }
                }
                Some(uid) = self.done_rx.recv() => {
                    if self.workers.get(&uid).is_some_and(|w| w.is_terminating()) {
                        self.workers.remove(&uid);
                        debug!(%uid, "Pod worker finished");
                        if let Some(pod) = self.readded.remove(&uid) {
                            self.spawn(uid, Desired::Run(pod));
                        }
                    }
                }
                _ = housekeeping.tick() => {
                    if *inputs.sources_ready.borrow() {
                        let pods = inputs.runtime_pods.borrow().clone();
                        self.cleanup_orphans(&pods);
                    }
                }
            }
        }
    }
}
