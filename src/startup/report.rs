//! A pod's start as the kubelet API shows it (JSON) and as the log line sums it up.

use std::time::SystemTime;

use serde::Serialize;

use super::{Phase, PodStartup};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseReport {
    pub phase: &'static str,
    pub time: String,
    /// Seconds since the kubelet saw the pod.
    pub since_seen_seconds: f64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageReport {
    pub container: String,
    pub image: String,
    /// False when the image was already on the node.
    pub pulled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_started: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_seconds: Option<f64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerReport {
    pub name: String,
    pub init: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStartupReport {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    pub phases: Vec<PhaseReport>,
    pub images: Vec<ImageReport>,
    pub containers: Vec<ContainerReport>,
    /// Creation (or first sight, for pods without a creation time) to every container running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_seconds: Option<f64>,
    /// The same without the time spent pulling images (upstream's start SLI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sli_seconds: Option<f64>,
    pub image_pull_seconds: f64,
    /// Whether the pod counts in the start histograms (an API pod first seen before it ran).
    pub counted_in_metrics: bool,
}

fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|ts| ts.to_string())
        .unwrap_or_default()
}

fn secs_between(from: SystemTime, to: SystemTime) -> f64 {
    to.duration_since(from).unwrap_or_default().as_secs_f64()
}

impl From<&PodStartup> for PodStartupReport {
    fn from(p: &PodStartup) -> Self {
        let seen = p.at(Phase::Seen).unwrap_or(SystemTime::UNIX_EPOCH);
        let (total, sli) = match p.durations() {
            Some((t, s)) => (Some(t), Some(s)),
            None => (None, None),
        };
        let mut phases: Vec<&(Phase, SystemTime)> = p.phases.iter().collect();
        phases.sort_by_key(|(ph, t)| (*t, *ph));
        PodStartupReport {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
            creation_timestamp: p.created.map(rfc3339),
            phases: phases
                .into_iter()
                .map(|(ph, t)| PhaseReport {
                    phase: ph.name(),
                    time: rfc3339(*t),
                    since_seen_seconds: secs_between(seen, *t),
                })
                .collect(),
            images: p
                .images
                .iter()
                .map(|i| ImageReport {
                    container: i.container.clone(),
                    image: i.image.clone(),
                    pulled: i.pull_started.is_some(),
                    pull_started: i.pull_started.map(rfc3339),
                    ready: i.done.map(rfc3339),
                    pull_seconds: i.pull_started.zip(i.done).map(|(s, e)| secs_between(s, e)),
                })
                .collect(),
            containers: p
                .containers
                .iter()
                .map(|c| ContainerReport {
                    name: c.name.clone(),
                    init: c.init,
                    created: c.created.map(rfc3339),
                    started: c.started.map(rfc3339),
                })
                .collect(),
            total_seconds: total,
            sli_seconds: sli,
            image_pull_seconds: p.pulling().as_secs_f64(),
            counted_in_metrics: p.counted,
        }
    }
}

/// One line, in time order, each step with its offset from when the kubelet saw the pod:
/// `admitted +0.000s, volumesReady +0.004s, sandboxCreated +0.391s, pulled busybox for c in
/// 1.203s, c created +1.622s, c started +1.702s, running +1.803s, ready +1.803s`.
pub fn summary_line(p: &PodStartup) -> String {
    let Some(seen) = p.at(Phase::Seen) else {
        return String::new();
    };
    let off = |t: SystemTime| format!("+{:.3}s", secs_between(seen, t));
    let mut steps: Vec<(SystemTime, String)> = Vec::new();
    for (ph, t) in &p.phases {
        if *ph != Phase::Seen {
            steps.push((*t, format!("{} {}", ph.name(), off(*t))));
        }
    }
    for i in &p.images {
        if let (Some(s), Some(e)) = (i.pull_started, i.done) {
            steps.push((
                e,
                format!(
                    "pulled {} for {} in {:.3}s",
                    i.image,
                    i.container,
                    secs_between(s, e)
                ),
            ));
        }
    }
    for c in &p.containers {
        if let Some(t) = c.created {
            steps.push((t, format!("{} created {}", c.name, off(t))));
        }
        if let Some(t) = c.started {
            steps.push((t, format!("{} started {}", c.name, off(t))));
        }
    }
    // Stable: equal times keep the order above (phases, images, containers).
    steps.sort_by_key(|(t, _)| *t);
    steps
        .into_iter()
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(", ")
}
