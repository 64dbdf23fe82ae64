//! Sidecar containers (KEP-753): init containers with `restartPolicy: Always`. They start in
//! order with the other init containers, count as done for the init sequence once started
//! (and their startup probe, if any, has succeeded), and then keep running beside the app
//! containers, restarted with backoff whatever the pod's restart policy. They never keep a pod
//! alive by themselves: once the app containers are finished for good the pod completes and
//! its sidecars are stopped, last-defined first, after the app containers.
//!
//! Pure decisions only, called from [`super::actions::compute_pod_actions`] and the kill path.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Pod;

use crate::pod::{init_containers, is_sidecar, is_sidecar_name};
use crate::probe::{Outcome, Verdicts};
use crate::runtime::actions::{
    ContainerKind, KillAction, PodActions, RestartPolicy, StartAction, restart_or_wait,
};
use crate::runtime::backoff::Backoff;
use crate::runtime::labels::hash_matches;
use crate::runtime::observed::{ContainerState, ObservedPod};

/// What the init sequence of a pod with sidecars needs next; true once the pod is initialized
/// (the app containers may run). `fresh` says the sandbox is being (re)created, so every
/// container starts over from the first init container.
#[allow(clippy::too_many_arguments)]
pub fn init_actions(
    pod: &Pod,
    observed: &ObservedPod,
    backoff: &Backoff,
    probes: &HashMap<String, Verdicts>,
    now: SystemTime,
    fresh: bool,
    initialized: bool,
    actions: &mut PodActions,
) -> bool {
    let inits = init_containers(pod);
    if inits.is_empty() {
        return true;
    }
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let policy = RestartPolicy::of(pod);
    let start = |index: usize, restart_count: u32, backoff_key: Option<String>| StartAction {
        kind: ContainerKind::Init,
        index,
        restart_count,
        backoff_key,
    };
    if fresh {
        let first = &inits[0];
        let attempt = observed
            .newest_container(&first.name)
            .map_or(0, |c| c.attempt + 1);
        actions.start.push(start(0, attempt, None));
        return false;
    }

    // Walked from the last init container back: the newest one with a record tells how far
    // the sequence got, even when earlier records were removed. Starts are collected in that
    // reverse order and put back in spec order at the end.
    // An app container that ran in the current sandbox, even one that has exited since, means
    // the sequence completed there (upstream counts only live ones, and would restart an
    // exited sidecar of a finished pod once before completing it).
    let sandbox = observed.newest_sandbox().map(|s| s.id.as_str());
    let app_ran_here = pod.spec.as_ref().is_some_and(|s| {
        s.containers.iter().any(|c| {
            observed
                .newest_container(&c.name)
                .is_some_and(|r| Some(r.sandbox_id.as_str()) == sandbox)
        })
    });
    let mut pod_initialized = initialized || app_ran_here;
    let mut seen_later = pod_initialized;
    let mut starts = Vec::new();
    for (index, c) in inits.iter().enumerate().rev() {
        let sidecar = is_sidecar(c);
        let Some(s) = observed.newest_container(&c.name) else {
            // A sidecar whose record vanished in an initialized pod is started again; a plain
            // init container is not rerun.
            if seen_later && sidecar {
                starts.push(start(index, 0, None));
            }
            continue;
        };
        if seen_later && !sidecar {
            continue;
        }
        let replace = |actions: &mut PodActions, starts: &mut Vec<StartAction>, why: String| {
            actions.kill.push(KillAction {
                container_id: s.id.clone(),
                name: c.name.clone(),
                message: why,
                grace: None,
            });
            starts.push(start(index, s.attempt + 1, None));
        };
        match s.state {
            ContainerState::Created => replace(
                actions,
                &mut starts,
                format!("Stopping container {} (container is not running)", c.name),
            ),
            ContainerState::Running if sidecar => {
                let verdicts = probes.get(&s.id);
                if c.startup_probe.is_some() {
                    match verdicts.and_then(|v| v.startup) {
                        Some(Outcome::Success) => {}
                        Some(Outcome::Failure) => {
                            // Stopped now, restarted with backoff once it has exited.
                            actions.kill.push(KillAction {
                                container_id: s.id.clone(),
                                name: c.name.clone(),
                                message: format!("Init container {} failed startup probe", c.name),
                                grace: c
                                    .startup_probe
                                    .as_ref()
                                    .and_then(|p| p.termination_grace_period_seconds),
                            });
                            seen_later = true;
                            continue;
                        }
                        _ => {
                            seen_later = true;
                            continue;
                        }
                    }
                }
                if index + 1 == inits.len() {
                    pod_initialized = true;
                } else if !seen_later {
                    starts.push(start(index + 1, 0, None));
                }
                if s.hash.is_some_and(|h| !hash_matches(c, h)) {
                    replace(
                        actions,
                        &mut starts,
                        format!("Init container {} definition changed", c.name),
                    );
                } else if verdicts.and_then(|v| v.liveness) == Some(Outcome::Failure) {
                    actions.kill.push(KillAction {
                        container_id: s.id.clone(),
                        name: c.name.clone(),
                        message: format!("Init container {} failed liveness probe", c.name),
                        grace: c
                            .liveness_probe
                            .as_ref()
                            .and_then(|p| p.termination_grace_period_seconds),
                    });
                }
            }
            // A plain init container still at work: wait for it.
            ContainerState::Running => {}
            ContainerState::Exited if sidecar => match restart_or_wait(uid, c, s, backoff, now) {
                Ok(key) => starts.push(start(index, s.attempt + 1, Some(key))),
                Err(wait) => actions.backoff.push(wait),
            },
            ContainerState::Exited if s.exit_code != 0 => {
                if policy == RestartPolicy::Never {
                    actions.start.clear();
                    actions.pod_finished = true;
                    return false;
                }
                match restart_or_wait(uid, c, s, backoff, now) {
                    Ok(key) => starts.push(start(index, s.attempt + 1, Some(key))),
                    Err(wait) => actions.backoff.push(wait),
                }
            }
            ContainerState::Exited => {
                if index + 1 == inits.len() {
                    pod_initialized = true;
                } else {
                    starts.push(start(index + 1, 0, None));
                }
            }
            ContainerState::Unknown => {
                if !sidecar && policy == RestartPolicy::Never {
                    actions.start.clear();
                    actions.pod_finished = true;
                    return false;
                }
                replace(
                    actions,
                    &mut starts,
                    "Init container is in \"unknown\" state, try killing it before restart".into(),
                );
            }
        }
        seen_later = true;
    }
    if !seen_later {
        starts.push(start(0, 0, None));
    }
    starts.reverse();
    actions.start.extend(starts);
    pod_initialized
}

/// Whether an app container still runs, starts or waits out a backoff; without one, the
/// sidecars alone do not keep the pod going.
pub fn app_work_left(pod: &Pod, any_running: bool, actions: &PodActions) -> bool {
    any_running
        || actions
            .start
            .iter()
            .any(|s| s.kind == ContainerKind::Regular)
        || actions
            .backoff
            .iter()
            .any(|b| !is_sidecar_name(pod, &b.name))
}

/// The pod is complete: its sidecars are neither started nor waited for again (the kill of
/// the pod stops those still running).
pub fn drop_sidecar_work(pod: &Pod, actions: &mut PodActions) {
    actions.start.clear();
    actions.backoff.clear();
    actions.kill.retain(|k| !is_sidecar_name(pod, &k.name));
}

/// For each running container, the running containers it must see stopped before it is sent
/// its stop signal: a sidecar waits for every app container and for every sidecar defined
/// after it. App containers (and pods without sidecars) wait for nothing.
pub fn stop_order(pod: &Pod, running: &[&str]) -> HashMap<String, Vec<String>> {
    let running: HashSet<&str> = running.iter().copied().collect();
    let apps: Vec<String> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
        .iter()
        .map(|c| c.name.clone())
        .filter(|n| running.contains(n.as_str()))
        .collect();
    let mut order = HashMap::new();
    let mut later_sidecars: Vec<String> = Vec::new();
    for c in init_containers(pod).iter().rev().filter(|c| is_sidecar(c)) {
        if running.contains(c.name.as_str()) {
            let mut before = apps.clone();
            before.extend(later_sidecars.iter().cloned());
            order.insert(c.name.clone(), before);
            later_sidecars.push(c.name.clone());
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::labels::container_hash;
    use crate::runtime::observed::{ContainerInfo, SandboxInfo};
    use k8s_openapi::api::core::v1::{Container, PodSpec, Probe};
    use std::time::Duration;

    fn container(name: &str, sidecar: bool) -> Container {
        Container {
            name: name.into(),
            image: Some("busybox".into()),
            restart_policy: sidecar.then(|| "Always".to_string()),
            ..Default::default()
        }
    }

    /// Init containers named `s*` are sidecars.
    fn pod(policy: &str, init: &[&str], regular: &[&str]) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                uid: Some("uid1".into()),
                name: Some("p".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                init_containers: Some(
                    init.iter()
                        .map(|n| container(n, n.starts_with('s')))
                        .collect(),
                ),
                containers: regular.iter().map(|n| container(n, false)).collect(),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)
    }

    fn info(p: &Pod, name: &str, attempt: u32, state: ContainerState, code: i32) -> ContainerInfo {
        let spec = p
            .spec
            .as_ref()
            .unwrap()
            .init_containers
            .iter()
            .flatten()
            .chain(&p.spec.as_ref().unwrap().containers)
            .find(|c| c.name == name)
            .unwrap();
        ContainerInfo {
            hash: Some(container_hash(spec)),
            finished_at: if state == ContainerState::Exited {
                (now() - Duration::from_secs(60))
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as i64
            } else {
                0
            },
            ..ContainerInfo::fixture(name, attempt, state, code)
        }
    }

    fn observed(containers: Vec<ContainerInfo>) -> ObservedPod {
        ObservedPod {
            uid: "uid1".into(),
            sandboxes: vec![SandboxInfo {
                id: "sb0".into(),
                attempt: 0,
                ready: true,
                created_at: 1,
                ips: vec![],
            }],
            containers,
            ..Default::default()
        }
    }

    fn compute(p: &Pod, o: &ObservedPod, probes: &HashMap<String, Verdicts>) -> PodActions {
        crate::runtime::actions::compute_pod_actions(p, o, &Backoff::default(), probes, now())
    }

    fn started(a: &PodActions) -> Vec<(ContainerKind, usize)> {
        a.start.iter().map(|s| (s.kind, s.index)).collect()
    }

    use ContainerKind::{Init, Regular};
    use ContainerState::{Exited, Running};

    #[test]
    fn a_started_sidecar_lets_the_next_init_and_then_the_apps_start() {
        let p = pod("Always", &["i1", "s1", "i2"], &["a"]);
        let none = HashMap::new();
        let a = compute(&p, &ObservedPod::default(), &none);
        assert!(a.create_sandbox);
        assert_eq!(started(&a), [(Init, 0)]);

        let mut o = observed(vec![info(&p, "i1", 0, Exited, 0)]);
        assert_eq!(started(&compute(&p, &o, &none)), [(Init, 1)]);

        // The sidecar runs: the next init container starts while it keeps running.
        o.containers.push(info(&p, "s1", 0, Running, 0));
        let a = compute(&p, &o, &none);
        assert_eq!(started(&a), [(Init, 2)]);
        assert!(a.kill.is_empty() && !a.pod_finished);

        o.containers.push(info(&p, "i2", 0, Running, 0));
        assert!(compute(&p, &o, &none).start.is_empty());

        o.containers[2] = info(&p, "i2", 0, Exited, 0);
        assert_eq!(started(&compute(&p, &o, &none)), [(Regular, 0)]);
    }

    #[test]
    fn a_startup_probe_holds_the_sequence_until_it_succeeds() {
        let mut p = pod("Always", &["s1"], &["a"]);
        p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0].startup_probe = Some(Probe {
            termination_grace_period_seconds: Some(7),
            ..Default::default()
        });
        let o = observed(vec![info(&p, "s1", 0, Running, 0)]);
        let verdict = |startup| {
            HashMap::from([(
                "s1-0".to_string(),
                Verdicts {
                    startup,
                    ..Default::default()
                },
            )])
        };
        assert!(compute(&p, &o, &HashMap::new()).start.is_empty());
        assert!(
            compute(&p, &o, &verdict(Some(Outcome::Unknown)))
                .start
                .is_empty()
        );
        let a = compute(&p, &o, &verdict(Some(Outcome::Success)));
        assert_eq!(started(&a), [(Regular, 0)]);
        let a = compute(&p, &o, &verdict(Some(Outcome::Failure)));
        assert!(a.start.is_empty());
        assert_eq!(a.kill[0].message, "Init container s1 failed startup probe");
        assert_eq!(a.kill[0].grace, Some(7));
    }

    #[test]
    fn an_exited_sidecar_restarts_with_backoff_whatever_the_pod_policy() {
        let p = pod("Never", &["s1"], &["a"]);
        let o = observed(vec![
            info(&p, "a", 0, Running, 0),
            info(&p, "s1", 2, Exited, 1),
        ]);
        let a = compute(&p, &o, &HashMap::new());
        assert_eq!(started(&a), [(Init, 0)]);
        assert_eq!(a.start[0].restart_count, 3);
        assert!(!a.pod_finished);

        let mut b = Backoff::default();
        let key = a.start[0].backoff_key.clone().unwrap();
        for _ in 0..4 {
            b.record_restart(&key, now() - Duration::from_secs(61));
        }
        let a = crate::runtime::actions::compute_pod_actions(&p, &o, &b, &HashMap::new(), now());
        assert!(a.start.is_empty());
        assert_eq!(a.backoff[0].name, "s1");
        assert_eq!(a.backoff[0].remaining, Duration::from_secs(20));
        assert!(!a.pod_finished);
    }

    #[test]
    fn failed_liveness_or_changed_spec_replaces_a_running_sidecar() {
        let p = pod("Always", &["s1"], &["a"]);
        let o = observed(vec![
            info(&p, "a", 0, Running, 0),
            info(&p, "s1", 0, Running, 0),
        ]);
        let sick = HashMap::from([(
            "s1-0".to_string(),
            Verdicts {
                liveness: Some(Outcome::Failure),
                ..Default::default()
            },
        )]);
        let a = compute(&p, &o, &sick);
        assert_eq!(a.kill[0].message, "Init container s1 failed liveness probe");
        assert!(a.start.is_empty(), "restarted once it has exited");

        let mut changed = p.clone();
        changed
            .spec
            .as_mut()
            .unwrap()
            .init_containers
            .as_mut()
            .unwrap()[0]
            .image = Some("busybox:2".into());
        let a = compute(&changed, &o, &HashMap::new());
        assert_eq!(a.kill[0].message, "Init container s1 definition changed");
        assert_eq!(started(&a), [(Init, 0)]);
        assert_eq!(a.start[0].restart_count, 1);
    }

    #[test]
    fn an_initialized_pod_does_not_rerun_plain_inits_but_restores_sidecars() {
        let p = pod("Always", &["i1", "s1"], &["a"]);
        // The records of both init containers are gone; the app runs.
        let o = observed(vec![info(&p, "a", 0, Running, 0)]);
        let a = compute(&p, &o, &HashMap::new());
        assert_eq!(started(&a), [(Init, 1)]);
    }

    #[test]
    fn sidecars_do_not_keep_a_finished_pod_going() {
        for policy in ["Never", "OnFailure"] {
            let p = pod(policy, &["s1", "s2"], &["a"]);
            let o = observed(vec![
                info(&p, "a", 0, Exited, 0),
                info(&p, "s1", 0, Running, 0),
                info(&p, "s2", 3, Exited, 1),
            ]);
            let a = compute(&p, &o, &HashMap::new());
            assert!(a.pod_finished, "{policy}: {a:?}");
            assert!(a.start.is_empty() && a.backoff.is_empty() && !a.create_sandbox);
        }
        // An app container that fails under OnFailure restarts: the pod goes on.
        let p = pod("OnFailure", &["s1"], &["a"]);
        let o = observed(vec![
            info(&p, "a", 0, Exited, 1),
            info(&p, "s1", 0, Running, 0),
        ]);
        let a = compute(&p, &o, &HashMap::new());
        assert!(!a.pod_finished);
        assert_eq!(started(&a), [(Regular, 0)]);
    }

    #[test]
    fn a_failed_plain_init_ends_a_never_pod_with_sidecars() {
        let p = pod("Never", &["s1", "i1"], &["a"]);
        let o = observed(vec![
            info(&p, "s1", 0, Running, 0),
            info(&p, "i1", 0, Exited, 2),
        ]);
        let a = compute(&p, &o, &HashMap::new());
        assert!(a.pod_finished && a.start.is_empty());
    }

    #[test]
    fn a_fresh_sandbox_starts_over_from_the_first_init() {
        let p = pod("Always", &["s1"], &["a"]);
        let mut o = observed(vec![
            info(&p, "a", 0, Running, 0),
            info(&p, "s1", 0, Running, 0),
        ]);
        o.sandboxes[0].ready = false;
        let a = compute(&p, &o, &HashMap::new());
        assert!(a.kill_pod && a.create_sandbox);
        assert_eq!(started(&a), [(Init, 0)]);
        assert_eq!(a.start[0].restart_count, 1);
    }

    #[test]
    fn sidecars_stop_after_the_apps_in_reverse_order() {
        let p = pod("Always", &["s1", "i1", "s2", "s3"], &["a", "b"]);
        let order = stop_order(&p, &["a", "b", "s1", "s2", "s3"]);
        assert_eq!(order["s3"], ["a", "b"]);
        assert_eq!(order["s2"], ["a", "b", "s3"]);
        assert_eq!(order["s1"], ["a", "b", "s3", "s2"]);
        assert!(!order.contains_key("a"));
        // Only running containers are waited for.
        let order = stop_order(&p, &["b", "s1"]);
        assert_eq!(order["s1"], ["b"]);
        assert_eq!(order.len(), 1);
        assert!(stop_order(&pod("Always", &["i1"], &["a"]), &["a"]).is_empty());
    }
}
