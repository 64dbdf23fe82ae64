//! Mirror pods: the API server's read-only copy of each static pod, so the cluster can see
//! it. Kept like upstream's mirror client: created when missing, replaced when its
//! config.mirror hash no longer matches the static pod (or it is being deleted), removed when
//! the static pod is gone. Owned by the Node, so deleting the node removes them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use tracing::{debug, info, warn};

use crate::sources::{
    CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION, MirrorPod, StaticPods, annotation,
};

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("API call timed out")]
    Timeout,
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Namespace and name, the key mirror pods are found by.
pub type PodName = (String, String);

fn pod_name(pod: &Pod) -> PodName {
    (
        pod.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// The mirror pod for `static_pod` on the node `node_name` with UID `node_uid`.
pub fn mirror_pod(static_pod: &Pod, node_name: &str, node_uid: &str) -> Pod {
    let m = &static_pod.metadata;
    let mut annotations: BTreeMap<String, String> = m.annotations.clone().unwrap_or_default();
    let hash = annotation(static_pod, CONFIG_HASH_ANNOTATION)
        .or(m.uid.as_deref())
        .unwrap_or_default()
        .to_string();
    annotations.insert(CONFIG_MIRROR_ANNOTATION.to_string(), hash);
    Pod {
        metadata: ObjectMeta {
            name: m.name.clone(),
            namespace: Some(pod_name(static_pod).0),
            labels: m.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node_name.to_string(),
                uid: node_uid.to_string(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: static_pod.spec.clone(),
        status: None,
    }
}

/// Whether `mirror` still stands for `static_pod`.
pub fn mirror_current(static_pod: &Pod, mirror: &Pod) -> bool {
    mirror.metadata.deletion_timestamp.is_none()
        && annotation(mirror, CONFIG_MIRROR_ANNOTATION).is_some()
        && annotation(mirror, CONFIG_MIRROR_ANNOTATION)
            == annotation(static_pod, CONFIG_HASH_ANNOTATION).or(static_pod.metadata.uid.as_deref())
}

/// Keeps mirror pods in step with the static pods and knows their UIDs for status patches.
pub struct MirrorManager {
    client: kube::Client,
    node_name: String,
    node_uid: Option<String>,
    /// Mirror pod UID by name, for every static pod whose mirror is current.
    mirrors: HashMap<PodName, String>,
}

async fn timed<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, MirrorError> {
    Ok(tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| MirrorError::Timeout)??)
}

fn is_code(err: &MirrorError, code: u16) -> bool {
    matches!(err, MirrorError::Api(kube::Error::Api(e)) if e.code == code)
}

impl MirrorManager {
    pub fn new(client: kube::Client, node_name: String) -> Self {
        MirrorManager {
            client,
            node_name,
            node_uid: None,
            mirrors: HashMap::new(),
        }
    }

    /// The UID of the current mirror pod of `static_pod`, as last seen.
    pub fn mirror_uid(&self, static_pod: &Pod) -> Option<&str> {
        self.mirrors.get(&pod_name(static_pod)).map(String::as_str)
    }

    async fn node_uid(&mut self) -> Option<String> {
        if self.node_uid.is_none() {
            let nodes: Api<Node> = Api::all(self.client.clone());
            match timed(nodes.get_opt(&self.node_name)).await {
                Ok(Some(node)) => self.node_uid = node.metadata.uid,
                Ok(None) => {
                    debug!(node = %self.node_name, "Node not registered yet; mirror pods wait")
                }
                Err(err) => warn!(%err, "Failed to read the node for mirror pods"),
            }
        }
        self.node_uid.clone()
    }

    /// Makes the API server hold a current mirror of `static_pod`.
    pub async fn ensure(&mut self, static_pod: &Pod) {
        let key = pod_name(static_pod);
        if let Err(err) = self.try_ensure(static_pod, &key).await {
            self.mirrors.remove(&key);
            if is_code(&err, 404) && self.node_uid.is_some() {
                // A recreated node has a new UID; read it again next time.
                self.node_uid = None;
            }
            warn!(pod = %format!("{}/{}", key.0, key.1), %err, "Failed to sync the mirror pod");
        }
    }

    async fn try_ensure(&mut self, static_pod: &Pod, key: &PodName) -> Result<(), MirrorError> {
        let (ns, name) = key;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        if let Some(existing) = timed(api.get_opt(name)).await? {
            if mirror_current(static_pod, &existing) {
                let uid = existing.metadata.uid.unwrap_or_default();
                self.mirrors.insert(key.clone(), uid);
                return Ok(());
            }
            if annotation(&existing, CONFIG_MIRROR_ANNOTATION).is_none() {
                // A regular pod took the name; it is not ours to replace.
                debug!(pod = %format!("{ns}/{name}"), "A non-mirror pod has the static pod's name");
                self.mirrors.remove(key);
                return Ok(());
            }
            self.mirrors.remove(key);
            if existing.metadata.deletion_timestamp.is_none() {
                info!(pod = %format!("{ns}/{name}"), "Replacing an outdated mirror pod");
            }
            delete_with_uid(&api, name, existing.metadata.uid.as_deref()).await?;
        }
        let Some(node_uid) = self.node_uid().await else {
            return Ok(());
        };
        let mirror = mirror_pod(static_pod, &self.node_name, &node_uid);
        match timed(api.create(&PostParams::default(), &mirror)).await {
            Ok(created) => {
                info!(pod = %format!("{ns}/{name}"), "Mirror pod created");
                self.mirrors
                    .insert(key.clone(), created.metadata.uid.unwrap_or_default());
                Ok(())
            }
            // The old one is still finishing its deletion; the next pass retries.
            Err(err) if is_code(&err, 409) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Removes the mirror pods of static pods that are gone.
    pub async fn remove_absent(&mut self, live: &[PodName]) {
        let gone: Vec<(PodName, String)> = self
            .mirrors
            .iter()
            .filter(|(k, _)| !live.contains(k))
            .map(|(k, uid)| (k.clone(), uid.clone()))
            .collect();
        for ((ns, name), uid) in gone {
            self.mirrors.remove(&(ns.clone(), name.clone()));
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            match delete_with_uid(&api, &name, Some(&uid)).await {
                Ok(()) => info!(pod = %format!("{ns}/{name}"), "Mirror pod deleted"),
                Err(err) => {
                    warn!(pod = %format!("{ns}/{name}"), %err, "Failed to delete the mirror pod")
                }
            }
        }
    }
}

/// Why a mirror pod the API server holds must go, if it must.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stale {
    /// No static pod of its name.
    Orphaned,
    /// Its static pod changed since it was made.
    Outdated,
}

/// Whether `mirror` must go: it stands for no static pod in `statics` or for another version of
/// it. Mirrors already being deleted, and those of static pods the kubelet runs or still stops
/// (`running`, kept by [`MirrorManager::ensure`]), are left alone.
pub fn stale(
    mirror: &MirrorPod,
    statics: &StaticPods,
    running: &HashSet<PodName>,
) -> Option<Stale> {
    let key = (mirror.namespace.clone(), mirror.name.clone());
    if mirror.deleting || running.contains(&key) {
        return None;
    }
    match statics.get(&key) {
        None => Some(Stale::Orphaned),
        Some(hash) if *hash != mirror.hash => Some(Stale::Outdated),
        Some(_) => None,
    }
}

impl MirrorManager {
    /// Deletes the mirror pods of `listed` (the API server's, for this node) that [`stale`]
    /// finds stale, each only if it still has the UID listed.
    pub async fn remove_stale(
        &mut self,
        listed: &[MirrorPod],
        statics: &StaticPods,
        running: &HashSet<PodName>,
    ) {
        for mirror in listed {
            let Some(why) = stale(mirror, statics, running) else {
                continue;
            };
            let (ns, name) = (&mirror.namespace, &mirror.name);
            let key = (ns.clone(), name.clone());
            if self.mirrors.get(&key) == Some(&mirror.uid) {
                self.mirrors.remove(&key);
            }
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            match delete_with_uid(&api, name, Some(&mirror.uid)).await {
                Ok(()) => {
                    info!(pod = %format!("{ns}/{name}"), reason = ?why, "Stale mirror pod deleted")
                }
                Err(err) => {
                    warn!(pod = %format!("{ns}/{name}"), %err, "Failed to delete a stale mirror pod")
                }
            }
        }
    }
}

/// Deletes a pod only if it is still the one with `uid`; gone or replaced counts as done.
async fn delete_with_uid(api: &Api<Pod>, name: &str, uid: Option<&str>) -> Result<(), MirrorError> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: uid.map(|u| Preconditions {
            uid: Some(u.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match timed(api.delete(name, &params)).await {
        Ok(_) => Ok(()),
        Err(err) if is_code(&err, 404) || is_code(&err, 409) => Ok(()),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn static_pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("etcd-node1".into());
        p.metadata.namespace = Some("kube-system".into());
        p.metadata.uid = Some("hash123".into());
        p.metadata.labels = Some(BTreeMap::from([("app".into(), "etcd".into())]));
        p.metadata.annotations = Some(BTreeMap::from([
            (CONFIG_HASH_ANNOTATION.into(), "hash123".into()),
            ("kubernetes.io/config.source".into(), "file".into()),
        ]));
        p.spec = Some(PodSpec {
            node_name: Some("node1".into()),
            containers: vec![Container {
                name: "c".into(),
                image: Some("busybox".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        p.status = Some(Default::default());
        p
    }

    #[test]
    fn mirror_pod_copies_the_static_pod_and_is_owned_by_the_node() {
        let s = static_pod();
        let m = mirror_pod(&s, "node1", "node-uid");
        assert_eq!(m.metadata.name.as_deref(), Some("etcd-node1"));
        assert_eq!(m.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(m.metadata.uid, None, "the API server assigns the UID");
        assert_eq!(m.metadata.labels, s.metadata.labels);
        let a = m.metadata.annotations.clone().unwrap();
        assert_eq!(
            a.get(CONFIG_MIRROR_ANNOTATION).map(String::as_str),
            Some("hash123")
        );
        assert_eq!(
            a.get("kubernetes.io/config.source").map(String::as_str),
            Some("file")
        );
        assert_eq!(m.spec, s.spec);
        assert!(m.status.is_none());
        let owners = m.metadata.owner_references.clone().unwrap();
        assert_eq!(owners.len(), 1);
        let o = &owners[0];
        assert_eq!((o.api_version.as_str(), o.kind.as_str()), ("v1", "Node"));
        assert_eq!((o.name.as_str(), o.uid.as_str()), ("node1", "node-uid"));
        assert_eq!(o.controller, Some(true));
        assert!(mirror_current(&s, &m));
    }

    #[test]
    fn a_mirror_is_outdated_when_the_hash_changes_or_it_is_being_deleted() {
        let s = static_pod();
        let mut m = mirror_pod(&s, "node1", "u");
        let mut changed = s.clone();
        changed
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CONFIG_HASH_ANNOTATION.into(), "other".into());
        assert!(!mirror_current(&changed, &m));
        m.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(!mirror_current(&s, &m));
        // A regular pod with the same name is never taken for the mirror.
        let mut plain = s.clone();
        plain.metadata.annotations = None;
        assert!(!mirror_current(&s, &plain));
    }

    #[test]
    fn stale_mirrors_are_orphans_or_outdated_unless_running_or_being_deleted() {
        let m = |name: &str, hash: &str, deleting| MirrorPod {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            hash: hash.into(),
            deleting,
        };
        let statics = StaticPods::from([(("ns".into(), "a".into()), "h1".into())]);
        let none = HashSet::new();
        assert_eq!(stale(&m("a", "h1", false), &statics, &none), None);
        assert_eq!(
            stale(&m("a", "h0", false), &statics, &none),
            Some(Stale::Outdated)
        );
        assert_eq!(
            stale(&m("b", "h1", false), &statics, &none),
            Some(Stale::Orphaned)
        );
        assert_eq!(stale(&m("b", "h1", true), &statics, &none), None);
        // A static pod still stopping keeps its mirror until ensure lets it go.
        let running = HashSet::from([("ns".to_string(), "b".to_string())]);
        assert_eq!(stale(&m("b", "h1", false), &statics, &running), None);
        // The same name in another namespace is another pod.
        let other = MirrorPod {
            namespace: "other".into(),
            ..m("a", "h1", false)
        };
        assert_eq!(stale(&other, &statics, &none), Some(Stale::Orphaned));
    }

    #[test]
    fn pods_without_a_namespace_mirror_into_default() {
        let mut s = static_pod();
        s.metadata.namespace = None;
        let m = mirror_pod(&s, "node1", "u");
        assert_eq!(m.metadata.namespace.as_deref(), Some("default"));
    }
}
