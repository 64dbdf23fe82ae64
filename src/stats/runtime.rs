//! What the runtime says about pods and containers for one collection: the live sandboxes and
//! containers (terminated ones left out the way upstream does), their CRI stats, and the
//! sandbox stats when the runtime implements ListPodSandboxStats.

use std::collections::HashMap;

use crate::cri::api;

#[derive(Clone, Debug, Default)]
pub struct RuntimeView {
    pub sandboxes: Vec<api::PodSandbox>,
    pub containers: Vec<api::Container>,
    /// ListContainerStats by container ID.
    pub stats: HashMap<String, api::ContainerStats>,
    /// ListPodSandboxStats by sandbox ID; empty when the runtime does not implement it.
    pub sandbox_stats: HashMap<String, api::PodSandboxStats>,
}

fn sandbox_ready(s: &api::PodSandbox) -> bool {
    s.state == api::PodSandboxState::SandboxReady as i32
}

fn running(c: &api::Container) -> bool {
    c.state == api::ContainerState::ContainerRunning as i32
}

/// Per pod UID, the ready sandboxes, or else only the newest one (a pod between sandboxes
/// still has stats to show).
pub fn live_sandboxes(all: Vec<api::PodSandbox>) -> Vec<api::PodSandbox> {
    let mut by_uid: HashMap<String, Vec<api::PodSandbox>> = HashMap::new();
    for s in all {
        let uid = s
            .metadata
            .as_ref()
            .map(|m| m.uid.clone())
            .unwrap_or_default();
        by_uid.entry(uid).or_default().push(s);
    }
    let mut out = Vec::new();
    for (_, mut group) in by_uid {
        if group.iter().any(sandbox_ready) {
            out.extend(group.into_iter().filter(sandbox_ready));
        } else if let Some(newest) = group.iter().map(|s| s.created_at).max() {
            group.retain(|s| s.created_at == newest);
            out.extend(group.into_iter().take(1));
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// Per sandbox and container name, the running containers, or else only the newest instance
/// (so a crash-looping container still shows its last run).
pub fn live_containers(all: Vec<api::Container>) -> Vec<api::Container> {
    let mut groups: HashMap<(String, String), Vec<api::Container>> = HashMap::new();
    for c in all {
        let name = c
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        groups
            .entry((c.pod_sandbox_id.clone(), name))
            .or_default()
            .push(c);
    }
    let mut out = Vec::new();
    for (_, mut group) in groups {
        if group.iter().any(running) {
            out.extend(group.into_iter().filter(running));
        } else if let Some(newest) = group.iter().map(|c| c.created_at).max() {
            group.retain(|c| c.created_at == newest);
            out.extend(group.into_iter().take(1));
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// The pid in containerd's verbose sandbox info (`info` → JSON → `pid`).
pub fn sandbox_pid(info: &HashMap<String, String>) -> Option<i32> {
    let v: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    let pid = i32::try_from(v.get("pid")?.as_i64()?).ok()?;
    (pid > 0).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb(id: &str, uid: &str, ready: bool, created: i64) -> api::PodSandbox {
        api::PodSandbox {
            id: id.into(),
            metadata: Some(api::PodSandboxMetadata {
                uid: uid.into(),
                ..Default::default()
            }),
            state: if ready {
                api::PodSandboxState::SandboxReady
            } else {
                api::PodSandboxState::SandboxNotready
            } as i32,
            created_at: created,
            ..Default::default()
        }
    }

    fn ctr(
        id: &str,
        sandbox: &str,
        name: &str,
        state: api::ContainerState,
        created: i64,
    ) -> api::Container {
        api::Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            metadata: Some(api::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            state: state as i32,
            created_at: created,
            ..Default::default()
        }
    }

    #[test]
    fn ready_sandboxes_win_else_the_newest() {
        let kept = live_sandboxes(vec![
            sb("a1", "a", false, 1),
            sb("a2", "a", true, 2),
            sb("b1", "b", false, 1),
            sb("b2", "b", false, 5),
        ]);
        let ids: Vec<&str> = kept.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, vec!["a2", "b2"]);
    }

    #[test]
    fn running_containers_win_else_the_newest() {
        use api::ContainerState::*;
        let kept = live_containers(vec![
            ctr("c1", "s", "app", ContainerExited, 1),
            ctr("c2", "s", "app", ContainerRunning, 2),
            ctr("c3", "s", "init", ContainerExited, 1),
            ctr("c4", "s", "init", ContainerExited, 3),
        ]);
        let ids: Vec<&str> = kept.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, vec!["c2", "c4"]);
    }

    #[test]
    fn pid_from_verbose_info() {
        let info = HashMap::from([(
            "info".to_string(),
            r#"{"pid": 4242, "processStatus": "running"}"#.to_string(),
        )]);
        assert_eq!(sandbox_pid(&info), Some(4242));
        let zero = HashMap::from([("info".to_string(), r#"{"pid": 0}"#.to_string())]);
        assert_eq!(sandbox_pid(&zero), None);
        assert_eq!(sandbox_pid(&HashMap::new()), None);
    }
}
