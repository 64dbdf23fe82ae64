//! Kubernetes events about pods, with upstream's reasons. Without an API server they go to the
//! log; the recorder is the single place that will post them once the kubelet joins a cluster.

use k8s_openapi::api::core::v1::Pod;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

#[derive(Clone, Debug, Default)]
pub struct EventRecorder;

impl EventRecorder {
    pub fn pod(&self, pod: &Pod, kind: EventType, reason: &str, message: &str) {
        let meta = &pod.metadata;
        let object = format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        );
        match kind {
            EventType::Normal => {
                tracing::info!(target: "events", object, kind = "Pod", reason, message, "Event occurred")
            }
            EventType::Warning => {
                tracing::warn!(target: "events", object, kind = "Pod", reason, message, "Event occurred")
            }
        }
    }
}
