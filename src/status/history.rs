//! A container's history that the runtime no longer shows: when the runtime has no container
//! of a name (it lost them, or removed them), the status keeps what was reported before (the
//! restart count, the last termination, a terminated state), as upstream's kubelet takes its
//! old statuses as the defaults. Before a restart "what was reported" is the pod status the API
//! server holds; after it, the status this kubelet reported last.

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};

fn carry_list(previous: Option<&Vec<ContainerStatus>>, new: Option<&mut Vec<ContainerStatus>>) {
    let (Some(previous), Some(new)) = (previous, new) else {
        return;
    };
    for status in new.iter_mut().filter(|s| s.container_id.is_none()) {
        let Some(before) = previous.iter().find(|p| p.name == status.name) else {
            continue;
        };
        let ended = before
            .state
            .as_ref()
            .is_some_and(|s| s.terminated.is_some());
        if ended {
            // Ended before and gone from the runtime since: it stays ended, as reported.
            *status = before.clone();
            continue;
        }
        status.restart_count = status.restart_count.max(before.restart_count);
        if status
            .last_state
            .as_ref()
            .is_none_or(|l| *l == Default::default())
        {
            status.last_state = before.last_state.clone();
        }
    }
}

/// Fills in, from `previous`, what `new` cannot know of containers the runtime does not have.
pub fn carry_container_history(previous: &PodStatus, new: &mut PodStatus) {
    carry_list(
        previous.init_container_statuses.as_ref(),
        new.init_container_statuses.as_mut(),
    );
    carry_list(
        previous.container_statuses.as_ref(),
        new.container_statuses.as_mut(),
    );
    carry_list(
        previous.ephemeral_container_statuses.as_ref(),
        new.ephemeral_container_statuses.as_mut(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting,
    };

    fn waiting(name: &str, id: Option<&str>, restarts: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            container_id: id.map(str::to_string),
            restart_count: restarts,
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ContainerCreating".into()),
                    message: None,
                }),
                ..Default::default()
            }),
            last_state: Some(ContainerState::default()),
            ..Default::default()
        }
    }

    fn terminated(reason: &str) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                reason: Some(reason.into()),
                exit_code: 1,
                container_id: Some("containerd://old".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn what_the_runtime_lost_is_taken_from_the_last_report() {
        let mut crashed = waiting("app", Some("containerd://old"), 4);
        crashed.last_state = Some(terminated("Error"));
        let mut init = waiting("init", Some("containerd://i"), 0);
        init.state = Some(terminated("Completed"));
        let previous = PodStatus {
            container_statuses: Some(vec![crashed.clone(), waiting("kept", Some("c://k"), 2)]),
            init_container_statuses: Some(vec![init.clone()]),
            ..Default::default()
        };
        let mut new = PodStatus {
            container_statuses: Some(vec![
                waiting("app", None, 0),
                waiting("kept", Some("c://k2"), 0),
            ]),
            init_container_statuses: Some(vec![waiting("init", None, 0)]),
            ..Default::default()
        };
        carry_container_history(&previous, &mut new);
        let app = &new.container_statuses.as_ref().unwrap()[0];
        assert_eq!(app.restart_count, 4);
        assert_eq!(app.last_state, Some(terminated("Error")));
        assert!(app.state.as_ref().unwrap().waiting.is_some(), "{app:?}");
        // The runtime has a container of this name: what it says stands.
        let kept = &new.container_statuses.as_ref().unwrap()[1];
        assert_eq!(kept.restart_count, 0);
        assert_eq!(new.init_container_statuses.unwrap()[0], init);
    }
}
