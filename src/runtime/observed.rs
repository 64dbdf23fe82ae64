//! What the runtime says about a pod: its sandboxes and containers, reduced to the facts the
//! kubelet decides on. Built from CRI list/status answers; never from the pod spec.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cri::api;
use crate::runtime::labels;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    #[default]
    Unknown,
}

impl ContainerState {
    pub fn from_cri(state: i32) -> Self {
        match api::ContainerState::try_from(state) {
            Ok(api::ContainerState::ContainerCreated) => Self::Created,
            Ok(api::ContainerState::ContainerRunning) => Self::Running,
            Ok(api::ContainerState::ContainerExited) => Self::Exited,
            _ => Self::Unknown,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SandboxInfo {
    pub id: String,
    pub attempt: u32,
    pub ready: bool,
    pub created_at: i64,
    /// Pod IPs, primary first; empty for host-network pods and before the network is up.
    pub ips: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerInfo {
    pub id: String,
    pub name: String,
    pub sandbox_id: String,
    pub attempt: u32,
    pub state: ContainerState,
    /// Our spec hash, if this kubelet created the container.
    pub hash: Option<u64>,
    /// Unix nanoseconds, 0 when not applicable.
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    /// The pod's grace period when this container was created (from its annotation).
    pub termination_grace: Option<i64>,
    pub reason: String,
    pub message: String,
    pub image: String,
    pub image_ref: String,
}

impl ContainerInfo {
    pub fn finished_at_time(&self) -> Option<SystemTime> {
        nanos_to_time(self.finished_at)
    }

    pub fn from_status(status: &api::ContainerStatus, sandbox_id: &str) -> Self {
        let meta = status.metadata.clone().unwrap_or_default();
        let labels_map = &status.labels;
        ContainerInfo {
            id: status.id.clone(),
            name: labels_map
                .get(labels::CONTAINER_NAME)
                .cloned()
                .unwrap_or(meta.name),
            sandbox_id: sandbox_id.to_string(),
            attempt: meta.attempt,
            state: ContainerState::from_cri(status.state),
            hash: labels::parse_hash(&status.annotations),
            created_at: status.created_at,
            started_at: status.started_at,
            finished_at: status.finished_at,
            exit_code: status.exit_code,
            termination_grace: status
                .annotations
                .get(labels::POD_TERMINATION_GRACE_PERIOD)
                .and_then(|g| g.parse().ok()),
            reason: status.reason.clone(),
            message: status.message.clone(),
            image: status
                .image
                .as_ref()
                .map(|i| i.image.clone())
                .unwrap_or_default(),
            image_ref: status.image_ref.clone(),
        }
    }
}

#[cfg(test)]
impl ContainerInfo {
    /// A container as the runtime lists it, for tests: ID `<name>-<attempt>` in sandbox
    /// `sb0`, started at 1 s and, once exited, finished at 2 s.
    pub fn fixture(name: &str, attempt: u32, state: ContainerState, exit_code: i32) -> Self {
        ContainerInfo {
            id: format!("{name}-{attempt}"),
            name: name.into(),
            sandbox_id: "sb0".into(),
            attempt,
            state,
            created_at: 1,
            started_at: 1_000_000_000,
            finished_at: if state == ContainerState::Exited {
                2_000_000_000
            } else {
                0
            },
            exit_code,
            image: "busybox".into(),
            image_ref: "sha256:1".into(),
            ..Default::default()
        }
    }
}

pub fn nanos_to_time(nanos: i64) -> Option<SystemTime> {
    (nanos > 0).then(|| UNIX_EPOCH + Duration::from_nanos(nanos as u64))
}

/// The runtime's view of one pod, newest sandbox and newest container attempts first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedPod {
    pub uid: String,
    /// Identity from the runtime's labels, so a pod the kubelet no longer knows can still be
    /// cleaned up by name.
    pub name: String,
    pub namespace: String,
    pub sandboxes: Vec<SandboxInfo>,
    pub containers: Vec<ContainerInfo>,
}

impl ObservedPod {
    pub fn newest_sandbox(&self) -> Option<&SandboxInfo> {
        self.sandboxes.first()
    }

    /// The newest attempt of the named container, if it ever existed.
    pub fn newest_container(&self, name: &str) -> Option<&ContainerInfo> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// The attempt before the newest one: the source of `lastState`.
    pub fn previous_container(&self, name: &str) -> Option<&ContainerInfo> {
        self.containers.iter().filter(|c| c.name == name).nth(1)
    }

    pub fn running_containers(&self) -> impl Iterator<Item = &ContainerInfo> {
        self.containers
            .iter()
            .filter(|c| matches!(c.state, ContainerState::Running | ContainerState::Unknown))
    }

    pub fn is_empty(&self) -> bool {
        self.sandboxes.is_empty() && self.containers.is_empty()
    }

    /// Newest first, so lookups by name find the current attempt.
    pub fn sort(&mut self) {
        self.sandboxes
            .sort_by_key(|s| std::cmp::Reverse((s.attempt, s.created_at)));
        self.containers
            .sort_by_key(|c| std::cmp::Reverse((c.attempt, c.created_at)));
    }
}
