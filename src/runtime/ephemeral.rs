//! Ephemeral containers: what `kubectl debug` adds to a running pod through the
//! `pods/ephemeralcontainers` subresource. They run in the pod's existing sandbox, each at most
//! once (never restarted, whatever the pod's restart policy), optionally in the process
//! namespace of a target container. Everything else about them (image, env, mounts, security
//! context, logs) is what a regular container gets, so the executor starts them as containers.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};

use crate::cri::{RuntimeClient, api};
use crate::runtime::actions::{ContainerKind, PodActions, StartAction};
use crate::runtime::labels;
use crate::runtime::observed::ObservedPod;

pub fn specs(pod: &Pod) -> &[EphemeralContainer] {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or(&[])
}

/// The ephemeral container as a container spec. API validation keeps the fields a debug
/// container may not have (ports, probes, resources, lifecycle) empty; they are carried over
/// anyway so what the runtime gets is exactly what the API holds.
pub fn as_container(ec: &EphemeralContainer) -> Container {
    Container {
        name: ec.name.clone(),
        image: ec.image.clone(),
        image_pull_policy: ec.image_pull_policy.clone(),
        command: ec.command.clone(),
        args: ec.args.clone(),
        working_dir: ec.working_dir.clone(),
        env: ec.env.clone(),
        env_from: ec.env_from.clone(),
        volume_mounts: ec.volume_mounts.clone(),
        volume_devices: ec.volume_devices.clone(),
        security_context: ec.security_context.clone(),
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        tty: ec.tty,
        termination_message_path: ec.termination_message_path.clone(),
        termination_message_policy: ec.termination_message_policy.clone(),
        ports: ec.ports.clone(),
        resources: ec.resources.clone(),
        resize_policy: ec.resize_policy.clone(),
        lifecycle: ec.lifecycle.clone(),
        liveness_probe: ec.liveness_probe.clone(),
        readiness_probe: ec.readiness_probe.clone(),
        startup_probe: ec.startup_probe.clone(),
        restart_policy: ec.restart_policy.clone(),
        restart_policy_rules: ec.restart_policy_rules.clone(),
    }
}

/// The ephemeral container at `index` of the pod's spec, as a container spec.
pub fn container_at(pod: &Pod, index: usize) -> Option<Container> {
    specs(pod).get(index).map(as_container)
}

/// The name of the container whose process namespace the ephemeral container at `index` joins.
pub fn target_name(pod: &Pod, index: usize) -> Option<&str> {
    specs(pod)
        .get(index)
        .and_then(|ec| ec.target_container_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Whether the API status already shows the container as having run: then it ran once, even
/// if the runtime no longer has it (removed by garbage collection, or before a kubelet
/// restart), and it must not run again.
fn ran_before(pod: &Pod, name: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.ephemeral_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter(|s| s.name == name)
        .any(|s| {
            s.container_id.as_deref().is_some_and(|id| !id.is_empty())
                || s.state.as_ref().is_some_and(|st| st.terminated.is_some())
        })
}

/// Adds a start for every ephemeral container that never ran. Only into the pod's current,
/// kept sandbox: a pod getting a new sandbox, being stopped, finished or deleted starts none
/// (its sandbox is the one thing an ephemeral container must not create). Initialization
/// need not be complete, so a pod stuck in an init container can still be debugged.
pub fn add_starts(pod: &Pod, observed: &ObservedPod, actions: &mut PodActions) {
    let sandbox_kept = actions.sandbox_id.is_some()
        && !actions.create_sandbox
        && !actions.kill_pod
        && !actions.pod_finished;
    if !sandbox_kept || pod.metadata.deletion_timestamp.is_some() {
        return;
    }
    for (index, ec) in specs(pod).iter().enumerate() {
        // Whatever state it is in (running, exited, created but failed to start), one that
        // exists has had its one start.
        if observed.newest_container(&ec.name).is_some() || ran_before(pod, &ec.name) {
            continue;
        }
        actions.start.push(StartAction {
            kind: ContainerKind::Ephemeral,
            index,
            restart_count: 0,
            backoff_key: None,
        });
    }
}

/// Points the container's pid namespace at the target container's, as upstream does: only
/// when the container would otherwise get a pid namespace of its own. A pod that shares one
/// namespace among its containers (shareProcessNamespace) or uses the host's keeps that.
pub fn target_namespace(options: &mut api::NamespaceOption, target_id: &str) {
    if options.pid == api::NamespaceMode::Container as i32 {
        options.pid = api::NamespaceMode::Target as i32;
        options.target_id = target_id.to_string();
    }
}

/// The running container named `name` among the runtime's containers.
pub fn running_container<'a>(containers: &'a [api::Container], name: &str) -> Option<&'a str> {
    containers
        .iter()
        .filter(|c| c.state == api::ContainerState::ContainerRunning as i32)
        .filter(|c| {
            c.labels.get(labels::CONTAINER_NAME).map(String::as_str) == Some(name)
                || c.metadata.as_ref().is_some_and(|m| m.name == name)
        })
        .max_by_key(|c| c.created_at)
        .map(|c| c.id.as_str())
}

/// Why an ephemeral container's target cannot be found, in upstream's words.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("unable to find target container {target}: {source}")]
    List {
        target: String,
        #[source]
        source: crate::cri::CriError,
    },
    #[error("unable to find target container {0}")]
    NotRunning(String),
}

/// The ID of the running target container in the sandbox, asked of the runtime at start time
/// so it is the container running now. The error is the start failure's message (upstream's).
pub async fn resolve_target(
    cri: &RuntimeClient,
    pod: &Pod,
    sandbox_id: &str,
    target: &str,
) -> Result<String, TargetError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let filter = api::ContainerFilter {
        pod_sandbox_id: sandbox_id.to_string(),
        label_selector: HashMap::from([(labels::POD_UID.to_string(), uid)]),
        ..Default::default()
    };
    let listed = cri
        .list_containers(Some(filter))
        .await
        .map_err(|source| TargetError::List {
            target: target.to_string(),
            source,
        })?;
    running_container(&listed, target)
        .map(str::to_string)
        .ok_or_else(|| TargetError::NotRunning(target.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::actions::compute_pod_actions;
    use crate::runtime::backoff::Backoff;
    use crate::runtime::observed::{ContainerInfo, ContainerState, SandboxInfo};
    use k8s_openapi::api::core::v1::{
        ContainerState as ApiState, ContainerStateTerminated, ContainerStatus, PodSpec, PodStatus,
        SecurityContext, VolumeMount,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use std::time::{Duration, SystemTime};

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)
    }

    fn debug(name: &str, target: Option<&str>) -> EphemeralContainer {
        EphemeralContainer {
            name: name.into(),
            image: Some("busybox".into()),
            target_container_name: target.map(str::to_string),
            ..Default::default()
        }
    }

    fn pod(policy: &str, init: &[&str], ephemeral: Vec<EphemeralContainer>) -> Pod {
        let c = |n: &&str| Container {
            name: n.to_string(),
            image: Some("busybox".into()),
            ..Default::default()
        };
        Pod {
            metadata: ObjectMeta {
                uid: Some("uid1".into()),
                name: Some("p".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                init_containers: Some(init.iter().map(c).collect()),
                containers: vec![c(&"app")],
                ephemeral_containers: Some(ephemeral),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn info(name: &str, state: ContainerState, code: i32) -> ContainerInfo {
        ContainerInfo {
            id: format!("{name}-id"),
            ..ContainerInfo::fixture(name, 0, state, code)
        }
    }

    fn observed(ready: bool, containers: Vec<ContainerInfo>) -> ObservedPod {
        ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![SandboxInfo {
                id: "sb0".into(),
                attempt: 0,
                ready,
                created_at: 1,
                ips: vec![],
            }],
            containers,
            ..Default::default()
        }
    }

    fn ephemeral_starts(a: &PodActions) -> Vec<usize> {
        a.start
            .iter()
            .filter(|s| s.kind == ContainerKind::Ephemeral)
            .map(|s| s.index)
            .collect()
    }

    fn actions(p: &Pod, o: &ObservedPod) -> PodActions {
        compute_pod_actions(p, o, &Backoff::default(), &HashMap::new(), now())
    }

    #[test]
    fn new_ephemeral_container_starts_in_the_running_sandbox_once() {
        let p = pod("Always", &[], vec![debug("dbg", Some("app"))]);
        let mut o = observed(true, vec![info("app", ContainerState::Running, 0)]);
        let a = actions(&p, &o);
        assert_eq!(ephemeral_starts(&a), vec![0]);
        assert!(!a.create_sandbox && a.sandbox_id.as_deref() == Some("sb0"));
        assert_eq!(a.start.len(), 1, "the app is left alone: {a:?}");
        assert_eq!(a.start[0].restart_count, 0);
        assert_eq!(a.start[0].backoff_key, None);

        // Running, then exited with success or failure: never started again, whatever the
        // pod's restart policy says.
        o.containers.push(info("dbg", ContainerState::Running, 0));
        assert!(ephemeral_starts(&actions(&p, &o)).is_empty());
        for code in [0, 1, 137] {
            o.containers[1] = info("dbg", ContainerState::Exited, code);
            for policy in ["Always", "OnFailure", "Never"] {
                let p = pod(policy, &[], vec![debug("dbg", None)]);
                let a = actions(&p, &o);
                assert!(
                    a.start.is_empty() && a.kill.is_empty(),
                    "{policy} {code}: {a:?}"
                );
            }
        }
        // Created but never started: it had its start too.
        o.containers[1] = info("dbg", ContainerState::Created, 0);
        assert!(ephemeral_starts(&actions(&p, &o)).is_empty());
    }

    #[test]
    fn one_that_ran_before_and_is_gone_from_the_runtime_is_not_rerun() {
        let mut p = pod("Always", &[], vec![debug("dbg", None), debug("new", None)]);
        p.status = Some(PodStatus {
            ephemeral_container_statuses: Some(vec![ContainerStatus {
                name: "dbg".into(),
                container_id: Some("containerd://gone".into()),
                state: Some(ApiState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 0,
                        finished_at: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let o = observed(true, vec![info("app", ContainerState::Running, 0)]);
        assert_eq!(ephemeral_starts(&actions(&p, &o)), vec![1]);
    }

    #[test]
    fn no_start_without_the_running_sandbox() {
        let p = pod("Always", &[], vec![debug("dbg", None)]);
        // The sandbox is gone: the pod gets a new one and its containers, but an ephemeral
        // container waits for the next sync in the running sandbox.
        let dead = observed(false, vec![info("app", ContainerState::Exited, 1)]);
        let a = actions(&p, &dead);
        assert!(a.create_sandbox && ephemeral_starts(&a).is_empty(), "{a:?}");
        // A new pod (no sandbox yet) neither.
        let a = actions(&p, &ObservedPod::default());
        assert!(a.create_sandbox && ephemeral_starts(&a).is_empty(), "{a:?}");
        // A finished pod neither.
        let never = pod("Never", &[], vec![debug("dbg", None)]);
        let done = observed(true, vec![info("app", ContainerState::Exited, 0)]);
        let a = actions(&never, &done);
        assert!(a.pod_finished && a.start.is_empty(), "{a:?}");
        // A pod being deleted neither.
        let mut deleting = p.clone();
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let running = observed(true, vec![info("app", ContainerState::Running, 0)]);
        assert!(actions(&deleting, &running).start.is_empty());
    }

    #[test]
    fn starts_while_an_init_container_still_runs() {
        let p = pod("Always", &["init"], vec![debug("dbg", Some("init"))]);
        let o = observed(true, vec![info("init", ContainerState::Running, 0)]);
        let a = actions(&p, &o);
        assert_eq!(ephemeral_starts(&a), vec![0]);
        assert_eq!(a.start.len(), 1, "no regular container yet: {a:?}");
    }

    #[test]
    fn ephemeral_containers_do_not_keep_a_finished_pod_alive() {
        let p = pod("Never", &[], vec![debug("dbg", None)]);
        let o = observed(
            true,
            vec![
                info("app", ContainerState::Exited, 0),
                info("dbg", ContainerState::Running, 0),
            ],
        );
        assert!(actions(&p, &o).pod_finished);
    }

    #[test]
    fn targets_join_the_target_pid_namespace_unless_the_pod_shares_one() {
        let mut own = api::NamespaceOption {
            pid: api::NamespaceMode::Container as i32,
            ..Default::default()
        };
        target_namespace(&mut own, "abc");
        assert_eq!(own.pid, api::NamespaceMode::Target as i32);
        assert_eq!(own.target_id, "abc");
        for mode in [api::NamespaceMode::Pod, api::NamespaceMode::Node] {
            let mut shared = api::NamespaceOption {
                pid: mode as i32,
                ..Default::default()
            };
            target_namespace(&mut shared, "abc");
            assert_eq!(shared.pid, mode as i32);
            assert!(shared.target_id.is_empty());
        }
    }

    #[test]
    fn the_target_is_the_running_container_of_that_name() {
        let c = |id: &str, name: &str, state: api::ContainerState, created: i64| api::Container {
            id: id.into(),
            state: state as i32,
            created_at: created,
            labels: HashMap::from([(labels::CONTAINER_NAME.to_string(), name.to_string())]),
            ..Default::default()
        };
        let listed = vec![
            c("old", "app", api::ContainerState::ContainerExited, 1),
            c("other", "side", api::ContainerState::ContainerRunning, 3),
            c("cur", "app", api::ContainerState::ContainerRunning, 2),
        ];
        assert_eq!(running_container(&listed, "app"), Some("cur"));
        assert_eq!(running_container(&listed[..1], "app"), None);
        assert_eq!(running_container(&listed, "nope"), None);
    }

    #[test]
    fn the_container_spec_carries_the_common_fields() {
        let ec = EphemeralContainer {
            name: "dbg".into(),
            image: Some("busybox:1.36".into()),
            command: Some(vec!["sh".into()]),
            stdin: Some(true),
            tty: Some(true),
            volume_mounts: Some(vec![VolumeMount {
                name: "data".into(),
                mount_path: "/data".into(),
                ..Default::default()
            }]),
            security_context: Some(SecurityContext {
                run_as_user: Some(1000),
                ..Default::default()
            }),
            target_container_name: Some("app".into()),
            ..Default::default()
        };
        let c = as_container(&ec);
        assert_eq!(c.name, "dbg");
        assert_eq!(c.image.as_deref(), Some("busybox:1.36"));
        assert_eq!(c.command, ec.command);
        assert_eq!((c.stdin, c.tty), (Some(true), Some(true)));
        assert_eq!(c.volume_mounts, ec.volume_mounts);
        assert_eq!(c.security_context, ec.security_context);
        let p = pod("Always", &[], vec![debug("a", None), ec]);
        assert_eq!(target_name(&p, 1), Some("app"));
        assert_eq!(target_name(&p, 0), None);
        assert_eq!(container_at(&p, 1).map(|c| c.name).as_deref(), Some("dbg"));
        assert!(container_at(&p, 2).is_none());
    }
}
