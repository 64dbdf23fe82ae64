//! `status.ephemeralContainerStatuses`: the containers `kubectl debug` added, reported like
//! regular ones, but never ready and without `started` (no probes look at them), sorted by
//! name as upstream sorts them.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::container_status::container_status;
use super::generate::PodStatusInput;
use crate::runtime::ephemeral;

/// The status the API already shows for `name`, kept when it says the container ended and the
/// runtime no longer has it: an ephemeral container runs once, and its end stays visible.
fn kept_terminated(pod: &Pod, name: &str) -> Option<ContainerStatus> {
    pod.status
        .as_ref()?
        .ephemeral_container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == name)
        .filter(|s| s.state.as_ref().is_some_and(|st| st.terminated.is_some()))
        .cloned()
}

pub fn ephemeral_statuses(input: &PodStatusInput<'_>) -> Option<Vec<ContainerStatus>> {
    let pod = input.pod;
    let specs = ephemeral::specs(pod);
    if specs.is_empty() {
        return None;
    }
    let has_init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|i| !i.is_empty());
    // Upstream's default waiting reason for any container list of a pod with init containers.
    let default_waiting = if has_init {
        "PodInitializing"
    } else {
        "ContainerCreating"
    };
    let mut statuses: Vec<ContainerStatus> = specs
        .iter()
        .map(|ec| {
            let in_runtime = input.observed.newest_container(&ec.name).is_some();
            if !in_runtime
                && !input.waiting.contains_key(&ec.name)
                && let Some(kept) = kept_terminated(pod, &ec.name)
            {
                return kept;
            }
            let mut s =
                container_status(&ephemeral::as_container(ec), input, default_waiting, false);
            // No probes and no resources of their own (API validation forbids both).
            s.ready = false;
            s.started = None;
            s.allocated_resources = None;
            s.resources = None;
            s
        })
        .collect();
    statuses.sort_by(|a, b| a.name.cmp(&b.name));
    Some(statuses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Waiting;
    use crate::runtime::observed::{ContainerInfo, ContainerState, ObservedPod, SandboxInfo};
    use crate::status::generate_pod_status;
    use k8s_openapi::api::core::v1::{
        Container, ContainerState as ApiState, ContainerStateTerminated, EphemeralContainer,
        PodSpec, PodStatus,
    };
    use std::collections::HashMap;
    use std::time::{Duration, SystemTime};

    fn pod(init: bool) -> Pod {
        let c = |n: &str| Container {
            name: n.into(),
            image: Some("busybox".into()),
            ..Default::default()
        };
        let ec = |n: &str| EphemeralContainer {
            name: n.into(),
            image: Some("busybox:1.36".into()),
            target_container_name: Some("app".into()),
            ..Default::default()
        };
        Pod {
            spec: Some(PodSpec {
                containers: vec![c("app")],
                init_containers: init.then(|| vec![c("init")]),
                ephemeral_containers: Some(vec![ec("zz"), ec("dbg")]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn info(name: &str, state: ContainerState, code: i32) -> ContainerInfo {
        ContainerInfo {
            id: format!("{name}-id"),
            sandbox_id: "s".into(),
            image: "busybox:1.36".into(),
            ..ContainerInfo::fixture(name, 0, state, code)
        }
    }

    fn status(pod: &Pod, containers: Vec<ContainerInfo>, waiting: &[(&str, &str)]) -> PodStatus {
        let observed = ObservedPod {
            sandboxes: vec![SandboxInfo {
                id: "s".into(),
                attempt: 0,
                ready: true,
                created_at: 1,
                ips: vec![],
            }],
            containers,
            ..Default::default()
        };
        let waiting: HashMap<String, Waiting> = waiting
            .iter()
            .map(|(n, r)| {
                (
                    n.to_string(),
                    Waiting {
                        reason: r.to_string(),
                        message: "unable to find target container app".into(),
                    },
                )
            })
            .collect();
        generate_pod_status(&PodStatusInput {
            pod,
            observed: &observed,
            waiting: &waiting,
            start_time: SystemTime::UNIX_EPOCH,
            node_ip: "192.0.2.1",
            runtime_name: "containerd",
            now: SystemTime::UNIX_EPOCH + Duration::from_secs(5),
            failure: None,
            probes: &HashMap::new(),
            resize: Default::default(),
        })
    }

    fn state(s: &ContainerStatus) -> ApiState {
        s.state.clone().unwrap()
    }

    #[test]
    fn running_exited_and_pending_debug_containers() {
        let p = pod(false);
        let s = status(
            &p,
            vec![
                info("app", ContainerState::Running, 0),
                info("dbg", ContainerState::Running, 0),
            ],
            &[],
        );
        let eph = s.ephemeral_container_statuses.clone().unwrap();
        let names: Vec<&str> = eph.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["dbg", "zz"], "sorted by name");
        let dbg = &eph[0];
        assert!(state(dbg).running.is_some());
        assert_eq!(dbg.container_id.as_deref(), Some("containerd://dbg-id"));
        assert_eq!(dbg.image, "busybox:1.36");
        assert_eq!(dbg.image_id, "sha256:1");
        assert_eq!(dbg.restart_count, 0);
        assert!(!dbg.ready && dbg.started.is_none());
        assert_eq!(
            state(&eph[1]).waiting.unwrap().reason.as_deref(),
            Some("ContainerCreating")
        );
        // They count for neither the phase nor readiness.
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.container_statuses.unwrap().len(), 1);
        let ready = s.conditions.unwrap();
        let ready = ready.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");

        let s = status(
            &p,
            vec![
                info("app", ContainerState::Running, 0),
                info("dbg", ContainerState::Exited, 3),
            ],
            &[("zz", "CreateContainerConfigError")],
        );
        let eph = s.ephemeral_container_statuses.unwrap();
        let t = state(&eph[0]).terminated.unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
        let w = state(&eph[1]).waiting.unwrap();
        assert_eq!(w.reason.as_deref(), Some("CreateContainerConfigError"));
        assert_eq!(
            w.message.as_deref(),
            Some("unable to find target container app")
        );
    }

    #[test]
    fn a_pod_with_init_containers_shows_pod_initializing() {
        let s = status(
            &pod(true),
            vec![info("init", ContainerState::Running, 0)],
            &[],
        );
        let eph = s.ephemeral_container_statuses.unwrap();
        assert_eq!(
            state(&eph[0]).waiting.unwrap().reason.as_deref(),
            Some("PodInitializing")
        );
    }

    #[test]
    fn a_terminated_status_stays_when_the_runtime_forgot_the_container() {
        let mut p = pod(false);
        let ended = ContainerStatus {
            name: "dbg".into(),
            container_id: Some("containerd://gone".into()),
            image: "busybox:1.36".into(),
            state: Some(ApiState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 0,
                    reason: Some("Completed".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        p.status = Some(PodStatus {
            ephemeral_container_statuses: Some(vec![ended.clone()]),
            ..Default::default()
        });
        let s = status(&p, vec![info("app", ContainerState::Running, 0)], &[]);
        assert_eq!(s.ephemeral_container_statuses.unwrap()[0], ended);
    }

    #[test]
    fn no_list_without_ephemeral_containers() {
        let mut p = pod(false);
        p.spec.as_mut().unwrap().ephemeral_containers = None;
        assert!(
            status(&p, vec![], &[])
                .ephemeral_container_statuses
                .is_none()
        );
    }
}
