//! What can be read off a pod spec alone, used across the kubelet: its names, its sidecars,
//! its hostname, its QoS class and resource totals, and where its files live on the node.
//! A leaf: it imports no other subsystem.

pub mod hostname;
pub mod node_selector;
pub mod paths;
pub mod qos;

use k8s_openapi::api::core::v1::{Container, Pod};

/// `<name>_<namespace>`, the key upstream uses in logs and for static/mirror pod matching.
pub fn pod_full_name(pod: &Pod) -> String {
    format!(
        "{}_{}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default()
    )
}

pub fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// An init container that keeps running beside the app containers.
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

pub fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
}

/// The containers a pod runs, init containers first, each with whether it is a plain init
/// container (one that runs to completion before the next starts, so what it held can be
/// handed on).
pub fn containers_in_order(pod: &Pod) -> Vec<(&Container, bool)> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let inits = spec.init_containers.iter().flatten();
    inits
        .map(|c| (c, !is_sidecar(c)))
        .chain(spec.containers.iter().map(|c| (c, false)))
        .collect()
}

pub fn has_sidecars(pod: &Pod) -> bool {
    init_containers(pod).iter().any(is_sidecar)
}

pub fn is_sidecar_name(pod: &Pod, name: &str) -> bool {
    init_containers(pod)
        .iter()
        .any(|c| c.name == name && is_sidecar(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_name_and_uid() {
        let mut p = Pod::default();
        p.metadata.name = Some("web-node1".into());
        p.metadata.namespace = Some("kube-system".into());
        p.metadata.uid = Some("abc".into());
        assert_eq!(pod_full_name(&p), "web-node1_kube-system");
        assert_eq!(pod_uid(&p), "abc");
        assert_eq!(pod_uid(&Pod::default()), "");
    }
}
