//! What starting pods and containers adds to /metrics: kubelet_started_pods_total and
//! kubelet_started_containers_total by upstream's container type.

use k8s_openapi::api::core::v1::Pod;

/// A pod sandbox is about to be created.
pub fn record_pod_started() {
    crate::metrics::kubelet().started_pods.inc(&[]);
}

/// A container of `pod` is about to be created; its type as upstream labels it.
pub fn record_container_started(pod: &Pod, container: &str) {
    let spec = pod.spec.as_ref();
    let in_list = |l: Option<&Vec<k8s_openapi::api::core::v1::Container>>| {
        l.is_some_and(|l| l.iter().any(|c| c.name == container))
    };
    let kind = if in_list(spec.and_then(|s| s.init_containers.as_ref())) {
        "init_container"
    } else if spec
        .and_then(|s| s.ephemeral_containers.as_ref())
        .is_some_and(|l| l.iter().any(|c| c.name == container))
    {
        "ephemeral_container"
    } else {
        "container"
    };
    crate::metrics::kubelet().started_containers.inc(&[kind]);
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    use super::*;
    use crate::metrics::kubelet;

    fn pod(containers: &[&str], init: &[&str]) -> Pod {
        let c = |n: &&str| Container {
            name: n.to_string(),
            ..Default::default()
        };
        Pod {
            spec: Some(PodSpec {
                containers: containers.iter().map(c).collect(),
                init_containers: Some(init.iter().map(c).collect()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn container_types() {
        let p = pod(&["app"], &["setup"]);
        let m = kubelet();
        let before = m.started_containers.get(&["init_container"]).unwrap_or(0.0);
        record_container_started(&p, "setup");
        assert!(m.started_containers.get(&["init_container"]).unwrap_or(0.0) > before);
        let before = m.started_containers.get(&["container"]).unwrap_or(0.0);
        record_container_started(&p, "app");
        assert!(m.started_containers.get(&["container"]).unwrap_or(0.0) > before);
    }
}
