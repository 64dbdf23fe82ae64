//! The pod worker's spans, named and labelled as upstream's kubelet names them, each the root
//! of its own trace: one trace per sync of a pod.

use k8s_openapi::api::core::v1::Pod;
use tracing::Span;

use crate::telemetry::trace::{TARGET, set_attributes};

/// upstream's pod attributes: `k8s.pod.uid`, `k8s.pod` (namespace/name), `k8s.pod.name`,
/// `k8s.namespace.name`.
fn with_pod(span: Span, pod: &Pod) -> Span {
    if !crate::telemetry::trace::enabled() {
        return span;
    }
    let meta = &pod.metadata;
    let name = meta.name.as_deref().unwrap_or_default();
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    set_attributes(
        &span,
        [
            ("k8s.pod.uid", meta.uid.as_deref().unwrap_or_default()),
            ("k8s.pod", &format!("{namespace}/{name}")),
            ("k8s.pod.name", name),
            ("k8s.namespace.name", namespace),
        ],
    );
    span
}

/// `syncPod`; `update_type` is create, update or sync.
pub fn sync_pod(pod: &Pod, update_type: &'static str) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "syncPod",
        k8s.pod.update_type = update_type
    );
    with_pod(span, pod)
}

/// `syncTerminatingPod`: stopping the pod's containers.
pub fn sync_terminating_pod(pod: &Pod) -> Span {
    with_pod(
        tracing::info_span!(target: TARGET, parent: None, "syncTerminatingPod"),
        pod,
    )
}

/// `syncTerminatedPod`: removing what is left of a stopped pod.
pub fn sync_terminated_pod(pod: &Pod) -> Span {
    with_pod(
        tracing::info_span!(target: TARGET, parent: None, "syncTerminatedPod"),
        pod,
    )
}
