//! What each relist adds to /metrics: its duration, the interval since the previous one, the
//! last-seen time, and the running pod and container gauges from what it saw.

use std::collections::HashMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::cri::api;
use crate::runtime::labels;

/// After a relist that started at `started`; `previous` is when the relist before it started
/// (None for the first), which the PLEG keeps.
pub fn record_relist(
    started: Instant,
    previous: Option<Instant>,
    sandboxes: &[api::PodSandbox],
    containers: &[api::Container],
) {
    let m = crate::metrics::kubelet();
    if let Some(prev) = previous {
        m.pleg_relist_interval
            .observe(&[], started.saturating_duration_since(prev).as_secs_f64());
    }
    m.pleg_relist_duration
        .observe(&[], started.elapsed().as_secs_f64());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    m.pleg_last_seen.set(&[], now);

    let (pods, states) = running_counts(sandboxes, containers);
    m.running_pods.set(&[], pods as f64);
    for (state, n) in states {
        m.running_containers.set(&[state], n as f64);
    }
}

const CONTAINER_STATES: [&str; 4] = ["created", "running", "exited", "unknown"];

fn container_state(state: i32) -> &'static str {
    match api::ContainerState::try_from(state) {
        Ok(api::ContainerState::ContainerCreated) => "created",
        Ok(api::ContainerState::ContainerRunning) => "running",
        Ok(api::ContainerState::ContainerExited) => "exited",
        _ => "unknown",
    }
}

/// Pods with a ready sandbox, and containers per state, among the kubelet's own objects
/// (recognised by their pod UID label).
pub fn running_counts(
    sandboxes: &[api::PodSandbox],
    containers: &[api::Container],
) -> (usize, [(&'static str, usize); 4]) {
    let ours = |l: &HashMap<String, String>| l.contains_key(labels::POD_UID);
    let ready = api::PodSandboxState::SandboxReady as i32;
    let mut pods: Vec<&str> = sandboxes
        .iter()
        .filter(|s| s.state == ready)
        .filter_map(|s| s.labels.get(labels::POD_UID).map(String::as_str))
        .collect();
    pods.sort_unstable();
    pods.dedup();
    let states = CONTAINER_STATES.map(|state| {
        let n = containers
            .iter()
            .filter(|c| ours(&c.labels) && container_state(c.state) == state)
            .count();
        (state, n)
    });
    (pods.len(), states)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::kubelet;

    fn labelled(uid: &str) -> HashMap<String, String> {
        HashMap::from([(labels::POD_UID.to_string(), uid.to_string())])
    }

    #[test]
    fn relist_sets_running_gauges_and_timing() {
        let sandboxes = vec![
            api::PodSandbox {
                id: "s1".into(),
                state: api::PodSandboxState::SandboxReady as i32,
                labels: labelled("a"),
                ..Default::default()
            },
            api::PodSandbox {
                id: "s2".into(),
                state: api::PodSandboxState::SandboxNotready as i32,
                labels: labelled("b"),
                ..Default::default()
            },
            // Not the kubelet's: ignored.
            api::PodSandbox {
                id: "s3".into(),
                state: api::PodSandboxState::SandboxReady as i32,
                ..Default::default()
            },
        ];
        let ctr = |state: api::ContainerState| api::Container {
            state: state as i32,
            labels: labelled("a"),
            ..Default::default()
        };
        let containers = vec![
            ctr(api::ContainerState::ContainerRunning),
            ctr(api::ContainerState::ContainerRunning),
            ctr(api::ContainerState::ContainerExited),
        ];
        let m = kubelet();
        let before = m.pleg_relist_duration.count(&[]);
        let first = Instant::now();
        record_relist(first, None, &sandboxes, &containers);
        record_relist(Instant::now(), Some(first), &sandboxes, &containers);
        assert!(m.pleg_relist_duration.count(&[]) >= before + 2);
        assert!(m.pleg_relist_interval.count(&[]) >= 1);
        assert!(m.running_containers.get(&["unknown"]).is_some());
        let (pods, states) = running_counts(&sandboxes, &containers);
        assert_eq!(pods, 1);
        assert_eq!(
            states,
            [
                ("created", 0),
                ("running", 2),
                ("exited", 1),
                ("unknown", 0)
            ]
        );
        assert!(m.pleg_last_seen.get(&[]).unwrap_or(0.0) > 1.0e9);
    }
}
