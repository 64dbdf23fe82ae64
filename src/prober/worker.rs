//! One probe of one container: a task that wakes every `periodSeconds`, looks up the
//! container's current instance in the status store, probes it when that makes sense, and
//! records a verdict once `successThreshold` or `failureThreshold` consecutive results agree.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, Probe};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug};

use super::ProbeManager;
use crate::events::EventType;
use crate::probe::{Outcome, ProbeKind};

pub struct Worker {
    manager: Arc<ProbeManager>,
    pod: Arc<Pod>,
    index: usize,
    kind: ProbeKind,
    /// The container instance being probed.
    container_id: Option<String>,
    last: Outcome,
    run: u32,
    /// After a liveness or startup failure: nothing more until the container is replaced.
    on_hold: bool,
    /// `index` is into `initContainers` (a sidecar), not `containers`.
    sidecar: bool,
}

fn seconds(v: Option<i32>, default: i32, min: i32) -> Duration {
    Duration::from_secs(v.unwrap_or(default).max(min) as u64)
}

struct Timing {
    period: Duration,
    timeout: Duration,
    initial_delay: Duration,
    success_threshold: u32,
    failure_threshold: u32,
}

/// Upstream's defaults: every 10 s, 1 s timeout, 1 success, 3 failures.
fn timing(p: &Probe) -> Timing {
    Timing {
        period: seconds(p.period_seconds, 10, 1),
        timeout: seconds(p.timeout_seconds, 1, 1),
        initial_delay: seconds(p.initial_delay_seconds, 0, 0),
        success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
        failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
    }
}

fn strip_runtime(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, rest)| rest)
}

fn started_at(cs: &ContainerStatus) -> Option<SystemTime> {
    let t = cs.state.as_ref()?.running.as_ref()?.started_at.as_ref()?;
    Some(SystemTime::from(t.0))
}

impl Worker {
    pub fn new(manager: Arc<ProbeManager>, pod: Arc<Pod>, index: usize, kind: ProbeKind) -> Self {
        Worker {
            manager,
            pod,
            index,
            kind,
            container_id: None,
            last: Outcome::Unknown,
            run: 0,
            on_hold: false,
            sidecar: false,
        }
    }

    /// Probes the sidecar at `index` in `initContainers` instead.
    pub fn for_sidecar(mut self) -> Self {
        self.sidecar = true;
        self
    }

    fn container(&self) -> Option<&Container> {
        let spec = self.pod.spec.as_ref()?;
        if self.sidecar {
            spec.init_containers.as_ref()?.get(self.index)
        } else {
            spec.containers.get(self.index)
        }
    }

    fn labels(&self, result: &'static str) -> [String; 6] {
        let meta = &self.pod.metadata;
        [
            self.kind.name().to_string(),
            result.to_string(),
            self.container().map(|c| c.name.clone()).unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
            meta.namespace.clone().unwrap_or_default(),
            meta.uid.clone().unwrap_or_default(),
        ]
    }

    fn count(&self, result: &'static str) {
        let labels = self.labels(result);
        let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
        crate::metrics::probes().inc(&refs);
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        let Some(probe) = self.container().and_then(|c| self.kind.of(c)).cloned() else {
            return;
        };
        let t = timing(&probe);
        let mut ticker = tokio::time::interval(t.period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = ticker.tick() => {}
            }
            // Boxed: a probe in flight needs kilobytes (HTTP, TLS, gRPC state), a waiting
            // worker should not carry that space between periods.
            let keep_going = tokio::select! {
                _ = cancel.cancelled() => break,
                keep = Box::pin(self.step(&probe, &t)) => keep,
            };
            if !keep_going {
                break;
            }
        }
        if let Some(id) = &self.container_id {
            self.manager.results.clear(id, self.kind);
        }
        for result in ["successful", "failed", "unknown"] {
            let labels = self.labels(result);
            let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
            crate::metrics::probes().remove(&refs);
        }
    }

    fn set(&self, id: &str, outcome: Outcome) {
        if self.manager.results.set(id, self.kind, outcome) {
            let uid = self.pod.metadata.uid.clone().unwrap_or_default();
            if self.manager.changed.try_send(uid).is_err() {
                debug!("Probe result queue full; the pod's next sync picks the change up");
            }
        }
    }

    /// One period's work; false once the container will never run again.
    async fn step(&mut self, probe: &Probe, t: &Timing) -> bool {
        let uid = self.pod.metadata.uid.as_deref().unwrap_or_default();
        let Some(status) = self.manager.status.status(uid) else {
            return true;
        };
        if crate::status::has_finished(&status) {
            return false;
        }
        let Some(spec) = self.container().cloned() else {
            return false;
        };
        let statuses = if self.sidecar {
            &status.init_container_statuses
        } else {
            &status.container_statuses
        };
        let Some(cs) = statuses.iter().flatten().find(|s| s.name == spec.name) else {
            return true;
        };
        let Some(id) = cs.container_id.as_deref().map(strip_runtime) else {
            return true;
        };
        if self.container_id.as_deref() != Some(id) {
            if let Some(old) = self.container_id.take() {
                self.manager.results.clear(&old, self.kind);
            }
            self.container_id = Some(id.to_string());
            self.set(id, self.kind.initial());
            self.last = Outcome::Unknown;
            self.run = 0;
            self.on_hold = false;
        }
        if self.on_hold {
            return true;
        }
        let Some(started) = started_at(cs) else {
            // Not running: not ready, and nothing to probe.
            if self.kind == ProbeKind::Readiness {
                self.set(id, Outcome::Failure);
            }
            // A sidecar restarts whatever the pod's policy; it ends with the pod.
            let never_again = !self.sidecar
                && self
                    .pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.restart_policy.as_deref())
                    == Some("Never")
                && cs.state.as_ref().is_some_and(|s| s.terminated.is_some());
            return !never_again;
        };
        let startup = self.manager.results.get(id).startup;
        match self.kind {
            // A startup probe holds the others back until it succeeds...
            ProbeKind::Liveness | ProbeKind::Readiness
                if spec.startup_probe.is_some() && startup != Some(Outcome::Success) =>
            {
                return true;
            }
            // ...and has nothing more to say once it has.
            ProbeKind::Startup if startup == Some(Outcome::Success) => return true,
            _ => {}
        }
        if SystemTime::now()
            .duration_since(started)
            .is_ok_and(|up| up < t.initial_delay)
        {
            return true;
        }

        let span = self.start_span(uid, id, &spec.name);
        let (outcome, output) =
            crate::probe::run_once(&self.manager.cri, probe, &spec, &status, id, t.timeout)
                .instrument(span.clone())
                .await;
        span.record(
            "probe.result",
            match outcome {
                Outcome::Success => "successful",
                Outcome::Failure => "failed",
                Outcome::Unknown => "unknown",
            },
        );
        if outcome != Outcome::Success {
            crate::telemetry::trace::record_error(&span, &output);
        }
        drop(span);
        match outcome {
            Outcome::Success => self.count("successful"),
            Outcome::Failure => self.count("failed"),
            Outcome::Unknown => self.count("unknown"),
        }
        if outcome == Outcome::Failure {
            let message = format!("{} probe failed: {output}", self.kind.name());
            self.manager
                .events
                .pod(&self.pod, EventType::Warning, "Unhealthy", &message);
        }
        if outcome == self.last {
            self.run += 1;
        } else {
            self.last = outcome;
            self.run = 1;
        }
        let needed = match outcome {
            Outcome::Success => t.success_threshold,
            Outcome::Failure => t.failure_threshold,
            Outcome::Unknown => return true,
        };
        if self.run < needed {
            return true;
        }
        self.set(id, outcome);
        if outcome == Outcome::Failure && self.kind != ProbeKind::Readiness {
            // The sync loop restarts the container; probe its successor.
            self.on_hold = true;
            self.run = 0;
        }
        true
    }

    /// A `probe` span in the trace of the sync that started the container, while the probe
    /// has yet to succeed (a start's readiness and startup probes); none otherwise, so a pod's
    /// steady probing makes no traces.
    fn start_span(&self, uid: &str, id: &str, container: &str) -> tracing::Span {
        if self.kind == ProbeKind::Liveness {
            return tracing::Span::none();
        }
        let verdicts = self.manager.results.get(id);
        let so_far = match self.kind {
            ProbeKind::Readiness => verdicts.readiness,
            _ => verdicts.startup,
        };
        if so_far == Some(Outcome::Success) {
            return tracing::Span::none();
        }
        let Some(parent) = self.manager.trace_parent(uid) else {
            return tracing::Span::none();
        };
        let span = tracing::info_span!(
            target: crate::telemetry::trace::TARGET,
            parent: None,
            "probe",
            probe.type = self.kind.name(),
            k8s.container.name = container,
            probe.result = tracing::field::Empty,
        );
        crate::telemetry::trace::propagate::set_parent(&span, parent);
        span
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_defaults_follow_upstream() {
        let t = timing(&Probe::default());
        assert_eq!(t.period, Duration::from_secs(10));
        assert_eq!(t.timeout, Duration::from_secs(1));
        assert_eq!((t.success_threshold, t.failure_threshold), (1, 3));
    }

    /// A waiting worker is its future: keep probes cheap (the HTTP/TLS/gRPC state of a probe
    /// in flight is boxed apart).
    #[tokio::test]
    async fn an_idle_worker_stays_small() {
        let cri = crate::cri::fake::FakeCri::start(std::time::Duration::from_secs(1)).await;
        let (m, _rx) = super::ProbeManager::new(
            cri.client.clone(),
            std::sync::Arc::new(crate::status::StatusStore::default()),
            crate::events::EventRecorder::default(),
        );
        let pod = std::sync::Arc::new(k8s_openapi::api::core::v1::Pod::default());
        let w = super::Worker::new(m, pod, 0, super::ProbeKind::Readiness);
        let fut = w.run(tokio_util::sync::CancellationToken::new());
        let size = std::mem::size_of_val(&fut);
        assert!(size <= 1024, "an idle probe worker takes {size} bytes");
    }
}
