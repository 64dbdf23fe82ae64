//! What pod workers add to /metrics: the duration of each pass labelled by what it did
//! (create, update, sync, kill), and each pod's start duration, observed once.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, PodStatus};

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

    /// What the pass does: create, update, sync or kill (upstream's update type).
    pub fn operation(&self) -> &'static str {
        self.operation
    }
}

impl Drop for WorkerTimer {
    fn drop(&mut self) {
        crate::metrics::kubelet()
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
            crate::metrics::kubelet()
                .pod_start_duration
                .observe(&[], self.first_seen.elapsed().as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStatus, PodSpec,
    };

    use super::*;
    use crate::metrics::kubelet;

    fn pod(containers: &[&str], init: &[&str]) -> Pod {
        let c = |n: &&str| Container {
            name: n.to_string(),
            ..Default::default()
        };
        Pod {
            spec: Some(PodSpec {
                containers: containers.iter().map(c).collect(),
                init_containers: Some(init.iter().map(c).collect()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn running(names: &[&str]) -> PodStatus {
        PodStatus {
            container_statuses: Some(
                names
                    .iter()
                    .map(|n| ContainerStatus {
                        name: n.to_string(),
                        state: Some(ContainerState {
                            running: Some(ContainerStateRunning::default()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn worker_operations_and_start_observed_once() {
        let m = kubelet();
        let before = (
            m.pod_worker_duration.count(&["create"]),
            m.pod_worker_duration.count(&["update"]),
            m.pod_worker_duration.count(&["sync"]),
            m.pod_worker_duration.count(&["kill"]),
        );
        let p1 = Arc::new(pod(&["a", "b"], &[]));
        let mut t = PodWorkerTracker::default();
        let timer = t.begin(&p1);
        t.end(timer, &p1, Some(&running(&["a"])));
        assert!(!t.start_observed, "one of two running is not started");
        let timer = t.begin(&p1);
        t.end(timer, &p1, Some(&running(&["a", "b"])));
        assert!(t.start_observed);
        let p2 = Arc::new(pod(&["a", "b"], &[]));
        let timer = t.begin(&p2);
        t.end(timer, &p2, Some(&running(&["a", "b"])));
        drop(WorkerTimer::start("kill"));
        let after = (
            m.pod_worker_duration.count(&["create"]),
            m.pod_worker_duration.count(&["update"]),
            m.pod_worker_duration.count(&["sync"]),
            m.pod_worker_duration.count(&["kill"]),
        );
        assert!(
            after.0 > before.0 && after.1 > before.1 && after.2 > before.2 && after.3 > before.3
        );
    }
}
