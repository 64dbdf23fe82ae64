//! Builds the v1 PodStatus upstream would report for a pod.

use std::collections::HashMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{ContainerStatus, HostIP, Pod, PodIP, PodStatus};

use super::conditions::{condition, readiness_gates_unmet, regular_started};
use super::container_status::{container_status, time};
use super::phase::{init_complete, pod_phase};
use crate::pod::is_sidecar;
use crate::pod::qos::qos_class;
use crate::probe::Verdicts;
use crate::runtime::Waiting;
use crate::runtime::actions::RestartPolicy;
use crate::runtime::observed::ObservedPod;

pub struct PodStatusInput<'a> {
    pub pod: &'a Pod,
    pub observed: &'a ObservedPod,
    pub waiting: &'a HashMap<String, Waiting>,
    pub start_time: SystemTime,
    pub node_ip: &'a str,
    /// The runtime's name, for container IDs like `containerd://<id>`.
    pub runtime_name: &'a str,
    pub now: SystemTime,
    /// Set when the kubelet itself failed the pod (its active deadline passed, say).
    pub failure: Option<&'a PodFailure>,
    /// The probes' verdicts, by container ID.
    pub probes: &'a HashMap<String, Verdicts>,
    /// In-place resize: pending, in progress, and what the running containers got.
    pub resize: super::ResizeView<'a>,
}

/// Why the kubelet failed a pod: the pod's phase is Failed with this reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFailure {
    pub reason: String,
    pub message: String,
    /// The kubelet ended the pod to protect the node (pressure eviction, node shutdown):
    /// the status gets upstream's `DisruptionTarget` condition with the message.
    pub disruption: bool,
}

pub fn generate_pod_status(input: &PodStatusInput<'_>) -> PodStatus {
    let pod = input.pod;
    let spec = pod.spec.clone().unwrap_or_default();
    let policy = RestartPolicy::of(pod);
    let init_specs = spec.init_containers.clone().unwrap_or_default();

    let init_statuses: Vec<ContainerStatus> = init_specs
        .iter()
        .map(|c| container_status(c, input, "PodInitializing", true))
        .collect();
    let init_done = init_specs
        .iter()
        .zip(&init_statuses)
        .all(|(c, s)| init_complete(c, s));
    let default_waiting = if init_done {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| container_status(c, input, default_waiting, false))
        .collect();
    let phase = match input.failure {
        Some(_) => "Failed",
        None => pod_phase(policy, &init_specs, &init_statuses, &statuses),
    };

    let now = time(input.now);
    // Sidecars count towards readiness, listed before the app containers as upstream does.
    let sidecar_statuses = init_specs
        .iter()
        .zip(&init_statuses)
        .filter(|(c, _)| is_sidecar(c))
        .map(|(_, s)| s);
    let unready: Vec<&str> = sidecar_statuses
        .chain(&statuses)
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let incomplete: Vec<&str> = init_specs
        .iter()
        .zip(&init_statuses)
        .filter(|(c, s)| !init_complete(c, s))
        .map(|(_, s)| s.name.as_str())
        .collect();
    let sandbox_ready = input.observed.newest_sandbox().is_some_and(|s| s.ready);
    // Upstream's rules: a terminal pod is never ready (reason PodCompleted or PodFailed, no
    // message); otherwise readiness lists the unready containers.
    let (ready, ready_reason, ready_msg) = match phase {
        "Succeeded" => (false, Some("PodCompleted"), None),
        "Failed" => (false, Some("PodFailed"), None),
        _ if unready.is_empty() => (true, None, None),
        _ => (
            false,
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        ),
    };
    let (initialized, init_reason, init_msg) = if phase == "Succeeded" && !init_specs.is_empty() {
        (true, Some("PodCompleted"), None)
    } else if init_done || regular_started(&statuses) {
        (true, None, None)
    } else {
        (
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            )),
        )
    };
    // Readiness gates hold Ready (not ContainersReady) back until the conditions other
    // writers set on the pod say True.
    let gated = if ready {
        readiness_gates_unmet(pod)
    } else {
        None
    };
    let (pod_ready, pod_ready_reason, pod_ready_msg) = match gated {
        Some(msg) => (false, Some("ReadinessGatesNotReady"), Some(msg)),
        None => (ready, ready_reason, ready_msg.clone()),
    };
    let mut conditions = vec![
        condition("PodReadyToStartContainers", sandbox_ready, None, None, &now),
        condition("Initialized", initialized, init_reason, init_msg, &now),
        condition("Ready", pod_ready, pod_ready_reason, pod_ready_msg, &now),
        condition("ContainersReady", ready, ready_reason, ready_msg, &now),
        condition("PodScheduled", true, None, None, &now),
    ];
    if let Some(f) = input.failure.filter(|f| f.disruption) {
        conditions.push(condition(
            "DisruptionTarget",
            true,
            Some("TerminationByKubelet"),
            Some(f.message.clone()),
            &now,
        ));
    }
    conditions.extend(super::resize::conditions(&input.resize, &now));
    // Conditions other writers own (readiness gates, DisruptionTarget, ...) are kept: the
    // status patch replaces the whole list. The resize ones are ours even when absent.
    let ours: Vec<String> = conditions
        .iter()
        .map(|c| c.type_.clone())
        .chain([
            super::resize::PENDING.into(),
            super::resize::IN_PROGRESS.into(),
        ])
        .collect();
    conditions.extend(
        pod.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .filter(|c| !ours.contains(&c.type_))
            .cloned(),
    );

    let host_network = spec.host_network.unwrap_or(false);
    let pod_ips: Vec<String> = if host_network {
        vec![input.node_ip.to_string()]
    } else {
        input
            .observed
            .newest_sandbox()
            .map(|s| s.ips.clone())
            .unwrap_or_default()
    };
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(input.node_ip.to_string()).filter(|ip| !ip.is_empty()),
        host_ips: Some(vec![HostIP {
            ip: input.node_ip.to_string(),
        }])
        .filter(|_| !input.node_ip.is_empty()),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: Some(pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect())
            .filter(|v: &Vec<PodIP>| !v.is_empty()),
        start_time: time(input.start_time),
        qos_class: Some(qos_class(&spec).as_str().into()),
        init_container_statuses: Some(init_statuses).filter(|v| !v.is_empty()),
        container_statuses: Some(statuses),
        ephemeral_container_statuses: super::ephemeral::ephemeral_statuses(input),
        reason: input.failure.map(|f| f.reason.clone()),
        message: input.failure.map(|f| f.message.clone()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::observed::SandboxInfo;
    use crate::runtime::observed::{ContainerInfo, ContainerState};
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::api::core::v1::{Container, PodCondition};
    use std::time::Duration;

    fn pod(policy: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                containers: vec![Container {
                    name: "a".into(),
                    image: Some("busybox".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn info(attempt: u32, state: ContainerState, code: i32) -> ContainerInfo {
        ContainerInfo {
            id: format!("id{attempt}"),
            sandbox_id: "s".into(),
            ..ContainerInfo::fixture("a", attempt, state, code)
        }
    }

    fn status_of(
        pod: &Pod,
        observed: &ObservedPod,
        waiting: &HashMap<String, Waiting>,
    ) -> PodStatus {
        generate_pod_status(&PodStatusInput {
            failure: None,
            probes: &HashMap::new(),
            resize: Default::default(),
            pod,
            observed,
            waiting,
            start_time: SystemTime::UNIX_EPOCH + Duration::from_secs(10),
            node_ip: "192.0.2.1",
            runtime_name: "containerd",
            now: SystemTime::UNIX_EPOCH + Duration::from_secs(20),
        })
    }

    fn observed(containers: Vec<ContainerInfo>) -> ObservedPod {
        let mut o = ObservedPod {
            sandboxes: vec![SandboxInfo {
                id: "s".into(),
                attempt: 0,
                ready: true,
                created_at: 1,
                ips: vec!["10.88.0.5".into()],
            }],
            containers,
            ..Default::default()
        };
        o.sort();
        o
    }

    #[test]
    fn running_pod() {
        let s = status_of(
            &pod("Always"),
            &observed(vec![info(0, ContainerState::Running, 0)]),
            &HashMap::new(),
        );
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.88.0.5"));
        let cs = &s.container_statuses.unwrap()[0];
        assert!(cs.ready && cs.state.as_ref().unwrap().running.is_some());
        assert_eq!(cs.container_id.as_deref(), Some("containerd://id0"));
        let ready = s
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    }

    #[test]
    fn readiness_gates_hold_ready_and_other_conditions_stay() {
        use k8s_openapi::api::core::v1::{PodReadinessGate, PodStatus};
        let mut p = pod("Always");
        p.spec.as_mut().unwrap().readiness_gates = Some(vec![PodReadinessGate {
            condition_type: "example.com/ready".into(),
        }]);
        let o = observed(vec![info(0, ContainerState::Running, 0)]);
        let cond = |s: &PodStatus, t: &str| {
            s.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == t)
                .cloned()
                .unwrap()
        };
        let s = status_of(&p, &o, &HashMap::new());
        let ready = cond(&s, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("ReadinessGatesNotReady"))
        );
        assert_eq!(
            ready.message.as_deref(),
            Some(
                "corresponding condition of pod readiness gate \"example.com/ready\" does not exist."
            )
        );
        assert_eq!(cond(&s, "ContainersReady").status, "True");

        let set_gate = |p: &mut Pod, status: &str| {
            p.status = Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "example.com/ready".into(),
                    status: status.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        };
        set_gate(&mut p, "False");
        let s = status_of(&p, &o, &HashMap::new());
        assert_eq!(
            cond(&s, "Ready").message.as_deref(),
            Some(
                "the status of pod readiness gate \"example.com/ready\" is not \"True\", but False"
            )
        );
        assert_eq!(
            cond(&s, "example.com/ready").status,
            "False",
            "kept in the patch"
        );
        set_gate(&mut p, "True");
        let s = status_of(&p, &o, &HashMap::new());
        assert_eq!(cond(&s, "Ready").status, "True");
    }

    #[test]
    fn crash_loop_shows_waiting_with_last_state() {
        let waiting = HashMap::from([(
            "a".to_string(),
            Waiting {
                reason: "CrashLoopBackOff".into(),
                message: "back-off".into(),
            },
        )]);
        let o = observed(vec![
            info(0, ContainerState::Exited, 1),
            info(1, ContainerState::Exited, 1),
        ]);
        let s = status_of(&pod("Always"), &o, &waiting);
        let cs = &s.container_statuses.unwrap()[0];
        assert_eq!(cs.restart_count, 1);
        let st = cs.state.as_ref().unwrap();
        assert_eq!(
            st.waiting.as_ref().unwrap().reason.as_deref(),
            Some("CrashLoopBackOff")
        );
        let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
        assert_eq!(s.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn never_pod_ends_failed_or_succeeded() {
        let s = status_of(
            &pod("Never"),
            &observed(vec![info(0, ContainerState::Exited, 3)]),
            &HashMap::new(),
        );
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let t = s.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        assert_eq!(t.exit_code, 3);
        let s = status_of(
            &pod("Never"),
            &observed(vec![info(0, ContainerState::Exited, 0)]),
            &HashMap::new(),
        );
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    }

    #[test]
    fn terminal_pods_are_not_ready_with_upstream_reasons() {
        let s = status_of(
            &pod("Never"),
            &observed(vec![info(0, ContainerState::Exited, 3)]),
            &HashMap::new(),
        );
        let c = |t: &str| {
            s.conditions
                .clone()
                .unwrap()
                .into_iter()
                .find(|c| c.type_ == t)
                .unwrap()
        };
        assert_eq!(
            (c("Ready").status.as_str(), c("Ready").reason.as_deref()),
            ("False", Some("PodFailed"))
        );
        assert_eq!(c("Ready").message, None);
        assert_eq!(c("Initialized").status, "True");
    }

    #[test]
    fn sidecars_gate_initialization_and_count_towards_readiness() {
        use crate::probe::Outcome;
        use k8s_openapi::api::core::v1::Probe;
        let mut p = pod("Never");
        p.spec.as_mut().unwrap().init_containers = Some(vec![
            Container {
                name: "init".into(),
                ..Default::default()
            },
            Container {
                name: "proxy".into(),
                restart_policy: Some("Always".into()),
                startup_probe: Some(Probe::default()),
                readiness_probe: Some(Probe::default()),
                ..Default::default()
            },
        ]);
        let named = |name: &str, attempt, state, code| ContainerInfo {
            name: name.into(),
            id: format!("{name}{attempt}"),
            ..info(attempt, state, code)
        };
        let cond = |s: &PodStatus, t: &str| {
            let c = s
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == t)
                .unwrap();
            (c.status.clone(), c.message.clone())
        };
        let verdicts = |startup, readiness| {
            HashMap::from([(
                "proxy0".to_string(),
                Verdicts {
                    startup: Some(startup),
                    readiness: Some(readiness),
                    ..Default::default()
                },
            )])
        };
        let status = |o: &ObservedPod, probes: &HashMap<String, Verdicts>| {
            generate_pod_status(&PodStatusInput {
                failure: None,
                probes,
                pod: &p,
                observed: o,
                waiting: &HashMap::new(),
                start_time: SystemTime::UNIX_EPOCH,
                node_ip: "192.0.2.1",
                runtime_name: "containerd",
                now: SystemTime::UNIX_EPOCH,
                resize: Default::default(),
            })
        };

        // A plain init container at work is not ready.
        let o = observed(vec![named("init", 0, ContainerState::Running, 0)]);
        let s = status(&o, &HashMap::new());
        let init = &s.init_container_statuses.as_ref().unwrap()[0];
        assert_eq!((init.ready, init.started), (false, Some(true)));

        // The sidecar runs, its startup probe has not passed: still initializing.
        let o = observed(vec![
            named("init", 0, ContainerState::Exited, 0),
            named("proxy", 0, ContainerState::Running, 0),
        ]);
        let s = status(&o, &verdicts(Outcome::Unknown, Outcome::Failure));
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(
            cond(&s, "Initialized"),
            (
                "False".into(),
                Some("containers with incomplete status: [proxy]".into())
            )
        );
        // Started: initialized, but not ready until its readiness probe passes.
        let s = status(&o, &verdicts(Outcome::Success, Outcome::Failure));
        assert_eq!(cond(&s, "Initialized").0, "True");
        let proxy = &s.init_container_statuses.as_ref().unwrap()[1];
        assert!(proxy.state.as_ref().unwrap().running.is_some());
        assert_eq!((proxy.ready, proxy.started), (false, Some(true)));
        let mut o = o;
        o.containers.push(named("a", 0, ContainerState::Running, 0));
        o.sort();
        let s = status(&o, &verdicts(Outcome::Success, Outcome::Failure));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(
            cond(&s, "ContainersReady"),
            (
                "False".into(),
                Some("containers with unready status: [proxy]".into())
            )
        );
        let s = status(&o, &verdicts(Outcome::Success, Outcome::Success));
        assert_eq!(cond(&s, "Ready").0, "True");

        // The app finished and the sidecar was stopped by a signal: the app decides.
        let o = observed(vec![
            named("init", 0, ContainerState::Exited, 0),
            named("proxy", 0, ContainerState::Exited, 143),
            named("a", 0, ContainerState::Exited, 0),
        ]);
        let s = status(&o, &HashMap::new());
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        // A sidecar restarting does not send a pod whose app has run back to Pending.
        let o = observed(vec![
            named("init", 0, ContainerState::Exited, 0),
            named("proxy", 1, ContainerState::Running, 0),
            named("a", 0, ContainerState::Running, 0),
        ]);
        let s = status(&o, &HashMap::new());
        assert_eq!(s.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn new_pod_is_pending_creating() {
        let s = status_of(&pod("Always"), &ObservedPod::default(), &HashMap::new());
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let w = s.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .waiting
            .unwrap();
        assert_eq!(w.reason.as_deref(), Some("ContainerCreating"));
    }
}
