//! One task per pod: it alone touches its pod in the runtime, so no two syncs of the same pod
//! ever race. It wakes on a new spec, a PLEG event, a backoff expiry or the resync period.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::{deadline, spans};
use crate::events::EventType;
use crate::eviction::Eviction;
use crate::probe::Verdicts;
use crate::prober::ProbeManager;
use crate::runtime::backoff::Backoff;
use crate::runtime::observed::ObservedPod;
use crate::runtime::{RuntimeManager, SyncOutcome, Waiting};
use crate::status::{
    PodFailure, PodStatusInput, ResizePending, ResizeView, StatusStore, generate_pod_status,
};
use crate::volume::{PodVolumes, VolumeError, VolumeManager};

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error("Unable to attach or mount volumes: {0}")]
    Volumes(#[from] VolumeError),
}

/// What the pod's owner wants from the worker now.
#[derive(Clone, Debug)]
pub enum Desired {
    Run(Arc<Pod>),
    /// Stop everything with this grace period, remove it, and end the worker.
    Terminate {
        pod: Arc<Pod>,
        grace: i64,
    },
}

pub struct WorkerContext {
    pub runtime: Arc<RuntimeManager>,
    pub volumes: Arc<VolumeManager>,
    /// What the runtime's steps read from the API server, resolved before each.
    pub inputs: Arc<crate::podinputs::PodInputSource>,
    pub probes: Arc<ProbeManager>,
    pub status: Arc<StatusStore>,
    pub resync: Duration,
    pub runtime_name: String,
    pub done: mpsc::Sender<String>,
}

/// How long a finished pod's volumes may take to be given back before the worker goes on.
pub(super) const RELEASE_WAIT: Duration = Duration::from_secs(10);

pub struct WorkerHandle {
    full_name: String,
    desired: watch::Sender<Desired>,
    /// Set once by the eviction manager; the worker fails the pod with it.
    eviction: watch::Sender<Option<Eviction>>,
    /// A resize the sync loop could not allocate, for the pod's status.
    resize: watch::Sender<Option<ResizePending>>,
    poke: mpsc::Sender<()>,
    terminating: bool,
}

/// The pod as the kubelet failed it itself (deadline, eviction); a failed pod stays failed.
struct Failed {
    failure: PodFailure,
    /// The grace its containers are stopped with, when not the pod's own.
    grace: Option<i64>,
}

impl WorkerHandle {
    pub fn spawn(
        uid: String,
        desired: Desired,
        ctx: Arc<WorkerContext>,
        cancel: CancellationToken,
    ) -> Self {
        let terminating = matches!(desired, Desired::Terminate { .. });
        let full_name = match &desired {
            Desired::Run(pod) | Desired::Terminate { pod, .. } => crate::pod::pod_full_name(pod),
        };
        let (desired_tx, desired_rx) = watch::channel(desired);
        let (eviction_tx, eviction_rx) = watch::channel(None);
        let (resize_tx, resize_rx) = watch::channel(None);
        // Capacity 1: pokes coalesce, a pending one is as good as many.
        let (poke_tx, poke_rx) = mpsc::channel(1);
        let span = info_span!("pod_worker", pod_uid = %uid);
        let inputs = Inputs {
            desired: desired_rx,
            eviction: eviction_rx,
            resize: resize_rx,
            poke: poke_rx,
        };
        tokio::spawn(run(uid, inputs, ctx, cancel).instrument(span));
        WorkerHandle {
            full_name,
            desired: desired_tx,
            eviction: eviction_tx,
            resize: resize_tx,
            poke: poke_tx,
            terminating,
        }
    }

    /// Shows (or clears) a resize that waits for room or can never be allocated; true when
    /// that changed what the pod shows.
    pub fn set_resize_pending(&self, pending: Option<ResizePending>) -> bool {
        self.resize.send_if_modified(|p| {
            let changed = *p != pending;
            *p = pending;
            changed
        })
    }

    pub fn update(&mut self, desired: Desired) {
        if self.terminating {
            // Termination is final; a later spec for the same UID waits for a new worker.
            return;
        }
        self.terminating = matches!(desired, Desired::Terminate { .. });
        self.desired.send_replace(desired);
    }

    pub fn poke(&self) {
        let _ = self.poke.try_send(());
    }

    /// Fails and stops the pod (it stays in place, phase Failed), unless it is terminating.
    pub fn evict(&self, eviction: Eviction) {
        if !self.terminating {
            self.eviction
                .send_if_modified(|e| e.replace(eviction).is_none());
        }
    }

    /// The pod the worker currently runs (or terminates).
    pub fn pod(&self) -> Arc<Pod> {
        match &*self.desired.borrow() {
            Desired::Run(pod) | Desired::Terminate { pod, .. } => pod.clone(),
        }
    }

    pub fn full_name(&self) -> &str {
        &self.full_name
    }

    pub fn is_terminating(&self) -> bool {
        self.terminating
    }
}

/// What wakes a worker.
struct Inputs {
    desired: watch::Receiver<Desired>,
    eviction: watch::Receiver<Option<Eviction>>,
    resize: watch::Receiver<Option<ResizePending>>,
    poke: mpsc::Receiver<()>,
}

async fn run(uid: String, inputs: Inputs, ctx: Arc<WorkerContext>, cancel: CancellationToken) {
    let Inputs {
        desired: mut desired_rx,
        eviction: mut eviction_rx,
        resize: mut resize_rx,
        poke: mut poke_rx,
    } = inputs;
    let mut backoff = Backoff::default();
    // The start time the API server holds survives a kubelet restart; it is reported again, and
    // the active deadline counts from it.
    let start_time = match &*desired_rx.borrow() {
        Desired::Run(pod) | Desired::Terminate { pod, .. } => {
            super::deadline::started(pod, SystemTime::now())
        }
    };
    let mut failure: Option<Failed> = None;
    let mut timing = super::metrics::PodWorkerTracker::default();
    let mut released = false;
    loop {
        let desired = desired_rx.borrow_and_update().clone();
        // Marked seen on every round, whatever is done with it, or the wait below would wake
        // at once, again and again.
        let evicted = eviction_rx.borrow_and_update().clone();
        let pending = resize_rx.borrow_and_update().clone();
        let wait = match desired {
            Desired::Run(pod) => {
                ctx.probes.add_pod(&pod, &cancel);
                // A termination request cancels a sync in progress (a long image pull must not
                // hold up the grace period); dropping the sync cancels its CRI calls.
                let timer = timing.begin(&pod);
                if failure.is_none()
                    && let Some(e) = evicted
                {
                    failure = Some(Failed {
                        failure: e.failure,
                        grace: Some(e.grace),
                    });
                }
                let span = spans::sync_pod(&pod, timer.operation());
                let sync = sync_once(
                    &uid,
                    &pod,
                    &ctx,
                    &mut backoff,
                    start_time,
                    &mut failure,
                    pending.as_ref(),
                );
                let result = tokio::select! {
                    r = sync.instrument(span.clone()) => r,
                    _ = termination_requested(&mut desired_rx) => continue,
                };
                match &result {
                    Err(err) => crate::telemetry::trace::record_error(&span, err),
                    // The probes that decide whether what started is ready join this trace.
                    Ok(o) if o.started > 0 => ctx.probes.set_trace_parent(&uid, &span),
                    Ok(_) => {}
                }
                drop(span);
                let status = ctx.status.status(&uid);
                timing.end(timer, &pod, status.as_ref());
                if !released
                    && matches!(&result, Ok(o) if o.finished)
                    && status.as_ref().is_some_and(crate::status::has_finished)
                {
                    // Bounded: a hung unmount must not keep the worker from a termination.
                    match tokio::time::timeout(RELEASE_WAIT, ctx.volumes.release(&uid)).await {
                        Ok(Ok(())) => released = true,
                        Ok(Err(err)) => {
                            warn!(%err, "Could not release the finished pod's volumes");
                        }
                        Err(_) => {
                            // Left to finish on its blocking thread; not started again.
                            released = true;
                            warn!("Releasing the finished pod's volumes is taking long");
                        }
                    }
                }
                let changed_meanwhile =
                    matches!(&*desired_rx.borrow(), Desired::Run(p) if !Arc::ptr_eq(p, &pod));
                match result {
                    Ok(_) if changed_meanwhile => Duration::ZERO,
                    Ok(outcome) => outcome.requeue_after.unwrap_or(ctx.resync).min(ctx.resync),
                    Err(err) => {
                        warn!(%err, "Error syncing pod, skipping");
                        crate::runtime::RETRY_AFTER_ERROR
                    }
                }
            }
            Desired::Terminate { pod, grace } => {
                ctx.probes.remove_pod(&uid);
                match terminate(&uid, &pod, grace, &ctx, start_time).await {
                    Ok(last) => {
                        ctx.status.finish_with(&uid, &pod, last);
                        let _ = ctx.done.send(uid).await;
                        return;
                    }
                    Err(err) => {
                        warn!(%err, "Error terminating pod, will retry");
                        crate::runtime::RETRY_AFTER_ERROR
                    }
                }
            }
        };
        backoff.gc(SystemTime::now());
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = desired_rx.changed() => if changed.is_err() { return },
            changed = eviction_rx.changed() => if changed.is_err() { return },
            changed = resize_rx.changed() => if changed.is_err() { return },
            _ = poke_rx.recv() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Resolves once the desired state becomes Terminate; spec updates are left to the caller.
async fn termination_requested(rx: &mut watch::Receiver<Desired>) {
    loop {
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
        if matches!(*rx.borrow(), Desired::Terminate { .. }) {
            return;
        }
    }
}

async fn sync_once(
    uid: &str,
    pod: &Arc<Pod>,
    ctx: &WorkerContext,
    backoff: &mut Backoff,
    start_time: SystemTime,
    failure: &mut Option<Failed>,
    pending: Option<&ResizePending>,
) -> Result<SyncOutcome, SyncError> {
    let observed = ctx.runtime.pod_status(uid).await?;
    let probes = ctx
        .probes
        .verdicts(observed.containers.iter().map(|c| c.id.as_str()));
    let mut deadline_in = None;
    if failure.is_none() {
        match deadline::check(pod, start_time, SystemTime::now()) {
            deadline::Verdict::Exceeded(f) => {
                info!(reason = %f.reason, "Pod failed: {}", f.message);
                ctx.runtime
                    .events()
                    .pod(pod, EventType::Normal, &f.reason, &f.message);
                *failure = Some(Failed {
                    failure: f,
                    grace: None,
                });
            }
            deadline::Verdict::In(left) => deadline_in = Some(left),
            deadline::Verdict::None => {}
        }
    }
    let actual = ctx.runtime.acknowledged(uid);
    let in_progress = ctx.runtime.resize_in_progress(pod, &observed);
    let status_of = |waiting: &HashMap<String, Waiting>,
                     failure: Option<&PodFailure>,
                     resize_error: Option<&str>| {
        generate_pod_status(&PodStatusInput {
            pod,
            observed: &observed,
            waiting,
            start_time,
            node_ip: &ctx.runtime.settings().node_ip,
            runtime_name: &ctx.runtime_name,
            now: SystemTime::now(),
            failure,
            probes: &probes,
            resize: ResizeView {
                pending,
                in_progress,
                error: resize_error,
                actual: Some(&actual),
            },
        })
    };
    let result = if let Some(failed) = failure {
        // As upstream, a failed pod (evicted, past its deadline) shows Failed before its
        // containers are stopped, not a grace period later.
        let no_waiting = HashMap::new();
        ctx.status.set(
            uid,
            pod.clone(),
            status_of(&no_waiting, Some(&failed.failure), None),
        );
        // Its containers are stopped with its grace period, or an eviction's override as it
        // is, and never restarted.
        let grace = failed.grace.map_or_else(
            || crate::runtime::Grace::Pod(crate::runtime::grace_seconds(pod)),
            crate::runtime::Grace::Override,
        );
        let killed = ctx.runtime.kill_pod(pod, &observed, grace).await;
        killed
            .map(|()| SyncOutcome {
                finished: true,
                ..Default::default()
            })
            .map_err(SyncError::from)
    } else {
        sync_running(uid, pod, ctx, backoff, &observed, &probes).await
    };
    let result = result.map(|mut outcome| {
        if let Some(left) = deadline_in {
            outcome.requeue_after = Some(outcome.requeue_after.map_or(left, |d| d.min(left)));
        }
        outcome
    });
    // The status is published even when the sync failed (say, the sandbox could not be
    // created), so the pod is visible with its containers waiting.
    let no_waiting = Default::default();
    let waiting = result.as_ref().map(|o| &o.waiting).unwrap_or(&no_waiting);
    // Status from the state before this sync's actions: whatever they changed comes back as a
    // PLEG event within a relist period and is reported on the next sync.
    let resize_error = result.as_ref().ok().and_then(|o| o.resize_error.as_deref());
    let status = status_of(waiting, failure.as_ref().map(|f| &f.failure), resize_error);
    crate::startup::tracker().observe_status(pod, &status);
    ctx.status.set(uid, pod.clone(), status);
    result
}

/// Volumes, then the runtime, for a pod that should be running.
async fn sync_running(
    uid: &str,
    pod: &Arc<Pod>,
    ctx: &WorkerContext,
    backoff: &mut Backoff,
    observed: &ObservedPod,
    probes: &HashMap<String, Verdicts>,
) -> Result<SyncOutcome, SyncError> {
    // Volumes are set up before anything starts and refreshed on every sync after, except
    // for a pod that has finished: nothing in it will read them again.
    let finished = ctx
        .status
        .status(uid)
        .is_some_and(|s| crate::status::has_finished(&s));
    let volumes = if finished {
        PodVolumes::default()
    } else {
        let span = tracing::info_span!(
            target: crate::telemetry::trace::TARGET,
            "setupVolumes",
            k8s.pod.volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).map_or(0, Vec::len),
        );
        // Boxed: both futures are large, and the worker's own future must stay small enough
        // to be moved onto the heap when it is spawned.
        let set_up = Box::pin(ctx.volumes.setup(pod).instrument(span.clone())).await;
        match set_up {
            Ok(v) => {
                crate::startup::tracker().mark(uid, crate::startup::Phase::VolumesReady);
                v
            }
            Err(err) => {
                crate::telemetry::trace::record_error(&span, &err);
                return Err(err.into());
            }
        }
    };
    let plan = ctx.runtime.plan(pod, observed, backoff, probes);
    let default_handler = &ctx.runtime.settings().runtime_handler;
    let inputs = ctx.inputs.resolve(pod, plan.needs(), default_handler).await;
    Box::pin(
        ctx.runtime
            .sync_pod(pod, observed, plan, inputs, backoff, &volumes),
    )
    .await
    .map_err(SyncError::from)
}

/// Stops and removes the pod; returns the status a deleted API pod ends with.
async fn terminate(
    uid: &str,
    pod: &Pod,
    grace: i64,
    ctx: &WorkerContext,
    start_time: SystemTime,
) -> Result<Option<k8s_openapi::api::core::v1::PodStatus>, crate::runtime::RuntimeError> {
    let _timer = super::metrics::WorkerTimer::start("kill");
    let span = spans::sync_terminating_pod(pod);
    let killed = async {
        let observed = ctx.runtime.pod_status(uid).await?;
        ctx.runtime
            .kill_pod(pod, &observed, crate::runtime::Grace::Pod(grace))
            .await
    }
    .instrument(span.clone())
    .await;
    if let Err(err) = &killed {
        crate::telemetry::trace::record_error(&span, err);
    }
    drop(span);
    killed?;
    let last = final_status(uid, pod, ctx, start_time).await;
    let span = spans::sync_terminated_pod(pod);
    let removed = remove(uid, pod, ctx).instrument(span.clone()).await;
    if let Err(err) = &removed {
        crate::telemetry::trace::record_error(&span, err);
    }
    crate::startup::tracker().forget(uid);
    removed.map(|()| last)
}

/// What a deleted API pod shows before the object goes, as upstream's status manager makes
/// it: its containers as they ended and a terminal phase. None for static pods (their mirror
/// pod is the mirror manager's) and for pods that were not deleted through the API.
async fn final_status(
    uid: &str,
    pod: &Pod,
    ctx: &WorkerContext,
    start_time: SystemTime,
) -> Option<k8s_openapi::api::core::v1::PodStatus> {
    if pod.metadata.deletion_timestamp.is_none() || crate::sources::is_static_pod(pod) {
        return None;
    }
    let observed = match ctx.runtime.pod_status(uid).await {
        Ok(o) => o,
        Err(err) => {
            warn!(%err, "Could not read the terminated pod's containers; no final status");
            return None;
        }
    };
    let previous = ctx.status.status(uid);
    let mut status = generate_pod_status(&PodStatusInput {
        pod,
        observed: &observed,
        waiting: &HashMap::new(),
        start_time,
        node_ip: &ctx.runtime.settings().node_ip,
        runtime_name: &ctx.runtime_name,
        now: SystemTime::now(),
        failure: None,
        probes: &HashMap::new(),
        resize: ResizeView::default(),
    });
    // The sandbox is stopped by now: the addresses and start time it had stay.
    if let Some(prev) = previous {
        if status.pod_ips.as_ref().is_none_or(Vec::is_empty) {
            status.pod_ip = prev.pod_ip;
            status.pod_ips = prev.pod_ips;
        }
        status.start_time = prev.start_time.or(status.start_time);
    }
    let has_init = pod
        .spec
        .as_ref()
        .is_some_and(|s| s.init_containers.as_ref().is_some_and(|i| !i.is_empty()));
    crate::status::mark_terminal(&mut status, has_init);
    Some(status)
}

/// What is left of a stopped pod: its cgroup, then its folder. Its stopped containers,
/// sandboxes and logs go to the container garbage collector once the worker has finished.
async fn remove(
    uid: &str,
    pod: &Pod,
    ctx: &WorkerContext,
) -> Result<(), crate::runtime::RuntimeError> {
    let meta = &pod.metadata;
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta.namespace.clone().unwrap_or_default();
    ctx.runtime.remove_pod(uid).await?;
    if let Err(err) = ctx.volumes.teardown(uid).await {
        // Left for a later cleanup rather than retried forever: data may be mounted there.
        warn!(pod_uid = %uid, %err, "Could not remove the pod folder");
    }
    info!(pod = %format!("{namespace}/{name}"), "Pod terminated and removed");
    Ok(())
}
