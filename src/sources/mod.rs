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

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use file::FileSource;
pub use merge::{PodConfig, PodUpdate, run_pod_config};

/// The pod sources the kubelet configuration turns on.
#[derive(Clone, Debug)]
pub struct SourceSettings {
    pub node_name: String,
    /// `staticPodPath`, when set.
    pub static_pod_path: Option<PathBuf>,
    pub file_check_frequency: Duration,
}

impl From<&crate::config::Settings> for SourceSettings {
    fn from(settings: &crate::config::Settings) -> Self {
        let cfg = &settings.config;
        SourceSettings {
            node_name: settings.node_name(),
            static_pod_path: Some(PathBuf::from(&cfg.static_pod_path))
                .filter(|_| !cfg.static_pod_path.is_empty()),
            file_check_frequency: cfg.file_check_frequency.0,
        }
    }
}

/// A mirror pod bound to this node, as the API server's watch last showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Its config.mirror annotation: the config hash of the static pod it was made for.
    pub hash: String,
    pub deleting: bool,
}

/// The static pods the sources want, by namespace and name, with their config hash (what
/// their mirror pods' config.mirror annotation must say).
pub type StaticPods = BTreeMap<(String, String), String>;

/// What the sources tell the rest of the kubelet.
pub struct Updates {
    /// Merged updates for the sync loop.
    pub pods: mpsc::Receiver<PodUpdate>,
    /// True once every source has reported its first set.
    pub ready: watch::Receiver<bool>,
    /// The static pods, once every source has reported (None before).
    pub static_pods: watch::Receiver<Option<Arc<StaticPods>>>,
    /// The mirror pods bound to this node, once the API source has listed them (None before,
    /// and always without an API server): what the API server holds, whatever the kubelet
    /// remembers, so that a restarted kubelet finds the mirror pods it made before.
    pub mirror_pods: watch::Receiver<Option<Arc<Vec<MirrorPod>>>>,
}

/// Starts the static-pod files and, with an API server, the pods bound to this node, each
/// feeding the merge, in `tasks`.
pub fn spawn(
    s: SourceSettings,
    client: Option<&kube::Client>,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> Updates {
    let (source_tx, source_rx) = mpsc::channel(16);
    let (updates_tx, updates_rx) = mpsc::channel(64);
    let (mirrors_tx, mirror_pods) = watch::channel(None);
    let mut sources: Vec<&'static str> = Vec::new();
    if let Some(path) = s.static_pod_path {
        sources.push(FILE_SOURCE);
        let files = FileSource::new(path, s.node_name.clone(), s.file_check_frequency);
        tasks.critical(
            "static pod files",
            files.run(source_tx.clone(), cancel.child_token()),
        );
    }
    if let Some(client) = client {
        sources.push(API_SOURCE);
        let watch = api::run_api_source(
            client.clone(),
            s.node_name,
            source_tx.clone(),
            mirrors_tx,
            cancel.child_token(),
        );
        tasks.critical("API pod source", watch);
    }
    drop(source_tx);
    let config = PodConfig::new(&sources);
    let ready = config.ready_watch();
    let static_pods = config.static_pods_watch();
    let merge = run_pod_config(config, source_rx, updates_tx, cancel.child_token());
    // With no source at all the merge has nothing to do and ends at once.
    if sources.is_empty() {
        tasks.background("pod config", merge);
    } else {
        tasks.critical("pod config", merge);
    }
    Updates {
        pods: updates_rx,
        ready,
        static_pods,
        mirror_pods,
    }
}

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
pub const API_SOURCE: &str = "api";

/// The complete set of pods one source wants right now.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceUpdate {
    pub source: &'static str,
    pub pods: Vec<Pod>,
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
    fn static_pod_detection() {
        assert!(is_static_pod(&pod(Some("file"))));
        assert!(is_static_pod(&pod(Some("http"))));
        assert!(!is_static_pod(&pod(Some("api"))));
        assert!(!is_static_pod(&pod(None)));
    }
}
