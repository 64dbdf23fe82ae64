//! Merges the full pod sets of every source into add/update/remove events.
//!
//! Each source always reports its complete set; this module remembers the last set per source
//! (keyed by UID) and emits only what changed. Pods are handed out as `Arc<Pod>` so consumers
//! share them without copying.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{
    API_SOURCE, CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION, CONFIG_SEEN_ANNOTATION,
    CONFIG_SOURCE_ANNOTATION, SourceUpdate, StaticPods, annotation,
};
use crate::pod::{pod_full_name, pod_uid};

#[derive(Clone, Debug, PartialEq)]
pub enum PodUpdate {
    Add(Vec<Arc<Pod>>),
    Update(Vec<Arc<Pod>>),
    Remove(Vec<Arc<Pod>>),
}

/// The merged view of all sources.
pub struct PodConfig {
    /// Pods per source, by UID.
    pods: HashMap<&'static str, HashMap<String, Arc<Pod>>>,
    /// Which source owns each UID; the first source to report a UID keeps it.
    owner: HashMap<String, &'static str>,
    expected: BTreeSet<&'static str>,
    seen_sources: BTreeSet<&'static str>,
    ready: watch::Sender<bool>,
    /// The static pods, published once every source is ready.
    statics: watch::Sender<Option<Arc<StaticPods>>>,
}

impl PodConfig {
    /// `sources` are the sources that are configured; the config is "ready" once each has
    /// reported at least once.
    pub fn new(sources: &[&'static str]) -> Self {
        let expected: BTreeSet<_> = sources.iter().copied().collect();
        let (ready, _) = watch::channel(expected.is_empty());
        PodConfig {
            pods: HashMap::new(),
            owner: HashMap::new(),
            expected,
            seen_sources: BTreeSet::new(),
            ready,
            statics: watch::channel(None).0,
        }
    }

    /// True once every configured source delivered its first set. Until then the kubelet
    /// must not treat unknown running pods as orphans.
    pub fn sources_ready(&self) -> bool {
        self.expected.is_subset(&self.seen_sources)
    }

    /// Tells watchers that every source has spoken. Called only after the events of the
    /// completing update were delivered, so nobody sees "ready" while a pod is still in flight
    /// (the sync loop would take its running containers for orphans).
    pub fn publish_ready(&self) {
        if !self.sources_ready() {
            return;
        }
        // Before "ready": whoever waits for it finds the static pods already there.
        let statics = self.static_pods();
        self.statics.send_if_modified(|old| {
            let changed = old.as_deref() != Some(&statics);
            if changed {
                *old = Some(Arc::new(statics));
            }
            changed
        });
        if !*self.ready.borrow() {
            info!(sources = ?self.expected, "All pod sources are ready");
            self.ready.send_replace(true);
        }
    }

    /// The pods of every source but the API server, by namespace and name, with the hash their
    /// mirror pods carry (as [`crate::status::mirror::mirror_pod`] writes it).
    fn static_pods(&self) -> StaticPods {
        self.pods
            .iter()
            .filter(|(source, _)| **source != API_SOURCE)
            .flat_map(|(_, pods)| pods.values())
            .map(|pod| {
                let m = &pod.metadata;
                let key = (
                    m.namespace.clone().unwrap_or_else(|| "default".into()),
                    m.name.clone().unwrap_or_default(),
                );
                let hash = annotation(pod, CONFIG_HASH_ANNOTATION).unwrap_or(pod_uid(pod));
                (key, hash.to_string())
            })
            .collect()
    }

    /// Follows the static pods: None until every source is ready.
    pub fn static_pods_watch(&self) -> watch::Receiver<Option<Arc<StaticPods>>> {
        self.statics.subscribe()
    }

    /// Follows [`PodConfig::sources_ready`].
    pub fn ready_watch(&self) -> watch::Receiver<bool> {
        self.ready.subscribe()
    }

    #[cfg(test)]
    pub fn seen_source(&self, source: &str) -> bool {
        self.seen_sources.contains(source)
    }

    /// All pods currently known, across sources.
    #[cfg(test)]
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    /// Applies one source's full set and returns the events, removes first, then adds, then
    /// updates (the order upstream delivers them in).
    pub fn apply(&mut self, update: SourceUpdate) -> Vec<PodUpdate> {
        let source = update.source;
        self.mark_seen(source);
        let mut old = self.pods.remove(source).unwrap_or_default();
        let mut current: HashMap<String, Arc<Pod>> = HashMap::with_capacity(update.pods.len());
        let mut adds = Vec::new();
        let mut updates = Vec::new();

        for mut pod in update.pods {
            let uid = pod_uid(&pod).to_string();
            if uid.is_empty() {
                warn!(source, pod = %pod_full_name(&pod), "Ignoring pod without UID");
                continue;
            }
            if current.contains_key(&uid) {
                warn!(source, pod = %pod_full_name(&pod), %uid, "Ignoring pod with duplicate UID in one update");
                continue;
            }
            match self.owner.get(&uid) {
                Some(owner) if *owner != source => {
                    warn!(source, owner, pod = %pod_full_name(&pod), %uid,
                          "Pod UID already provided by another source, ignoring this copy");
                    continue;
                }
                _ => {}
            }
            let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
            annotations.insert(CONFIG_SOURCE_ANNOTATION.to_string(), source.to_string());
            match old.remove(&uid) {
                None => {
                    annotations
                        .entry(CONFIG_SEEN_ANNOTATION.to_string())
                        .or_insert_with(|| jiff::Timestamp::now().to_string());
                    let pod = Arc::new(pod);
                    self.owner.insert(uid.clone(), source);
                    adds.push(Arc::clone(&pod));
                    current.insert(uid, pod);
                }
                Some(existing) => {
                    // First-seen time belongs to the pod's first appearance, not this update.
                    if let Some(seen) = annotation(&existing, CONFIG_SEEN_ANNOTATION) {
                        annotations.insert(CONFIG_SEEN_ANNOTATION.to_string(), seen.to_string());
                    }
                    if differs_semantically(&existing, &pod) {
                        let pod = Arc::new(pod);
                        updates.push(Arc::clone(&pod));
                        current.insert(uid, pod);
                    } else if gate_conditions_changed(&existing, &pod) {
                        // Another writer moved a readiness gate's condition: Ready follows.
                        let pod = Arc::new(pod);
                        updates.push(Arc::clone(&pod));
                        current.insert(uid, pod);
                    } else if existing.status != pod.status {
                        // Only status moved (API pods): remember it, nothing to act on.
                        current.insert(uid, Arc::new(pod));
                    } else {
                        current.insert(uid, existing);
                    }
                }
            }
        }

        let removes: Vec<Arc<Pod>> = old.into_values().collect();
        for pod in &removes {
            self.owner.remove(pod_uid(pod));
        }
        self.pods.insert(source, current);

        let mut events = Vec::with_capacity(3);
        if !removes.is_empty() {
            debug!(source, count = removes.len(), "Pods removed");
            events.push(PodUpdate::Remove(removes));
        }
        if !adds.is_empty() {
            debug!(source, count = adds.len(), "Pods added");
            events.push(PodUpdate::Add(adds));
        }
        if !updates.is_empty() {
            debug!(source, count = updates.len(), "Pods updated");
            events.push(PodUpdate::Update(updates));
        }
        events
    }

    fn mark_seen(&mut self, source: &'static str) {
        if !self.seen_sources.insert(source) {
            return;
        }
        if !self.expected.contains(source) {
            warn!(source, "Update from a source that was not configured");
        }
    }
}

/// Annotations the kubelet sets itself; they never make a pod "changed".
fn is_local_annotation(key: &str) -> bool {
    key == CONFIG_SOURCE_ANNOTATION
        || key == CONFIG_SEEN_ANNOTATION
        || key == CONFIG_MIRROR_ANNOTATION
}

fn annotations_equal(a: &Pod, b: &Pod) -> bool {
    let relevant = |p: &Pod| -> Vec<(String, String)> {
        p.metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| !is_local_annotation(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    relevant(a) == relevant(b)
}

/// Whether the kubelet must act on the change: spec, labels, annotations, or deletion.
/// Whether the conditions a pod's readiness gates name differ between two versions of it.
fn gate_conditions_changed(a: &Pod, b: &Pod) -> bool {
    let Some(gates) = b.spec.as_ref().and_then(|s| s.readiness_gates.as_ref()) else {
        return false;
    };
    let status_of = |p: &Pod, t: &str| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == t))
            .map(|c| c.status.clone())
    };
    gates
        .iter()
        .any(|g| status_of(a, &g.condition_type) != status_of(b, &g.condition_type))
}

fn differs_semantically(a: &Pod, b: &Pod) -> bool {
    a.spec != b.spec
        || a.metadata.labels != b.metadata.labels
        || a.metadata.deletion_timestamp != b.metadata.deletion_timestamp
        || a.metadata.deletion_grace_period_seconds != b.metadata.deletion_grace_period_seconds
        || !annotations_equal(a, b)
}

/// Feeds source updates through `config` and forwards the resulting events until cancelled
/// or until either channel closes.
pub async fn run_pod_config(
    mut config: PodConfig,
    mut rx: mpsc::Receiver<SourceUpdate>,
    out: mpsc::Sender<PodUpdate>,
    cancel: CancellationToken,
) {
    loop {
        let update = tokio::select! {
            _ = cancel.cancelled() => return,
            u = rx.recv() => match u {
                Some(u) => u,
                None => return,
            },
        };
        for event in config.apply(update) {
            tokio::select! {
                _ = cancel.cancelled() => return,
                sent = out.send(event) => if sent.is_err() { return },
            }
        }
        config.publish_ready();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(uid: &str, image: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(format!("pod-{uid}"));
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(uid.into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    fn set(source: &'static str, pods: Vec<Pod>) -> SourceUpdate {
        SourceUpdate { source, pods }
    }

    fn uids(pods: &[Arc<Pod>]) -> Vec<String> {
        let mut v: Vec<String> = pods.iter().map(|p| pod_uid(p).to_string()).collect();
        v.sort();
        v
    }

    fn summary(events: &[PodUpdate]) -> Vec<(&'static str, Vec<String>)> {
        events
            .iter()
            .map(|e| match e {
                PodUpdate::Add(p) => ("add", uids(p)),
                PodUpdate::Update(p) => ("update", uids(p)),
                PodUpdate::Remove(p) => ("remove", uids(p)),
            })
            .collect()
    }

    #[test]
    fn diffs_add_update_remove() {
        let mut c = PodConfig::new(&["file"]);
        let ev = c.apply(set("file", vec![pod("a", "x:1"), pod("b", "x:1")]));
        assert_eq!(summary(&ev), [("add", vec!["a".into(), "b".into()])]);

        // Same set again: nothing.
        assert!(
            c.apply(set("file", vec![pod("a", "x:1"), pod("b", "x:1")]))
                .is_empty()
        );

        let ev = c.apply(set("file", vec![pod("a", "x:2"), pod("c", "x:1")]));
        assert_eq!(
            summary(&ev),
            [
                ("remove", vec!["b".to_string()]),
                ("add", vec!["c".to_string()]),
                ("update", vec!["a".to_string()]),
            ]
        );
        assert_eq!(c.pods().len(), 2);
    }

    #[test]
    fn seen_and_source_annotations_handled() {
        let mut c = PodConfig::new(&["file"]);
        let ev = c.apply(set("file", vec![pod("a", "x:1")]));
        let PodUpdate::Add(added) = &ev[0] else {
            panic!("expected add, got {ev:?}");
        };
        let seen = annotation(&added[0], CONFIG_SEEN_ANNOTATION)
            .unwrap()
            .to_string();
        assert_eq!(
            annotation(&added[0], CONFIG_SOURCE_ANNOTATION),
            Some("file")
        );

        // A different config.seen alone is not a change, and the first value is kept.
        let mut again = pod("a", "x:2");
        again.metadata.annotations = Some(BTreeMap::from([(
            CONFIG_SEEN_ANNOTATION.to_string(),
            "2000-01-01T00:00:00Z".to_string(),
        )]));
        let ev = c.apply(set("file", vec![again]));
        let PodUpdate::Update(updated) = &ev[0] else {
            panic!("expected update, got {ev:?}");
        };
        assert_eq!(
            annotation(&updated[0], CONFIG_SEEN_ANNOTATION),
            Some(&*seen)
        );
    }

    #[test]
    fn readiness_gate_conditions_are_updates() {
        use k8s_openapi::api::core::v1::{PodCondition, PodReadinessGate};
        let mut c = PodConfig::new(&["api"]);
        let mut gated = pod("a", "x:1");
        gated.spec.as_mut().unwrap().readiness_gates = Some(vec![PodReadinessGate {
            condition_type: "example.com/ready".into(),
        }]);
        c.apply(set("api", vec![gated.clone()]));
        let with = |type_: &str, status: &str| {
            let mut p = gated.clone();
            p.status = Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: type_.into(),
                    status: status.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            });
            p
        };
        // The kubelet's own conditions moving is nothing to act on...
        assert!(c.apply(set("api", vec![with("Ready", "False")])).is_empty());
        // ...the gate's condition appearing or changing is.
        assert_eq!(
            summary(&c.apply(set("api", vec![with("example.com/ready", "False")]))),
            [("update", vec!["a".to_string()])]
        );
        assert_eq!(
            summary(&c.apply(set("api", vec![with("example.com/ready", "True")]))),
            [("update", vec!["a".to_string()])]
        );
    }

    #[test]
    fn labels_annotations_deletion_and_status() {
        let mut c = PodConfig::new(&["api"]);
        c.apply(set("api", vec![pod("a", "x:1")]));

        let mut labelled = pod("a", "x:1");
        labelled.metadata.labels = Some(BTreeMap::from([("k".into(), "v".into())]));
        assert_eq!(
            summary(&c.apply(set("api", vec![labelled.clone()]))),
            [("update", vec!["a".to_string()])]
        );

        let mut annotated = labelled.clone();
        annotated.metadata.annotations = Some(BTreeMap::from([("x".into(), "y".into())]));
        assert_eq!(
            summary(&c.apply(set("api", vec![annotated.clone()]))),
            [("update", vec!["a".to_string()])]
        );

        let mut status_only = annotated.clone();
        status_only.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        assert!(c.apply(set("api", vec![status_only.clone()])).is_empty());

        let mut deleting = status_only;
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(
            summary(&c.apply(set("api", vec![deleting]))),
            [("update", vec!["a".to_string()])]
        );
    }

    #[test]
    fn uid_in_two_sources_keeps_first() {
        let mut c = PodConfig::new(&["file", "api"]);
        c.apply(set("file", vec![pod("a", "x:1")]));
        assert!(c.apply(set("api", vec![pod("a", "x:9")])).is_empty());
        // The copy from "api" must not displace or remove the file's pod.
        assert!(c.apply(set("api", vec![])).is_empty());
        let all = c.pods();
        assert_eq!(all.len(), 1);
        assert_eq!(annotation(&all[0], CONFIG_SOURCE_ANNOTATION), Some("file"));
        // Once the file drops it, the API source may claim it.
        assert_eq!(
            summary(&c.apply(set("file", vec![]))),
            [("remove", vec!["a".to_string()])]
        );
        assert_eq!(
            summary(&c.apply(set("api", vec![pod("a", "x:9")]))),
            [("add", vec!["a".to_string()])]
        );
    }

    #[test]
    fn sources_ready_after_all_reported() {
        let mut c = PodConfig::new(&["file", "api"]);
        let mut rx = c.ready_watch();
        assert!(!c.sources_ready());
        c.apply(set("file", vec![]));
        assert!(!c.sources_ready());
        assert!(c.seen_source("file"));
        c.apply(set("api", vec![]));
        assert!(c.sources_ready());
        assert!(
            !*rx.borrow_and_update(),
            "published before the events went out"
        );
        c.publish_ready();
        assert!(*rx.borrow_and_update());
        assert!(PodConfig::new(&[]).sources_ready());
    }

    #[test]
    fn static_pods_are_published_once_ready_without_the_api_pods() {
        let mut c = PodConfig::new(&["file", "api"]);
        let mut statics = c.static_pods_watch();
        let mut hashed = pod("s1", "img");
        hashed.metadata.annotations = Some(BTreeMap::from([(
            CONFIG_HASH_ANNOTATION.to_string(),
            "h1".to_string(),
        )]));
        c.apply(set("file", vec![hashed, pod("s2", "img")]));
        c.publish_ready();
        assert!(
            statics.borrow_and_update().is_none(),
            "nothing before every source has spoken: a static pod may not be read yet"
        );
        c.apply(set("api", vec![pod("a1", "img")]));
        c.publish_ready();
        let want = StaticPods::from([
            (("default".into(), "pod-s1".into()), "h1".into()),
            (("default".into(), "pod-s2".into()), "s2".into()),
        ]);
        assert_eq!(statics.borrow_and_update().as_deref(), Some(&want));
        // An API update leaves the set alone; a removed manifest leaves it.
        c.apply(set("api", vec![]));
        c.publish_ready();
        assert!(!statics.has_changed().unwrap());
        c.apply(set("file", vec![pod("s2", "img")]));
        c.publish_ready();
        let want = StaticPods::from([(("default".into(), "pod-s2".into()), "s2".into())]);
        assert_eq!(statics.borrow_and_update().as_deref(), Some(&want));
    }

    #[tokio::test]
    async fn run_forwards_events() {
        let (src_tx, src_rx) = mpsc::channel(4);
        let (out_tx, mut out_rx) = mpsc::channel(4);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_pod_config(
            PodConfig::new(&["file"]),
            src_rx,
            out_tx,
            cancel.clone(),
        ));
        src_tx
            .send(set("file", vec![pod("a", "x:1")]))
            .await
            .unwrap();
        let ev = tokio::time::timeout(std::time::Duration::from_secs(1), out_rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(summary(&[ev]), [("add", vec!["a".to_string()])]);
        cancel.cancel();
        task.await.unwrap();
    }
}
