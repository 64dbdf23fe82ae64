//! Finding the pod and container a request names, from what the kubelet runs right now.
//! Every endpoint that takes {namespace}/{pod}[/{uid}]/{container} goes through here so
//! they agree on what "not found" means.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::ServerState;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LookupError {
    #[error("pod {namespace}/{name} not found")]
    PodNotFound { namespace: String, name: String },
    #[error("container {container} is not valid for pod {pod}")]
    ContainerNotFound { pod: String, container: String },
    #[error("container {container} in pod {pod} has not started")]
    NotStarted { pod: String, container: String },
    #[error("previous terminated container {container} in pod {pod} not found")]
    NoPrevious { pod: String, container: String },
}

/// The pod named `namespace/name` (and `uid`, when the path carries one), with its status.
pub fn find_pod(
    state: &ServerState,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<Pod, LookupError> {
    state
        .status
        .find(namespace, name, uid)
        .ok_or_else(|| LookupError::PodNotFound {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
}

/// The runtime's ID (without the `containerd://` prefix) of `container` in `pod`: the current
/// instance, or with `previous` the last terminated one. Init and ephemeral containers count.
pub fn container_id(pod: &Pod, container: &str, previous: bool) -> Result<String, LookupError> {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let in_spec = pod.spec.as_ref().is_some_and(|s| {
        s.containers.iter().any(|c| c.name == container)
            || s.init_containers
                .iter()
                .flatten()
                .any(|c| c.name == container)
            || s.ephemeral_containers
                .iter()
                .flatten()
                .any(|c| c.name == container)
    });
    if !in_spec {
        return Err(LookupError::ContainerNotFound {
            pod: pod_name,
            container: container.to_string(),
        });
    }
    let status = statuses(pod).find(|s| s.name == container);
    let id = if previous {
        status
            .and_then(|s| s.last_state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.container_id.clone())
            .ok_or_else(|| LookupError::NoPrevious {
                pod: pod_name.clone(),
                container: container.to_string(),
            })?
    } else {
        status
            .and_then(|s| s.container_id.clone())
            .ok_or_else(|| LookupError::NotStarted {
                pod: pod_name.clone(),
                container: container.to_string(),
            })?
    };
    Ok(strip_runtime(&id).to_string())
}

fn statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let s = pod.status.as_ref();
    let lists = [
        s.and_then(|s| s.container_statuses.as_ref()),
        s.and_then(|s| s.init_container_statuses.as_ref()),
        s.and_then(|s| s.ephemeral_container_statuses.as_ref()),
    ];
    lists.into_iter().flatten().flatten()
}

/// `containerd://abc` → `abc`; an ID without a scheme is returned as it is.
pub fn strip_runtime(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, rest)| rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateTerminated, PodSpec, PodStatus,
    };

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                ..Default::default()
            }],
            init_containers: Some(vec![Container {
                name: "setup".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p.status = Some(PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                container_id: Some("containerd://cur".into()),
                last_state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        container_id: Some("containerd://old".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            init_container_statuses: Some(vec![ContainerStatus {
                name: "setup".into(),
                container_id: Some("containerd://init".into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    #[test]
    fn current_previous_and_init_containers() {
        let p = pod();
        assert_eq!(container_id(&p, "app", false).unwrap(), "cur");
        assert_eq!(container_id(&p, "app", true).unwrap(), "old");
        assert_eq!(container_id(&p, "setup", false).unwrap(), "init");
        assert!(matches!(
            container_id(&p, "setup", true),
            Err(LookupError::NoPrevious { .. })
        ));
    }

    #[test]
    fn unknown_container_is_not_found() {
        assert!(matches!(
            container_id(&pod(), "nope", false),
            Err(LookupError::ContainerNotFound { .. })
        ));
    }

    #[test]
    fn strip_runtime_keeps_bare_ids() {
        assert_eq!(strip_runtime("containerd://x"), "x");
        assert_eq!(strip_runtime("x"), "x");
    }
}
