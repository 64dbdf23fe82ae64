//! The prober: one task per container and probe kind (liveness, readiness, startup), each
//! probing on its period and recording verdicts by container ID. A changed verdict wakes the
//! pod's worker (through the sync loop), which reads them: readiness makes the container
//! `ready`, startup makes it `started`, and a failed liveness or startup probe has it
//! restarted. Workers read the pod's container IDs and IP from the status store, like
//! upstream's read the status manager.

pub mod results;
mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::cri::RuntimeClient;
use crate::events::EventRecorder;
use crate::probe::{ProbeKind, Verdicts};
use crate::status::StatusStore;

pub struct ProbeManager {
    cri: RuntimeClient,
    status: Arc<StatusStore>,
    events: EventRecorder,
    results: results::Results,
    /// The probing pods' tokens, by UID: bounded by the pods the sync loop runs.
    pods: Mutex<HashMap<String, CancellationToken>>,
    /// While tracing: the trace each probing pod's last start went into, and when, so the
    /// probes that decide whether it is ready show in it. Only pods in `pods` have one.
    trace_parents: Mutex<HashMap<String, (opentelemetry::Context, std::time::Instant)>>,
    changed: mpsc::Sender<String>,
}

/// How long after a start its probes are traced in the start's trace.
const PROBE_TRACE_WINDOW: std::time::Duration = std::time::Duration::from_secs(300);

/// How many verdict changes may wait for the sync loop; past that a change waits for the
/// pod's next periodic sync instead.
const CHANGED_CAPACITY: usize = 256;

impl ProbeManager {
    /// The manager and the stream of UIDs whose verdicts changed (for the sync loop).
    pub fn new(
        cri: RuntimeClient,
        status: Arc<StatusStore>,
        events: EventRecorder,
    ) -> (Arc<Self>, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel(CHANGED_CAPACITY);
        let manager = ProbeManager {
            cri,
            status,
            events,
            results: results::Results::default(),
            pods: Mutex::new(HashMap::new()),
            trace_parents: Mutex::new(HashMap::new()),
            changed: tx,
        };
        (Arc::new(manager), rx)
    }

    fn pods(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts probing the pod's containers (once per UID); the workers end with `parent`.
    pub fn add_pod(self: &Arc<Self>, pod: &Arc<Pod>, parent: &CancellationToken) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let containers = pod
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or(&[]);
        // Sidecars are probed like app containers; plain init containers never are.
        let sidecars = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or(&[])
            .iter()
            .enumerate()
            .filter(|(_, c)| crate::pod::is_sidecar(c))
            .map(|(i, c)| (i, c, true));
        let probed: Vec<(usize, ProbeKind, bool)> = containers
            .iter()
            .enumerate()
            .map(|(i, c)| (i, c, false))
            .chain(sidecars)
            .flat_map(|(i, c, sidecar)| {
                ProbeKind::ALL
                    .into_iter()
                    .filter(|k| k.of(c).is_some())
                    .map(move |k| (i, k, sidecar))
            })
            .collect();
        if probed.is_empty() {
            return;
        }
        let token = {
            let mut pods = self.pods();
            if pods.contains_key(&uid) {
                return;
            }
            let token = parent.child_token();
            pods.insert(uid.clone(), token.clone());
            token
        };
        for (index, kind, sidecar) in probed {
            let w = worker::Worker::new(self.clone(), pod.clone(), index, kind);
            let w = if sidecar { w.for_sidecar() } else { w };
            tokio::spawn(w.run(token.clone()));
        }
    }

    /// Stops probing the pod (it is terminating); its verdicts go with its workers.
    pub fn remove_pod(&self, uid: &str) {
        if let Some(token) = self.pods().remove(uid) {
            token.cancel();
        }
        self.trace_parents().remove(uid);
    }

    fn trace_parents(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (opentelemetry::Context, std::time::Instant)>>
    {
        self.trace_parents.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pod's containers were started under `span`: their first probes go in its trace.
    pub fn set_trace_parent(&self, uid: &str, span: &tracing::Span) {
        let Some(cx) = crate::telemetry::trace::propagate::context_of(span) else {
            return;
        };
        if self.pods().contains_key(uid) {
            self.trace_parents()
                .insert(uid.to_string(), (cx, std::time::Instant::now()));
        }
    }

    /// The trace a probe of the pod joins: its last start's, for [`PROBE_TRACE_WINDOW`] (a
    /// probe that never succeeds must not grow one trace forever).
    fn trace_parent(&self, uid: &str) -> Option<opentelemetry::Context> {
        if !crate::telemetry::trace::enabled() {
            return None;
        }
        self.trace_parents()
            .get(uid)
            .filter(|(_, at)| at.elapsed() < PROBE_TRACE_WINDOW)
            .map(|(cx, _)| cx.clone())
    }

    /// The verdicts of these containers.
    pub fn verdicts<'a>(&self, ids: impl Iterator<Item = &'a str>) -> HashMap<String, Verdicts> {
        self.results.snapshot(ids)
    }
}
