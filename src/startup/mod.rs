//! Every pod's start, as phases with wall times: seen by the kubelet, admitted, volumes ready,
//! sandbox created, each image pulled, each container created and started, all running, Ready.
//! The sync worker and the runtime manager mark phases as they pass them; the kubelet API shows
//! the result (`/debug/pods/startup`), the log gets one line per pod when it is Ready, and the
//! two start histograms upstream has are observed when every container runs.
//!
//! The record is kept per pod UID until the pod goes, and never for more than
//! [`MAX_TRACKED`] pods: past that the oldest record is dropped.

mod report;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Pod, PodStatus};

pub use report::{PodStartupReport, summary_line};

/// More pods than a node runs (upstream's maxPods is 110 by default, 250 at most in practice)
/// plus those that just left.
pub const MAX_TRACKED: usize = 1024;

/// A step of a pod's start, in the order a start passes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Seen,
    Admitted,
    VolumesReady,
    SandboxCreated,
    /// Every regular container runs.
    Running,
    Ready,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Seen => "seen",
            Phase::Admitted => "admitted",
            Phase::VolumesReady => "volumesReady",
            Phase::SandboxCreated => "sandboxCreated",
            Phase::Running => "running",
            Phase::Ready => "ready",
        }
    }
}

/// One image a container of the pod needed.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageStep {
    pub container: String,
    pub image: String,
    /// When the pull began; `None` when the image was already present.
    pub pull_started: Option<SystemTime>,
    pub done: Option<SystemTime>,
}

/// One container's creation and start (the first time; restarts are not a start).
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerStep {
    pub name: String,
    pub init: bool,
    pub created: Option<SystemTime>,
    pub started: Option<SystemTime>,
}

#[derive(Clone, Debug)]
pub struct PodStartup {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub created: Option<SystemTime>,
    /// An API pod the kubelet saw before it ever ran (upstream's condition for the start
    /// histograms); static pods and pods already started before the kubelet are not counted.
    pub counted: bool,
    pub phases: Vec<(Phase, SystemTime)>,
    pub images: Vec<ImageStep>,
    pub containers: Vec<ContainerStep>,
}

impl PodStartup {
    fn at(&self, phase: Phase) -> Option<SystemTime> {
        self.phases
            .iter()
            .find(|(p, _)| *p == phase)
            .map(|(_, t)| *t)
    }

    fn mark(&mut self, phase: Phase, at: SystemTime) -> bool {
        if self.at(phase).is_some() {
            return false;
        }
        self.phases.push((phase, at));
        true
    }

    fn container(&mut self, name: &str, init: bool) -> &mut ContainerStep {
        if let Some(i) = self.containers.iter().position(|c| c.name == name) {
            return &mut self.containers[i];
        }
        self.containers.push(ContainerStep {
            name: name.to_string(),
            init,
            created: None,
            started: None,
        });
        self.containers.last_mut().expect("just pushed")
    }

    /// The time spent pulling, overlapping pulls counted once.
    pub fn pulling(&self) -> std::time::Duration {
        let mut spans: Vec<(SystemTime, SystemTime)> = self
            .images
            .iter()
            .filter_map(|i| Some((i.pull_started?, i.done?)))
            .collect();
        spans.sort();
        let mut total = std::time::Duration::ZERO;
        let mut current: Option<(SystemTime, SystemTime)> = None;
        for (s, e) in spans {
            current = match current {
                Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    total += ce.duration_since(cs).unwrap_or_default();
                    Some((s, e))
                }
                None => Some((s, e)),
            };
        }
        if let Some((cs, ce)) = current {
            total += ce.duration_since(cs).unwrap_or_default();
        }
        total
    }

    /// Seen to running: the whole start, and the start without image pulls (upstream's SLI),
    /// both measured from the pod's creation as upstream measures them.
    pub fn durations(&self) -> Option<(f64, f64)> {
        let running = self.at(Phase::Running)?;
        let from = self.created.or(self.at(Phase::Seen))?;
        let total = running.duration_since(from).unwrap_or_default();
        let sli = total.saturating_sub(self.pulling());
        Some((total.as_secs_f64(), sli.as_secs_f64()))
    }
}

#[derive(Default)]
pub struct Tracker {
    pods: Mutex<HashMap<String, PodStartup>>,
}

/// The kubelet's one tracker.
pub fn tracker() -> &'static Tracker {
    static T: OnceLock<Tracker> = OnceLock::new();
    T.get_or_init(Tracker::default)
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

fn parse_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<SystemTime> {
    let ts = t.0;
    let nanos = ts.as_nanosecond();
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    let sub = u32::try_from(nanos % 1_000_000_000).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::new(secs, sub))
}

impl Tracker {
    fn pods(&self) -> MutexGuard<'_, HashMap<String, PodStartup>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn with(&self, uid: &str, f: impl FnOnce(&mut PodStartup)) {
        if let Some(p) = self.pods().get_mut(uid) {
            f(p);
        }
    }

    /// The kubelet sees the pod for the first time (later calls change nothing).
    pub fn seen(&self, pod: &Pod) {
        self.seen_at(pod, SystemTime::now());
    }

    fn seen_at(&self, pod: &Pod, now: SystemTime) {
        let mut pods = self.pods();
        if pods.contains_key(uid(pod)) {
            return;
        }
        if pods.len() >= MAX_TRACKED {
            let oldest = pods
                .iter()
                .min_by_key(|(_, p)| p.phases.first().map(|(_, t)| *t))
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                pods.remove(&k);
            }
        }
        let meta = &pod.metadata;
        let started_before = pod.status.as_ref().is_some_and(|s| s.start_time.is_some());
        pods.insert(
            uid(pod).to_string(),
            PodStartup {
                namespace: meta.namespace.clone().unwrap_or_default(),
                name: meta.name.clone().unwrap_or_default(),
                uid: uid(pod).to_string(),
                created: meta.creation_timestamp.as_ref().and_then(parse_time),
                counted: !crate::sources::is_static_pod(pod) && !started_before,
                phases: vec![(Phase::Seen, now)],
                images: Vec::new(),
                containers: Vec::new(),
            },
        );
    }

    pub fn mark(&self, uid: &str, phase: Phase) {
        let now = SystemTime::now();
        self.with(uid, |p| {
            p.mark(phase, now);
        });
    }

    /// A pull really begins (the image was not present).
    pub fn pull_started(&self, uid: &str, container: &str, image: &str) {
        let now = SystemTime::now();
        self.with(uid, |p| {
            if p.at(Phase::Running).is_some() {
                return;
            }
            p.images.push(ImageStep {
                container: container.to_string(),
                image: image.to_string(),
                pull_started: Some(now),
                done: None,
            });
        });
    }

    /// The container's image is there, pulled (after [`Tracker::pull_started`]) or present.
    pub fn image_ready(&self, uid: &str, container: &str, image: &str) {
        let now = SystemTime::now();
        self.with(uid, |p| {
            if p.at(Phase::Running).is_some() {
                return;
            }
            match p
                .images
                .iter_mut()
                .find(|i| i.container == container && i.done.is_none())
            {
                Some(step) => step.done = Some(now),
                None => p.images.push(ImageStep {
                    container: container.to_string(),
                    image: image.to_string(),
                    pull_started: None,
                    done: Some(now),
                }),
            }
        });
    }

    pub fn container_created(&self, uid: &str, name: &str, init: bool) {
        let now = SystemTime::now();
        self.with(uid, |p| {
            let c = p.container(name, init);
            c.created.get_or_insert(now);
        });
    }

    pub fn container_started(&self, uid: &str, name: &str, init: bool) {
        let now = SystemTime::now();
        self.with(uid, |p| {
            let c = p.container(name, init);
            c.started.get_or_insert(now);
        });
    }

    /// Looks at a status the kubelet made for the pod: the first with every container running
    /// observes the start histograms, the first Ready logs the breakdown.
    pub fn observe_status(&self, pod: &Pod, status: &PodStatus) {
        let now = SystemTime::now();
        let mut observe = None;
        let mut log = None;
        self.with(uid(pod), |p| {
            if p.at(Phase::Ready).is_some() {
                return;
            }
            if all_running(pod, status) && p.mark(Phase::Running, now) && p.counted {
                observe = p.durations();
            }
            if is_ready(status) && p.at(Phase::Running).is_some() && p.mark(Phase::Ready, now) {
                log = Some(p.clone());
            }
        });
        if let Some((total, sli)) = observe {
            let m = crate::metrics::kubelet();
            m.pod_start_total_duration.observe(&[], total);
            m.pod_start_sli_duration.observe(&[], sli);
        }
        if let Some(p) = log {
            let (total, sli) = p.durations().unwrap_or_default();
            tracing::info!(
                pod = %format!("{}/{}", p.namespace, p.name),
                podStartSLOduration = sli,
                podStartE2EDuration = %format!("{total:.3}s"),
                phases = %summary_line(&p),
                "Observed pod startup duration"
            );
        }
    }

    /// The pod is gone: its record goes too.
    pub fn forget(&self, uid: &str) {
        self.pods().remove(uid);
    }

    /// The breakdown of the newest tracked pod with this name.
    pub fn report(&self, namespace: &str, name: &str) -> Option<PodStartupReport> {
        let pods = self.pods();
        pods.values()
            .filter(|p| p.namespace == namespace && p.name == name)
            .max_by_key(|p| p.phases.first().map(|(_, t)| *t))
            .map(PodStartupReport::from)
    }

    /// Every tracked pod's breakdown, oldest first.
    pub fn reports(&self) -> Vec<PodStartupReport> {
        let mut all: Vec<PodStartup> = self.pods().values().cloned().collect();
        all.sort_by_key(|p| p.phases.first().map(|(_, t)| *t));
        all.iter().map(PodStartupReport::from).collect()
    }
}

/// Every regular container is running and has started (upstream's hasPodStartedSLO).
fn all_running(pod: &Pod, status: &PodStatus) -> bool {
    let want = pod.spec.as_ref().map_or(0, |s| s.containers.len());
    let running = status.container_statuses.as_ref().map_or(0, |l| {
        l.iter()
            .filter(|c| {
                c.state
                    .as_ref()
                    .and_then(|s| s.running.as_ref())
                    .is_some_and(|r| r.started_at.is_some())
            })
            .count()
    });
    want > 0 && running >= want
}

fn is_ready(status: &PodStatus) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

#[cfg(test)]
mod tests;
