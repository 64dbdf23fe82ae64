//! The decision half of the runtime manager: from the pod spec and what the runtime shows,
//! work out what to do next. Pure, so every rule is unit-tested without a runtime.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::probe::{self, Verdicts};
use crate::runtime::backoff::Backoff;
use crate::runtime::labels::{container_hash, hash_matches};
use crate::runtime::observed::{ContainerInfo, ContainerState, ObservedPod};
use crate::runtime::sidecars;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    pub fn of(pod: &Pod) -> Self {
        match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
            Some("Never") => Self::Never,
            Some("OnFailure") => Self::OnFailure,
            _ => Self::Always,
        }
    }

    fn restarts_after(self, exit_code: i32) -> bool {
        match self {
            Self::Always => true,
            Self::OnFailure => exit_code != 0,
            Self::Never => false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerKind {
    Init,
    Regular,
    /// Index into `ephemeralContainers` (see `ephemeral`).
    Ephemeral,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartAction {
    pub kind: ContainerKind,
    /// Index into `initContainers`, `containers` or `ephemeralContainers`, by kind.
    pub index: usize,
    pub restart_count: u32,
    /// Set when this start is a restart, so the executor records it in the backoff.
    pub backoff_key: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillAction {
    pub container_id: String,
    pub name: String,
    /// The `Killing` event's message.
    pub message: String,
    /// A grace period of its own (a failed probe's `terminationGracePeriodSeconds`) instead
    /// of the pod's.
    pub grace: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackoffWait {
    pub name: String,
    pub remaining: Duration,
    pub delay: Duration,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every container and sandbox before anything else (the sandbox is gone or broken).
    pub kill_pod: bool,
    pub create_sandbox: bool,
    pub sandbox_attempt: u32,
    /// The ready sandbox to start containers in, when it is kept.
    pub sandbox_id: Option<String>,
    pub kill: Vec<KillAction>,
    pub start: Vec<StartAction>,
    pub backoff: Vec<BackoffWait>,
    /// Nothing runs and nothing will: the pod has reached Succeeded or Failed, so its sandbox
    /// can be stopped (containers stay for their status and logs).
    pub pod_finished: bool,
}

impl PodActions {
    /// When the worker should look again even if nothing else happens.
    #[cfg(test)]
    pub fn requeue_after(&self) -> Option<Duration> {
        self.backoff.iter().map(|b| b.remaining).min()
    }
}

fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
}

fn containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
}

fn next_restart_count(observed: &ObservedPod, name: &str) -> u32 {
    observed
        .newest_container(name)
        .map(|c| c.attempt + 1)
        .unwrap_or(0)
}

/// Decides whether an exited container may start again now, or must wait out its backoff.
pub(crate) fn restart_or_wait(
    uid: &str,
    container: &Container,
    previous: &ContainerInfo,
    backoff: &Backoff,
    now: SystemTime,
) -> Result<String, BackoffWait> {
    let key = Backoff::key(uid, &container.name, container_hash(container));
    let finished = previous.finished_at_time().unwrap_or(now);
    match backoff.remaining(&key, finished, now) {
        Some(remaining) => Err(BackoffWait {
            name: container.name.clone(),
            remaining,
            delay: backoff.delay(&key).unwrap_or_default(),
        }),
        None => Ok(key),
    }
}

pub fn compute_pod_actions(
    pod: &Pod,
    observed: &ObservedPod,
    backoff: &Backoff,
    probes: &HashMap<String, Verdicts>,
    now: SystemTime,
) -> PodActions {
    let mut actions = sandbox_and_container_actions(pod, observed, backoff, probes, now);
    super::ephemeral::add_starts(pod, observed, &mut actions);
    actions
}

fn sandbox_and_container_actions(
    pod: &Pod,
    observed: &ObservedPod,
    backoff: &Backoff,
    probes: &HashMap<String, Verdicts>,
    now: SystemTime,
) -> PodActions {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let policy = RestartPolicy::of(pod);
    let mut actions = PodActions::default();

    let ready_sandboxes = observed.sandboxes.iter().filter(|s| s.ready).count();
    let newest = observed.newest_sandbox();
    let sandbox_ok = newest.is_some_and(|s| s.ready) && ready_sandboxes == 1;
    if !sandbox_ok {
        actions.create_sandbox = true;
        actions.sandbox_attempt = newest.map(|s| s.attempt + 1).unwrap_or(0);
        actions.kill_pod = !observed.is_empty();
        // A Never pod whose sandbox went away after it ran is finished, not restarted; so is
        // any pod whose regular containers all ran and none of them may run again.
        let ran = containers(pod)
            .iter()
            .any(|c| observed.newest_container(&c.name).is_some());
        let none_restarts = containers(pod).iter().all(|c| {
            observed.newest_container(&c.name).is_some_and(|s| {
                s.state == ContainerState::Exited && !policy.restarts_after(s.exit_code)
            })
        });
        let never_again =
            policy == RestartPolicy::Never && newest.is_some() && !observed.containers.is_empty();
        if never_again || (ran && none_restarts) {
            actions.create_sandbox = false;
            actions.pod_finished = true;
            return actions;
        }
    } else {
        actions.sandbox_id = newest.map(|s| s.id.clone());
    }

    // Containers already running in a sandbox that is being replaced are killed with it, so
    // the rest of the decision treats them as gone.
    let fresh = actions.create_sandbox;

    // Init containers run one at a time, in order, each to success. Once a regular container
    // exists in the current sandbox the pod counts as initialized, even if the finished init
    // containers have since been removed.
    let initialized = !fresh
        && containers(pod).iter().any(|c| {
            observed.newest_container(&c.name).is_some_and(|s| {
                matches!(s.state, ContainerState::Running | ContainerState::Created)
            })
        });
    // With sidecars the init sequence has rules of its own (see sidecars.rs).
    let with_sidecars = crate::pod::has_sidecars(pod);
    if with_sidecars
        && !sidecars::init_actions(
            pod,
            observed,
            backoff,
            probes,
            now,
            fresh,
            initialized,
            &mut actions,
        )
    {
        return actions;
    }
    for (index, c) in init_containers(pod).iter().enumerate() {
        if initialized || with_sidecars {
            break;
        }
        let current = if fresh {
            None
        } else {
            observed.newest_container(&c.name)
        };
        match current {
            Some(s) if s.state == ContainerState::Exited && s.exit_code == 0 => continue,
            Some(s) if s.state == ContainerState::Running => return actions,
            Some(s) if s.state == ContainerState::Exited => {
                if policy == RestartPolicy::Never {
                    actions.pod_finished = true;
                    return actions;
                }
                match restart_or_wait(uid, c, s, backoff, now) {
                    Ok(key) => actions.start.push(StartAction {
                        kind: ContainerKind::Init,
                        index,
                        restart_count: s.attempt + 1,
                        backoff_key: Some(key),
                    }),
                    Err(wait) => actions.backoff.push(wait),
                }
                return actions;
            }
            Some(s) => {
                // Created but never started, or unknown: replace it.
                actions.kill.push(KillAction {
                    container_id: s.id.clone(),
                    name: c.name.clone(),
                    message: format!("Stopping container {} (container is not running)", c.name),
                    grace: None,
                });
                actions.start.push(StartAction {
                    kind: ContainerKind::Init,
                    index,
                    restart_count: s.attempt + 1,
                    backoff_key: None,
                });
                return actions;
            }
            None => {
                // After a sandbox restart, an init container that once succeeded runs again
                // from its next attempt number.
                actions.start.push(StartAction {
                    kind: ContainerKind::Init,
                    index,
                    restart_count: next_restart_count(observed, &c.name),
                    backoff_key: None,
                });
                return actions;
            }
        }
    }

    let mut any_running = false;
    for (index, c) in containers(pod).iter().enumerate() {
        let current = if fresh {
            None
        } else {
            observed.newest_container(&c.name)
        };
        let Some(s) = current else {
            // A fresh sandbox: a container that already finished for good stays finished.
            if let Some(prev) = observed.newest_container(&c.name)
                && prev.state == ContainerState::Exited
                && !policy.restarts_after(prev.exit_code)
            {
                continue;
            }
            actions.start.push(StartAction {
                kind: ContainerKind::Regular,
                index,
                restart_count: next_restart_count(observed, &c.name),
                backoff_key: None,
            });
            continue;
        };
        match s.state {
            ContainerState::Running => {
                // No hash (a container another kubelet created) is adopted as it is.
                if s.hash.is_some_and(|h| !hash_matches(c, h)) {
                    actions.kill.push(KillAction {
                        container_id: s.id.clone(),
                        name: c.name.clone(),
                        message: format!(
                            "Container {} definition changed, will be restarted",
                            c.name
                        ),
                        grace: None,
                    });
                    actions.start.push(StartAction {
                        kind: ContainerKind::Regular,
                        index,
                        restart_count: s.attempt + 1,
                        backoff_key: None,
                    });
                } else if let Some((why, grace)) = probe::restart_reason(c, probes.get(&s.id)) {
                    // Stopped now; restarted (with the usual backoff) if the policy allows,
                    // like any container that exits.
                    let message = if policy == RestartPolicy::Never {
                        why
                    } else {
                        format!("{why}, will be restarted")
                    };
                    actions.kill.push(KillAction {
                        container_id: s.id.clone(),
                        name: c.name.clone(),
                        message,
                        grace,
                    });
                    any_running = true;
                } else {
                    any_running = true;
                }
            }
            ContainerState::Exited => {
                if !policy.restarts_after(s.exit_code) {
                    continue;
                }
                match restart_or_wait(uid, c, s, backoff, now) {
                    Ok(key) => actions.start.push(StartAction {
                        kind: ContainerKind::Regular,
                        index,
                        restart_count: s.attempt + 1,
                        backoff_key: Some(key),
                    }),
                    Err(wait) => actions.backoff.push(wait),
                }
            }
            ContainerState::Created | ContainerState::Unknown => {
                actions.kill.push(KillAction {
                    container_id: s.id.clone(),
                    name: c.name.clone(),
                    message: format!("Stopping container {} (container is not running)", c.name),
                    grace: None,
                });
                actions.start.push(StartAction {
                    kind: ContainerKind::Regular,
                    index,
                    restart_count: s.attempt + 1,
                    backoff_key: None,
                });
            }
        }
    }

    if !sidecars::app_work_left(pod, any_running, &actions) {
        // Everything ran to its end. A fresh sandbox would only be stopped again.
        sidecars::drop_sidecar_work(pod, &mut actions);
        actions.create_sandbox = false;
        actions.pod_finished = true;
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::observed::SandboxInfo;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn container(name: &str) -> Container {
        Container {
            name: name.into(),
            image: Some("busybox".into()),
            ..Default::default()
        }
    }

    fn pod(policy: &str, init: &[&str], regular: &[&str]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some("uid1".into()),
                name: Some("p".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                init_containers: Some(init.iter().map(|n| container(n)).collect()),
                containers: regular.iter().map(|n| container(n)).collect(),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn sandbox(ready: bool, attempt: u32) -> SandboxInfo {
        SandboxInfo {
            id: format!("sb{attempt}"),
            attempt,
            ready,
            created_at: 1,
            ips: vec![],
        }
    }

    fn exited(name: &str, attempt: u32, code: i32, finished: SystemTime) -> ContainerInfo {
        ContainerInfo {
            hash: Some(container_hash(&container(name))),
            finished_at: finished
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as i64,
            ..ContainerInfo::fixture(name, attempt, ContainerState::Exited, code)
        }
    }

    fn running(name: &str, attempt: u32) -> ContainerInfo {
        ContainerInfo {
            state: ContainerState::Running,
            finished_at: 0,
            ..exited(name, attempt, 0, SystemTime::UNIX_EPOCH)
        }
    }

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)
    }

    /// The decision without probe verdicts, as most rules need.
    fn compute_pod_actions(
        pod: &Pod,
        observed: &ObservedPod,
        backoff: &Backoff,
        now: SystemTime,
    ) -> PodActions {
        super::compute_pod_actions(pod, observed, backoff, &HashMap::new(), now)
    }

    #[test]
    fn failed_liveness_or_startup_stops_the_container() {
        use crate::probe::Outcome;
        let obs = ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![running("a", 0)],
            ..Default::default()
        };
        let verdicts = |liveness, startup| {
            HashMap::from([(
                "a-0".to_string(),
                Verdicts {
                    liveness: Some(liveness),
                    startup,
                    ..Default::default()
                },
            )])
        };
        let healthy = verdicts(Outcome::Success, None);
        let p = pod("Always", &[], &["a"]);
        let a = super::compute_pod_actions(&p, &obs, &Backoff::default(), &healthy, now());
        assert!(a.kill.is_empty());
        let sick = verdicts(Outcome::Failure, None);
        let a = super::compute_pod_actions(&p, &obs, &Backoff::default(), &sick, now());
        assert_eq!(
            a.kill,
            vec![KillAction {
                container_id: "a-0".into(),
                name: "a".into(),
                message: "Container a failed liveness probe, will be restarted".into(),
                grace: None,
            }]
        );
        assert!(
            a.start.is_empty(),
            "the restart follows the exit, with backoff"
        );
        assert!(!a.pod_finished);
        let mut never = pod("Never", &[], &["a"]);
        // The probe's own grace period replaces the pod's for this stop.
        never.spec.as_mut().unwrap().containers[0].startup_probe =
            Some(k8s_openapi::api::core::v1::Probe {
                termination_grace_period_seconds: Some(5),
                ..Default::default()
            });
        let mut obs = obs;
        obs.containers[0].hash = Some(container_hash(&never.spec.as_ref().unwrap().containers[0]));
        let slow = verdicts(Outcome::Success, Some(Outcome::Failure));
        let a = super::compute_pod_actions(&never, &obs, &Backoff::default(), &slow, now());
        assert_eq!(a.kill[0].message, "Container a failed startup probe");
        assert_eq!(a.kill[0].grace, Some(5));
    }

    #[test]
    fn new_pod_creates_sandbox_and_first_init_only() {
        let p = pod("Always", &["i1", "i2"], &["a"]);
        let a = compute_pod_actions(&p, &ObservedPod::default(), &Backoff::default(), now());
        assert!(a.create_sandbox && !a.kill_pod);
        assert_eq!(a.sandbox_attempt, 0);
        assert_eq!(a.start.len(), 1);
        assert_eq!(
            (a.start[0].kind, a.start[0].index),
            (ContainerKind::Init, 0)
        );
    }

    #[test]
    fn inits_run_in_order_then_containers() {
        let p = pod("Always", &["i1", "i2"], &["a", "b"]);
        let mut obs = ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![exited("i1", 0, 0, now())],
            ..Default::default()
        };
        let a = compute_pod_actions(&p, &obs, &Backoff::default(), now());
        assert_eq!(
            (a.start[0].kind, a.start[0].index),
            (ContainerKind::Init, 1)
        );
        obs.containers.push(running("i2", 0));
        let a = compute_pod_actions(&p, &obs, &Backoff::default(), now());
        assert!(a.start.is_empty());
        obs.containers[1] = exited("i2", 0, 0, now());
        let a = compute_pod_actions(&p, &obs, &Backoff::default(), now());
        let started: Vec<_> = a.start.iter().map(|s| (s.kind, s.index)).collect();
        assert_eq!(
            started,
            vec![(ContainerKind::Regular, 0), (ContainerKind::Regular, 1)]
        );
    }

    #[test]
    fn failed_init_with_never_finishes_pod() {
        let p = pod("Never", &["i1"], &["a"]);
        let obs = ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![exited("i1", 0, 1, now())],
            ..Default::default()
        };
        let a = compute_pod_actions(&p, &obs, &Backoff::default(), now());
        assert!(a.pod_finished && a.start.is_empty());
    }

    #[test]
    fn crash_restarts_respect_policy_and_backoff() {
        let obs = ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![exited("a", 2, 1, now() - Duration::from_secs(3))],
            ..Default::default()
        };
        let never =
            compute_pod_actions(&pod("Never", &[], &["a"]), &obs, &Backoff::default(), now());
        assert!(never.start.is_empty() && never.pod_finished);

        let p = pod("OnFailure", &[], &["a"]);
        let mut b = Backoff::default();
        let a = compute_pod_actions(&p, &obs, &b, now());
        assert_eq!(a.start[0].restart_count, 3);
        let key = a.start[0].backoff_key.clone().unwrap();
        b.record_restart(&key, now() - Duration::from_secs(4));
        let a = compute_pod_actions(&p, &obs, &b, now());
        assert!(a.start.is_empty());
        assert_eq!(a.backoff[0].remaining, Duration::from_secs(7));
        assert_eq!(a.requeue_after(), Some(Duration::from_secs(7)));
        assert!(!a.pod_finished);
    }

    #[test]
    fn succeeded_on_failure_pod_is_finished() {
        let p = pod("OnFailure", &[], &["a"]);
        let obs = ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![exited("a", 0, 0, now())],
            ..Default::default()
        };
        let a = compute_pod_actions(&p, &obs, &Backoff::default(), now());
        assert!(a.pod_finished && a.start.is_empty());
    }

    #[test]
    fn dead_sandbox_is_replaced_and_containers_restart() {
        let p = pod("Always", &[], &["a"]);
        let obs = ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![sandbox(false, 0)],
            containers: vec![running("a", 0)],
            ..Default::default()
        };
        let a = compute_pod_actions(&p, &obs, &Backoff::default(), now());
        assert!(a.kill_pod && a.create_sandbox);
        assert_eq!(a.sandbox_attempt, 1);
        assert_eq!(a.start[0].restart_count, 1);
    }

    #[test]
    fn finished_on_failure_pod_with_inits_is_not_rerun_after_its_sandbox_stopped() {
        let p = pod("OnFailure", &["i1"], &["a"]);
        let obs = ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![sandbox(false, 0)],
            containers: vec![exited("a", 0, 0, now()), exited("i1", 0, 0, now())],
            ..Default::default()
        };
        let a = compute_pod_actions(&p, &obs, &Backoff::default(), now());
        assert!(
            a.pod_finished && !a.create_sandbox && a.start.is_empty(),
            "{a:?}"
        );
    }

    #[test]
    fn removed_init_records_do_not_rerun_inits_of_a_running_pod() {
        let p = pod("Always", &["i1"], &["a", "b"]);
        let obs = ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![
                running("a", 0),
                exited("b", 0, 1, now() - Duration::from_secs(60)),
            ],
            ..Default::default()
        };
        let a = compute_pod_actions(&p, &obs, &Backoff::default(), now());
        assert_eq!(a.start.len(), 1);
        assert_eq!(
            (a.start[0].kind, a.start[0].index),
            (ContainerKind::Regular, 1)
        );
    }

    #[test]
    fn containers_without_our_hash_are_adopted() {
        let p = pod("Always", &[], &["a"]);
        let mut c = running("a", 0);
        c.hash = None;
        let obs = ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![c],
            ..Default::default()
        };
        let a = compute_pod_actions(&p, &obs, &Backoff::default(), now());
        assert!(a.kill.is_empty() && a.start.is_empty());
    }

    #[test]
    fn running_pod_with_same_spec_is_left_alone() {
        let p = pod("Always", &["i"], &["a"]);
        let obs = ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![running("a", 0), exited("i", 0, 0, now())],
            ..Default::default()
        };
        let a = compute_pod_actions(&p, &obs, &Backoff::default(), now());
        assert_eq!(
            a,
            PodActions {
                sandbox_id: Some("sb0".into()),
                ..Default::default()
            }
        );
    }

    #[test]
    fn changed_spec_replaces_container() {
        let mut p = pod("Always", &[], &["a"]);
        p.spec.as_mut().unwrap().containers[0].image = Some("busybox:2".into());
        let obs = ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![running("a", 0)],
            ..Default::default()
        };
        let a = compute_pod_actions(&p, &obs, &Backoff::default(), now());
        assert_eq!(a.kill.len(), 1);
        assert_eq!(a.start[0].restart_count, 1);
    }
}
