//! Pod sources and their merge.
//!
//! Each source (static-pod files now, the API server later) sends the complete set of pods it
//! currently wants as a [`SourceUpdate`]; [`merge::PodConfig`] turns those full sets into
//! add/update/remove diffs for the sync loop and tracks when every source has reported once.

pub mod api;
pub mod defaults;
pub mod file;
pub mod merge;
pub mod validation;

use k8s_openapi::api::core::v1::Pod;

pub use file::{FileSource, ManifestErrors, run_file_source};
pub use merge::{PodConfig, PodUpdate, run_pod_config};

/// Hash of the pod as the kubelet first saw it; for static pods this equals the UID.
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Which source ("file", "http", "api") delivered the pod.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// RFC 3339 time at which the kubelet first saw the pod.
pub const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// Present on mirror pods, the API-server copies of static pods.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Source names as upstream spells them in the config.source annotation.
pub const FILE_SOURCE: &str = "file";
pub const HTTP_SOURCE: &str = "http";
pub const API_SOURCE: &str = "api";

/// The complete set of pods one source wants right now.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceUpdate {
    pub source: &'static str,
    pub pods: Vec<Pod>,
}

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

pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// A pod the kubelet owns locally (file or http source) rather than one from the API server.
pub fn is_static_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s != API_SOURCE)
}

/// The API-server copy of a static pod, which the kubelet must never run itself.
pub fn is_mirror_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_MIRROR_ANNOTATION).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn pod(source: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web-node1".into());
        p.metadata.namespace = Some("kube-system".into());
        p.metadata.uid = Some("abc".into());
        if let Some(s) = source {
            p.metadata.annotations = Some(BTreeMap::from([(
                CONFIG_SOURCE_ANNOTATION.to_string(),
                s.to_string(),
            )]));
        }
        p
    }

    #[test]
    fn full_name_and_uid() {
        let p = pod(None);
        assert_eq!(pod_full_name(&p), "web-node1_kube-system");
        assert_eq!(pod_uid(&p), "abc");
        assert_eq!(pod_uid(&Pod::default()), "");
    }

    #[test]
    fn static_pod_detection() {
        assert!(is_static_pod(&pod(Some("file"))));
        assert!(is_static_pod(&pod(Some("http"))));
        assert!(!is_static_pod(&pod(Some("api"))));
        assert!(!is_static_pod(&pod(None)));
    }
}
