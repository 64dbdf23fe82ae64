//! The status a deleted pod ends with, as upstream's status manager makes it when the pod is
//! terminated: every container shows a terminated state and the phase is terminal, so a
//! watcher never sees a deleted pod vanish while it still looks Running.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
};

const UNKNOWN_REASON: &str = "ContainerStatusUnknown";
const UNKNOWN_MESSAGE: &str = "The container could not be located when the pod was terminated";

fn terminated(s: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    s.state.as_ref().and_then(|st| st.terminated.as_ref())
}

/// Since nothing can tell whether it would have succeeded, a container without a terminated
/// state is reported as failed (exit code 137), as upstream.
fn mark_unknown(s: &mut ContainerStatus) {
    if terminated(s).is_some() {
        return;
    }
    s.state = Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            reason: Some(UNKNOWN_REASON.into()),
            message: Some(UNKNOWN_MESSAGE.into()),
            exit_code: 137,
            ..Default::default()
        }),
        ..Default::default()
    });
    s.ready = false;
    s.started = Some(false);
}

/// Upstream's test for "the pod has initialized": no init containers, a regular container
/// that left waiting, or a last init container that succeeded.
fn initialized(status: &PodStatus, has_init_containers: bool) -> bool {
    if !has_init_containers {
        return true;
    }
    let left_waiting = status.container_statuses.iter().flatten().any(|s| {
        s.state.as_ref().is_some_and(|st| st.waiting.is_none())
            || s.last_state
                .as_ref()
                .is_some_and(|l| l.terminated.is_some())
    });
    let last_init_done = status
        .init_container_statuses
        .as_deref()
        .and_then(|i| i.last())
        .and_then(terminated)
        .is_some_and(|t| t.exit_code == 0);
    left_waiting || last_init_done
}

/// Makes `status` the one a deleted (non-static) pod ends with.
pub fn mark_terminal(status: &mut PodStatus, has_init_containers: bool) {
    // Before the pod initialized its app containers never had a chance: they stay waiting.
    if initialized(status, has_init_containers) {
        for s in status.container_statuses.iter_mut().flatten() {
            mark_unknown(s);
        }
    }
    // Init containers up to the last one that started; those after it never ran and stay
    // waiting, as upstream leaves them.
    if let Some(inits) = status.init_container_statuses.as_mut() {
        let started = inits
            .iter()
            .rposition(|s| s.container_id.is_some())
            .map_or(0, |i| i + 1);
        for s in &mut inits[..started] {
            mark_unknown(s);
        }
    }
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return;
    }
    let regular = status.container_statuses.as_deref().unwrap_or_default();
    let succeeded = !regular.is_empty()
        && regular
            .iter()
            .all(|s| terminated(s).is_some_and(|t| t.exit_code == 0));
    let (phase, reason) = if succeeded {
        ("Succeeded", "PodCompleted")
    } else {
        ("Failed", "PodFailed")
    };
    status.phase = Some(phase.into());
    for c in status.conditions.iter_mut().flatten() {
        if c.type_ == "Ready" || c.type_ == "ContainersReady" {
            c.status = "False".into();
            c.reason = Some(reason.into());
            c.message = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStateRunning, ContainerStateWaiting, PodCondition};

    fn status(name: &str, state: ContainerState, id: bool) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(state),
            container_id: id.then(|| format!("containerd://{name}")),
            ready: true,
            ..Default::default()
        }
    }

    fn exited(code: i32) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn waiting() -> ContainerState {
        ContainerState {
            waiting: Some(ContainerStateWaiting::default()),
            ..Default::default()
        }
    }

    #[test]
    fn a_killed_pod_fails_and_containers_that_never_ended_are_unknown() {
        let mut s = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![
                status("a", exited(143), true),
                status(
                    "b",
                    ContainerState {
                        running: Some(ContainerStateRunning::default()),
                        ..Default::default()
                    },
                    true,
                ),
            ]),
            init_container_statuses: Some(vec![
                status("i1", exited(0), true),
                status("i2", waiting(), true),
                status("i3", waiting(), false),
            ]),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        mark_terminal(&mut s, true);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let regular = s.container_statuses.as_ref().unwrap();
        assert_eq!(terminated(&regular[0]).unwrap().exit_code, 143);
        let b = terminated(&regular[1]).unwrap();
        assert_eq!(
            (b.exit_code, b.reason.as_deref()),
            (137, Some(UNKNOWN_REASON))
        );
        let inits = s.init_container_statuses.as_ref().unwrap();
        assert_eq!(terminated(&inits[0]).unwrap().exit_code, 0);
        assert_eq!(terminated(&inits[1]).unwrap().exit_code, 137);
        assert!(
            terminated(&inits[2]).is_none(),
            "never started: left waiting"
        );
        let ready = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("PodFailed"))
        );
    }

    #[test]
    fn app_containers_of_a_pod_that_never_initialized_stay_waiting() {
        let mut s = PodStatus {
            phase: Some("Pending".into()),
            container_statuses: Some(vec![status("a", waiting(), false)]),
            init_container_statuses: Some(vec![status("i1", waiting(), false)]),
            ..Default::default()
        };
        mark_terminal(&mut s, true);
        assert!(terminated(&s.container_statuses.as_ref().unwrap()[0]).is_none());
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        // Without init containers the pod counts as initialized: the app is "unknown".
        mark_terminal(&mut s, false);
        let a = terminated(&s.container_statuses.as_ref().unwrap()[0]).unwrap();
        assert_eq!(a.reason.as_deref(), Some(UNKNOWN_REASON));
    }

    #[test]
    fn all_succeeded_is_succeeded_and_a_terminal_phase_stays() {
        let mut s = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![status("a", exited(0), true)]),
            ..Default::default()
        };
        mark_terminal(&mut s, true);
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        let mut failed = PodStatus {
            phase: Some("Failed".into()),
            container_statuses: Some(vec![status("a", exited(0), true)]),
            ..Default::default()
        };
        mark_terminal(&mut failed, false);
        assert_eq!(failed.phase.as_deref(), Some("Failed"));
    }
}
