//! The pod worker's spans, named and labelled as upstream's kubelet names them, each the root
//! of its own trace: one trace per sync of a pod.

use k8s_openapi::api::core::v1::Pod;
use tracing::Span;
use tracing::field::Empty;

use crate::telemetry::trace::TARGET;

struct PodRef<'a> {
    uid: &'a str,
    name: &'a str,
    namespace: &'a str,
}

fn pod_ref(pod: &Pod) -> PodRef<'_> {
    PodRef {
        uid: pod.metadata.uid.as_deref().unwrap_or_default(),
        name: pod.metadata.name.as_deref().unwrap_or_default(),
        namespace: pod.metadata.namespace.as_deref().unwrap_or_default(),
    }
}

/// `syncPod`; `update_type` is create, update or sync.
pub fn sync_pod(pod: &Pod, update_type: &'static str) -> Span {
    let p = pod_ref(pod);
    tracing::info_span!(
        target: TARGET,
        parent: None,
        "syncPod",
        k8s.pod.uid = p.uid,
        k8s.pod = %format_args!("{}/{}", p.namespace, p.name),
        k8s.pod.name = p.name,
        k8s.namespace.name = p.namespace,
        k8s.pod.update_type = update_type,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// `syncTerminatingPod`: stopping the pod's containers.
pub fn sync_terminating_pod(pod: &Pod) -> Span {
    let p = pod_ref(pod);
    tracing::info_span!(
        target: TARGET,
        parent: None,
        "syncTerminatingPod",
        k8s.pod.uid = p.uid,
        k8s.pod = %format_args!("{}/{}", p.namespace, p.name),
        k8s.pod.name = p.name,
        k8s.namespace.name = p.namespace,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// `syncTerminatedPod`: removing what is left of a stopped pod.
pub fn sync_terminated_pod(pod: &Pod) -> Span {
    let p = pod_ref(pod);
    tracing::info_span!(
        target: TARGET,
        parent: None,
        "syncTerminatedPod",
        k8s.pod.uid = p.uid,
        k8s.pod = %format_args!("{}/{}", p.namespace, p.name),
        k8s.pod.name = p.name,
        k8s.namespace.name = p.namespace,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}
