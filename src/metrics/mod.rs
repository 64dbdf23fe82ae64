//! Prometheus metrics: a process-wide registry of the kubelet_* families (like upstream's
//! legacyregistry, so instrumented code needs no handle passed around), the process_*
//! basics, and the text exposition of /metrics and /metrics/probes (/metrics/resource and
//! /metrics/cadvisor are rendered beside the statistics, in `stats::exposition`).

mod kubelet;
pub mod process;
pub mod registry;
pub mod text;

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, PodStatus};

pub use kubelet::KubeletMetrics;

/// The kubelet's metrics, created on first use.
pub fn kubelet() -> &'static KubeletMetrics {
    static METRICS: OnceLock<KubeletMetrics> = OnceLock::new();
    METRICS.get_or_init(KubeletMetrics::new)
}

/// The /metrics exposition: kubelet families and process basics.
pub fn render() -> String {
    let mut families = kubelet().families();
    families.extend(process::families());
    text::encode(families)
}

/// /metrics/probes. Probes are not implemented yet, so the family has no series; its header
/// says what will be there.
pub fn render_probes() -> String {
    let mut out = String::new();
    text::write_header(
        &mut out,
        "prober_probe_total",
        "[ALPHA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
        text::Kind::Counter,
    );
    out
}

/// A pod sandbox is about to be created.
pub fn record_pod_started() {
    kubelet().started_pods.inc(&[]);
}

/// A container of `pod` is about to be created; its type as upstream labels it.
pub fn record_container_started(pod: &Pod, container: &str) {
    let spec = pod.spec.as_ref();
    let in_list = |l: Option<&Vec<k8s_openapi::api::core::v1::Container>>| {
        l.is_some_and(|l| l.iter().any(|c| c.name == container))
    };
    let kind = if in_list(spec.and_then(|s| s.init_containers.as_ref())) {
        "init_container"
    } else if spec
        .and_then(|s| s.ephemeral_containers.as_ref())
        .is_some_and(|l| l.iter().any(|c| c.name == container))
    {
        "ephemeral_container"
    } else {
        "container"
    };
    kubelet().started_containers.inc(&[kind]);
}

/// Every regular container of the pod is running.
fn all_running(pod: &Pod, status: Option<&PodStatus>) -> bool {
    let want = pod.spec.as_ref().map_or(0, |s| s.containers.len());
    let running = status
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |l| {
            l.iter()
                .filter(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
                .count()
        });
    want > 0 && running >= want
}

/// Per pod worker: labels each sync (create, update, sync, kill) and observes the pod's start
/// duration once, from the worker's start to all containers running.
pub struct PodWorkerTracker {
    first_seen: Instant,
    last_spec: Option<Arc<Pod>>,
    start_observed: bool,
}

/// One timed pass of a pod worker, observed when dropped (a pass cut short counts too).
pub struct WorkerTimer {
    operation: &'static str,
    started: Instant,
}

impl WorkerTimer {
    pub fn start(operation: &'static str) -> Self {
        WorkerTimer {
            operation,
            started: Instant::now(),
        }
    }
}

impl Drop for WorkerTimer {
    fn drop(&mut self) {
        kubelet()
            .pod_worker_duration
            .observe(&[self.operation], self.started.elapsed().as_secs_f64());
    }
}

impl Default for PodWorkerTracker {
    fn default() -> Self {
        PodWorkerTracker {
            first_seen: Instant::now(),
            last_spec: None,
            start_observed: false,
        }
    }
}

impl PodWorkerTracker {
    pub fn begin(&mut self, pod: &Arc<Pod>) -> WorkerTimer {
        let operation = match &self.last_spec {
            None => "create",
            Some(p) if Arc::ptr_eq(p, pod) => "sync",
            Some(_) => "update",
        };
        self.last_spec = Some(pod.clone());
        WorkerTimer::start(operation)
    }

    /// Ends the pass; the first time every container runs, the pod's start is observed.
    pub fn end(&mut self, t: WorkerTimer, pod: &Pod, status: Option<&PodStatus>) {
        drop(t);
        if !self.start_observed && all_running(pod, status) {
            self.start_observed = true;
            kubelet()
                .pod_start_duration
                .observe(&[], self.first_seen.elapsed().as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests;
