//! The API server source: every pod bound to this node (`spec.nodeName`). kube's watcher does
//! the list, the watch, the resume from the last resourceVersion, the relist when the watch
//! expires and the backoff after errors; this module turns its events into the source's pod
//! set. Mirror pods are left out of it: they are the API server's copies of static pods, not
//! pods to run; the source publishes them apart, so that the mirror pods a kubelet made before
//! a restart are known from the API server, not from memory.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{API_SOURCE, CONFIG_MIRROR_ANNOTATION, MirrorPod, SourceUpdate, annotation};
use crate::pod::pod_uid;

/// Server-side watch timeout; the client read timeout is longer.
const WATCH_TIMEOUT_SECS: u32 = 290;
/// Pause before the first retry after an error, doubled up to `RETRY_MAX` while errors go on.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The retry pacing of the pod source: kube's default adds up to 100 % jitter (retries up to a
/// minute apart), which would leave a node blind to its pods for that long after an API server
/// outage; without jitter the first successful retry comes within 30 s.
#[derive(Debug)]
struct RetryDelay(Duration);

impl Iterator for RetryDelay {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.0;
        self.0 = (self.0 * 2).min(RETRY_MAX);
        Some(delay)
    }
}

impl kube::runtime::utils::Backoff for RetryDelay {
    fn reset(&mut self) {
        self.0 = RETRY_MIN;
    }
}

fn wanted(pod: &Pod) -> bool {
    annotation(pod, CONFIG_MIRROR_ANNOTATION).is_none() && !pod_uid(pod).is_empty()
}

/// The mirror pod `pod` is, if it is one.
fn as_mirror(pod: &Pod) -> Option<MirrorPod> {
    let hash = annotation(pod, CONFIG_MIRROR_ANNOTATION)?;
    let m = &pod.metadata;
    Some(MirrorPod {
        namespace: m.namespace.clone().unwrap_or_default(),
        name: m.name.clone()?,
        uid: m.uid.clone().filter(|u| !u.is_empty())?,
        hash: hash.to_string(),
        deleting: m.deletion_timestamp.is_some(),
    })
}

/// The pods bound to this node as the watcher has reported them, by UID.
#[derive(Debug, Default)]
struct BoundPods {
    pods: HashMap<String, Pod>,
    /// The mirror pods among them, by UID, kept apart.
    mirrors: HashMap<String, MirrorPod>,
    /// Set when `mirrors` changed or a list completed, until [`Self::take_mirrors`].
    mirrors_changed: bool,
    /// The pods and mirror pods of a (re)list in progress. They replace `pods` and `mirrors`
    /// only once the list is complete, so that pods deleted while the watch was down disappear
    /// and a half-done list is never sent.
    listing: Option<(HashMap<String, Pod>, HashMap<String, MirrorPod>)>,
}

impl BoundPods {
    /// Applies one watcher event; true when the pods must be sent again: they changed, or a
    /// (re)list completed (the first completed list is what marks the source as seen).
    fn apply(&mut self, event: Event<Pod>) -> bool {
        match event {
            Event::Init => {
                self.listing = Some(Default::default());
                false
            }
            Event::InitApply(pod) => {
                let (pods, mirrors) = self.listing.get_or_insert_default();
                if wanted(&pod) {
                    pods.insert(pod_uid(&pod).to_string(), pod);
                } else if let Some(mirror) = as_mirror(&pod) {
                    mirrors.insert(mirror.uid.clone(), mirror);
                }
                false
            }
            Event::InitDone => {
                if let Some((pods, mirrors)) = self.listing.take() {
                    self.pods = pods;
                    self.mirrors = mirrors;
                }
                self.mirrors_changed = true;
                true
            }
            Event::Apply(pod) if wanted(&pod) => {
                let uid = pod_uid(&pod).to_string();
                self.forget_mirror(&uid);
                let before = self.pods.insert(uid.clone(), pod);
                before.as_ref() != self.pods.get(&uid)
            }
            // A pod that became a mirror pod (or lost its UID) is gone from this source too.
            Event::Apply(pod) => {
                if let Some(mirror) = as_mirror(&pod) {
                    let before = self.mirrors.insert(mirror.uid.clone(), mirror.clone());
                    self.mirrors_changed |= before.as_ref() != Some(&mirror);
                }
                self.pods.remove(pod_uid(&pod)).is_some()
            }
            Event::Delete(pod) => {
                self.forget_mirror(pod_uid(&pod));
                self.pods.remove(pod_uid(&pod)).is_some()
            }
        }
    }

    fn forget_mirror(&mut self, uid: &str) {
        self.mirrors_changed |= self.mirrors.remove(uid).is_some();
    }

    /// The mirror pods, sorted by namespace and name, if they changed since the last call.
    fn take_mirrors(&mut self) -> Option<Vec<MirrorPod>> {
        if !std::mem::take(&mut self.mirrors_changed) {
            return None;
        }
        let mut mirrors: Vec<MirrorPod> = self.mirrors.values().cloned().collect();
        mirrors
            .sort_by(|a, b| (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid)));
        Some(mirrors)
    }

    /// The complete set, in UID order so equal sets compare equal.
    fn update(&self) -> SourceUpdate {
        let mut pods: Vec<Pod> = self.pods.values().cloned().collect();
        pods.sort_by(|a, b| pod_uid(a).cmp(pod_uid(b)));
        SourceUpdate {
            source: API_SOURCE,
            pods,
        }
    }
}

/// Applies one item of the watcher's stream. Its errors are only logged: the watcher has
/// already chosen to resume or relist, and the backoff delays its next attempt.
fn handle(bound: &mut BoundPods, item: Result<Event<Pod>, watcher::Error>) -> bool {
    match item {
        Ok(event) => bound.apply(event),
        Err(watcher::Error::WatchError(status)) if status.code == 410 => {
            debug!(message = %status.message, "Pod watch expired, relisting");
            false
        }
        Err(err) => {
            warn!(%err, "Pod source lost the API server");
            false
        }
    }
}

/// Sends the pod set after every change, and publishes the mirror pods when they change,
/// until cancelled or the receiver is gone.
async fn forward(
    events: impl Stream<Item = Result<Event<Pod>, watcher::Error>>,
    tx: mpsc::Sender<SourceUpdate>,
    mirrors_tx: watch::Sender<Option<Arc<Vec<MirrorPod>>>>,
    cancel: CancellationToken,
) {
    let mut events = pin!(events);
    let mut bound = BoundPods::default();
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tx.closed() => return,
            n = events.next() => n,
        };
        let Some(item) = next else { return };
        let mut changed = handle(&mut bound, item);
        // A burst (a Deployment scaling up, a relist) becomes one update.
        while let Some(Some(more)) = events.next().now_or_never() {
            changed |= handle(&mut bound, more);
        }
        if let Some(mirrors) = bound.take_mirrors() {
            mirrors_tx.send_replace(Some(Arc::new(mirrors)));
        }
        if changed {
            tokio::select! {
                _ = cancel.cancelled() => return,
                sent = tx.send(bound.update()) => if sent.is_err() { return },
            }
        }
    }
}

pub async fn run_api_source(
    client: kube::Client,
    node_name: String,
    tx: mpsc::Sender<SourceUpdate>,
    mirrors_tx: watch::Sender<Option<Arc<Vec<MirrorPod>>>>,
    cancel: CancellationToken,
) {
    let api: Api<Pod> = Api::all(client);
    // The default list semantic reads the most recent state, not the API server's cache, as
    // the kubelet's own list did before the watcher.
    let config = watcher::Config::default()
        .fields(&format!("spec.nodeName={node_name}"))
        .timeout(WATCH_TIMEOUT_SECS);
    info!(node = %node_name, "Watching pods bound to this node");
    let events = watcher(api, config).backoff(RetryDelay(RETRY_MIN));
    forward(events, tx, mirrors_tx, cancel).await;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pod(uid: &str, image: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("pod-{uid}")),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                containers: vec![k8s_openapi::api::core::v1::Container {
                    name: "c".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn mirror(uid: &str) -> Pod {
        let mut p = pod(uid, "img");
        p.metadata.annotations = Some(BTreeMap::from([(
            CONFIG_MIRROR_ANNOTATION.to_string(),
            "hash".to_string(),
        )]));
        p
    }

    fn uids(update: &SourceUpdate) -> Vec<&str> {
        update.pods.iter().map(pod_uid).collect()
    }

    fn listed(bound: &mut BoundPods, pods: Vec<Pod>) -> bool {
        let mut send = bound.apply(Event::Init);
        for p in pods {
            send |= bound.apply(Event::InitApply(p));
        }
        send | bound.apply(Event::InitDone)
    }

    #[test]
    fn retries_double_from_half_a_second_to_thirty_and_reset_after_success() {
        use kube::runtime::utils::Backoff;
        let mut d = RetryDelay(RETRY_MIN);
        let first: Vec<u64> = d.by_ref().take(8).map(|x| x.as_millis() as u64).collect();
        assert_eq!(first, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        d.reset();
        assert_eq!(d.next(), Some(RETRY_MIN));
    }

    #[test]
    fn a_completed_list_is_sent_whole_even_when_empty() {
        let mut bound = BoundPods::default();
        assert!(
            !bound.apply(Event::Init),
            "nothing before the list completes"
        );
        assert!(!bound.apply(Event::InitApply(pod("b", "img"))));
        assert!(!bound.apply(Event::InitApply(mirror("m"))));
        assert!(!bound.apply(Event::InitApply(pod("a", "img"))));
        assert!(bound.apply(Event::InitDone));
        let update = bound.update();
        assert_eq!(update.source, API_SOURCE);
        assert_eq!(uids(&update), vec!["a", "b"], "mirror pods left out");

        // An empty first list still marks the source as seen.
        let mut empty = BoundPods::default();
        assert!(listed(&mut empty, vec![]));
        assert!(empty.update().pods.is_empty());
    }

    #[test]
    fn a_relist_drops_pods_deleted_meanwhile() {
        let mut bound = BoundPods::default();
        listed(&mut bound, vec![pod("a", "img"), pod("b", "img")]);
        // During the relist the old set stays.
        assert!(!bound.apply(Event::Init));
        assert!(!bound.apply(Event::InitApply(pod("b", "img"))));
        assert_eq!(uids(&bound.update()), vec!["a", "b"]);
        assert!(bound.apply(Event::InitDone));
        assert_eq!(uids(&bound.update()), vec!["b"]);
    }

    #[test]
    fn watch_events_change_the_set_only_when_it_differs() {
        let mut bound = BoundPods::default();
        listed(&mut bound, vec![pod("a", "img")]);
        assert!(!bound.apply(Event::Apply(pod("a", "img"))), "unchanged");
        assert!(bound.apply(Event::Apply(pod("a", "img:2"))), "modified");
        assert!(bound.apply(Event::Apply(pod("b", "img"))), "added");
        assert_eq!(uids(&bound.update()), vec!["a", "b"]);
        assert!(bound.apply(Event::Delete(pod("a", "img:2"))));
        assert!(
            !bound.apply(Event::Delete(pod("a", "img:2"))),
            "already gone"
        );
        assert!(
            !bound.apply(Event::Apply(mirror("m"))),
            "mirror pods never enter"
        );
        // A pod turned into a mirror pod leaves the source.
        assert!(bound.apply(Event::Apply(mirror("b"))));
        assert!(bound.update().pods.is_empty());
        assert!(
            !bound.apply(Event::Apply(pod("", "img"))),
            "no UID, not a pod to run"
        );
    }

    #[test]
    fn mirror_pods_are_kept_apart_and_follow_lists_and_events() {
        let mut bound = BoundPods::default();
        assert_eq!(bound.take_mirrors(), None, "nothing before a list");
        listed(
            &mut bound,
            vec![pod("a", "img"), mirror("m1"), mirror("m2")],
        );
        let names = |m: Option<Vec<MirrorPod>>| -> Option<Vec<String>> {
            m.map(|v| {
                v.into_iter()
                    .map(|m| format!("{}={}", m.uid, m.hash))
                    .collect()
            })
        };
        assert_eq!(
            names(bound.take_mirrors()),
            Some(vec!["m1=hash".into(), "m2=hash".into()])
        );
        assert_eq!(bound.take_mirrors(), None, "unchanged since");
        assert_eq!(uids(&bound.update()), vec!["a"]);

        // Unchanged, changed, deleted.
        bound.apply(Event::Apply(mirror("m1")));
        assert_eq!(bound.take_mirrors(), None);
        let mut rehashed = mirror("m1");
        rehashed
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CONFIG_MIRROR_ANNOTATION.into(), "new".into());
        bound.apply(Event::Apply(rehashed));
        assert_eq!(
            names(bound.take_mirrors()),
            Some(vec!["m1=new".into(), "m2=hash".into()])
        );
        bound.apply(Event::Delete(mirror("m2")));
        assert_eq!(names(bound.take_mirrors()), Some(vec!["m1=new".into()]));

        // A relist drops the mirror pods deleted meanwhile, and is published even when equal.
        listed(&mut bound, vec![pod("a", "img")]);
        assert_eq!(names(bound.take_mirrors()), Some(vec![]));
        listed(&mut bound, vec![pod("a", "img")]);
        assert_eq!(names(bound.take_mirrors()), Some(vec![]));
    }

    #[tokio::test]
    async fn forward_batches_ready_events_and_survives_errors() {
        let events = futures::stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(pod("a", "img"))),
            Ok(Event::InitDone),
        ])
        .chain(futures::stream::pending());
        let (tx, mut rx) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        let (mirrors_tx, mirrors) = watch::channel(None);
        let task = tokio::spawn(forward(events, tx, mirrors_tx, cancel.clone()));
        let first = rx.recv().await.expect("the listed set");
        assert_eq!(uids(&first), vec!["a"]);
        assert_eq!(
            mirrors.borrow().as_deref(),
            Some(&vec![]),
            "a completed list publishes the mirror pods, none here"
        );
        cancel.cancel();
        task.await.expect("forward stops when cancelled");
        assert!(rx.recv().await.is_none());

        // An error in the middle is logged and the events after it still count; everything
        // ready at once is sent as one update.
        let gone = kube::core::Status {
            code: 410,
            ..Default::default()
        };
        let events = futures::stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitDone),
            Err(watcher::Error::WatchError(Box::new(gone))),
            Ok(Event::Init),
            Ok(Event::InitApply(pod("b", "img"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(pod("c", "img"))),
        ]);
        let (tx, mut rx) = mpsc::channel(8);
        forward(events, tx, watch::channel(None).0, CancellationToken::new()).await;
        let sent: Vec<Vec<String>> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|u| u.pods.iter().map(|p| pod_uid(p).to_string()).collect())
            .collect();
        assert_eq!(sent, vec![vec!["b".to_string(), "c".to_string()]]);
    }

    #[tokio::test]
    async fn forward_stops_when_the_receiver_is_gone() {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let events = futures::stream::pending();
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            forward(events, tx, watch::channel(None).0, CancellationToken::new()),
        )
        .await
        .expect("forward returns once nobody listens");
    }
}
