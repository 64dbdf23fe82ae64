//! /runningpods/: what the container runtime is running right now (ready sandboxes and
//! running containers, grouped into pods by their kubelet labels), as a v1 PodList. Unlike
//! /pods this is the runtime's view, not the kubelet's desired state; each pod carries only
//! its identity and its containers' names and images, as upstream's.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::{Container as ApiContainer, Pod, PodSpec};

use super::ServerState;
use crate::cri::api;
use crate::runtime::labels;

pub async fn list(State(state): State<ServerState>) -> Response {
    match running_pods(&state).await {
        Ok(items) => super::pods::pod_list(items),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response(),
    }
}

async fn running_pods(state: &ServerState) -> Result<Vec<Pod>, crate::cri::CriError> {
    let sandboxes = state
        .cri
        .list_pod_sandbox(Some(api::PodSandboxFilter {
            state: Some(api::PodSandboxStateValue {
                state: api::PodSandboxState::SandboxReady as i32,
            }),
            ..Default::default()
        }))
        .await?;
    let containers = state
        .cri
        .list_containers(Some(api::ContainerFilter {
            state: Some(api::ContainerStateValue {
                state: api::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        }))
        .await?;
    Ok(group(&sandboxes, &containers))
}

struct Running {
    pod: Pod,
    created_at: i64,
}

fn new_pod(uid: &str, name: &str, namespace: &str) -> Running {
    let mut pod = Pod::default();
    pod.metadata.uid = Some(uid.to_string());
    pod.metadata.name = Some(name.to_string());
    pod.metadata.namespace = Some(namespace.to_string());
    pod.spec = Some(PodSpec::default());
    Running { pod, created_at: 0 }
}

/// Pods by UID: sandboxes give identity, containers join by their pod labels (a container
/// whose sandbox is gone still shows up, under the pod its labels name). Newest pod first.
pub fn group(sandboxes: &[api::PodSandbox], containers: &[api::Container]) -> Vec<Pod> {
    let mut pods: HashMap<String, Running> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for s in sandboxes {
        let Some(meta) = &s.metadata else { continue };
        let entry = pods.entry(meta.uid.clone()).or_insert_with(|| {
            order.push(meta.uid.clone());
            new_pod(&meta.uid, &meta.name, &meta.namespace)
        });
        entry.created_at = entry.created_at.max(s.created_at);
    }
    for c in containers {
        let Some(meta) = &c.metadata else { continue };
        let label = |k: &str| c.labels.get(k).map(String::as_str).unwrap_or_default();
        let uid = label(labels::POD_UID);
        let entry = pods.entry(uid.to_string()).or_insert_with(|| {
            order.push(uid.to_string());
            new_pod(uid, label(labels::POD_NAME), label(labels::POD_NAMESPACE))
        });
        if let Some(spec) = entry.pod.spec.as_mut() {
            spec.containers.push(ApiContainer {
                name: meta.name.clone(),
                image: c.image.as_ref().map(|i| i.image.clone()),
                ..Default::default()
            });
        }
    }
    let mut out: Vec<Running> = order.iter().filter_map(|uid| pods.remove(uid)).collect();
    out.sort_by_key(|r| std::cmp::Reverse(r.created_at));
    out.into_iter().map(|r| r.pod).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(uid: &str, name: &str, created_at: i64) -> api::PodSandbox {
        api::PodSandbox {
            id: format!("sb-{uid}"),
            metadata: Some(api::PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            created_at,
            ..Default::default()
        }
    }

    fn container(uid: &str, pod: &str, name: &str, image: &str) -> api::Container {
        api::Container {
            id: format!("c-{name}"),
            metadata: Some(api::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            labels: [
                (labels::POD_UID, uid),
                (labels::POD_NAME, pod),
                (labels::POD_NAMESPACE, "kube-system"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn containers_join_their_sandbox_and_newest_pod_comes_first() {
        let pods = group(
            &[sandbox("u1", "old", 10), sandbox("u2", "new", 20)],
            &[
                container("u1", "old", "app", "busybox"),
                container("u1", "old", "side", "pause"),
                container("u3", "orphan", "lost", "img"),
            ],
        );
        let names: Vec<_> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, vec!["new", "old", "orphan"]);
        let old = &pods[1];
        assert_eq!(old.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(old.metadata.namespace.as_deref(), Some("default"));
        let spec = old.spec.as_ref().unwrap();
        let cs: Vec<_> = spec
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.image.as_deref().unwrap_or_default()))
            .collect();
        assert_eq!(cs, vec![("app", "busybox"), ("side", "pause")]);
        assert!(pods[0].spec.as_ref().unwrap().containers.is_empty());
        assert_eq!(pods[2].metadata.namespace.as_deref(), Some("kube-system"));
    }
}
