//! One container's API status from what the runtime shows, the kubelet's own waiting reasons
//! and the probes; the pod-level phase and conditions are computed from these.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::generate::PodStatusInput;
use crate::pod::is_sidecar;
use crate::probe;
use crate::runtime::observed::{ContainerInfo, ContainerState};

pub(super) fn time(t: SystemTime) -> Option<Time> {
    jiff::Timestamp::try_from(t).ok().map(Time)
}

fn nanos_time(nanos: i64) -> Option<Time> {
    crate::runtime::observed::nanos_to_time(nanos).and_then(time)
}

fn terminated(c: &ContainerInfo, runtime_name: &str) -> ContainerStateTerminated {
    let reason = if !c.reason.is_empty() {
        c.reason.clone()
    } else if c.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    ContainerStateTerminated {
        exit_code: c.exit_code,
        reason: Some(reason),
        message: Some(c.message.clone()).filter(|m| !m.is_empty()),
        started_at: nanos_time(c.started_at),
        finished_at: nanos_time(c.finished_at),
        container_id: Some(format!("{runtime_name}://{}", c.id)),
        signal: None,
    }
}

fn waiting_state(reason: &str, message: Option<String>) -> ApiState {
    ApiState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message,
        }),
        ..Default::default()
    }
}

pub(super) fn container_status(
    spec: &Container,
    input: &PodStatusInput<'_>,
    default_waiting: &str,
    init: bool,
) -> ContainerStatus {
    let newest = input.observed.newest_container(&spec.name);
    let previous = input.observed.previous_container(&spec.name);
    let rt = input.runtime_name;
    let last_terminated = |c: Option<&ContainerInfo>| {
        c.filter(|c| c.state == ContainerState::Exited)
            .map(|c| ApiState {
                terminated: Some(terminated(c, rt)),
                ..Default::default()
            })
    };
    let (state, last_state) = match (input.waiting.get(&spec.name), newest) {
        (Some(w), Some(n)) if n.state == ContainerState::Exited => (
            waiting_state(&w.reason, Some(w.message.clone())),
            last_terminated(Some(n)),
        ),
        (Some(w), _) => (
            waiting_state(&w.reason, Some(w.message.clone())),
            last_terminated(previous),
        ),
        (None, Some(n)) if n.state == ContainerState::Running => (
            ApiState {
                running: Some(ContainerStateRunning {
                    started_at: nanos_time(n.started_at),
                }),
                ..Default::default()
            },
            last_terminated(previous),
        ),
        (None, Some(n)) if n.state == ContainerState::Exited => (
            ApiState {
                terminated: Some(terminated(n, rt)),
                ..Default::default()
            },
            last_terminated(previous),
        ),
        (None, _) => (
            waiting_state(default_waiting, None),
            last_terminated(previous),
        ),
    };
    let running = state.running.is_some();
    let (ready, started) = if init && !is_sidecar(spec) {
        // A plain init container is ready once it completed, as upstream reports it; a
        // sidecar follows its probes like an app container.
        let done = state.terminated.as_ref().is_some_and(|t| t.exit_code == 0);
        (done, running)
    } else {
        let view = probe::view(spec, running, newest.and_then(|n| input.probes.get(&n.id)));
        (view.ready, view.started)
    };
    let (allocated_resources, resources) = super::resize::container_resources(
        spec,
        newest
            .filter(|n| n.state == ContainerState::Running)
            .map(|n| n.id.as_str()),
        &input.resize,
    );
    ContainerStatus {
        name: spec.name.clone(),
        allocated_resources,
        resources,
        image: spec.image.clone().unwrap_or_default(),
        image_id: newest.map(|n| n.image_ref.clone()).unwrap_or_default(),
        container_id: newest.map(|n| format!("{rt}://{}", n.id)),
        restart_count: newest.map(|n| n.attempt as i32).unwrap_or(0),
        ready,
        started: Some(started),
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        ..Default::default()
    }
}
