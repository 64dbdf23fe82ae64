//! Sends pod status to the API server: a PATCH of the status subresource when it changes
//! (with the UID as a precondition, so a recreated pod of the same name is never touched), and
//! the final DELETE once a pod whose deletion was requested has no containers left.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::mirror::{MirrorManager, PodName};
use super::{MirrorInputs, StatusEvent, StatusStore};
use crate::sources::{API_SOURCE, CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION, annotation};
use crate::sources::{is_mirror_pod, is_static_pod};

const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Upstream's status manager resyncs everything this often.
const RESYNC: Duration = Duration::from_secs(10);

/// Waits for `rx` to change (a clone, so that the syncer itself stays free to borrow).
async fn changed<T>(mut rx: watch::Receiver<T>) -> Result<(), watch::error::RecvError> {
    rx.changed().await
}

fn is_api_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_SOURCE_ANNOTATION) == Some(API_SOURCE)
}

pub struct StatusSyncer {
    client: kube::Client,
    store: Arc<StatusStore>,
    /// What the API server last accepted, per pod: the UID of the object patched (the
    /// mirror pod's, for static pods) and the status. Bounded by the store's pods.
    sent: HashMap<String, (String, PodStatus)>,
    mirrors: MirrorManager,
    mirror_inputs: MirrorInputs,
}

/// The static pods to mirror, one per name: when a changed manifest briefly leaves the old
/// and the new pod side by side, the one seen last wins.
fn static_pods(store: &StatusStore) -> HashMap<PodName, Arc<Pod>> {
    let mut out: HashMap<PodName, Arc<Pod>> = HashMap::new();
    for uid in store.uids() {
        let Some((pod, _)) = store.entry(&uid) else {
            continue;
        };
        if !is_static_pod(&pod) || is_mirror_pod(&pod) {
            continue;
        }
        let key = (
            pod.metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let newer = out.get(&key).is_none_or(|old| {
            annotation(&pod, CONFIG_SEEN_ANNOTATION) > annotation(old, CONFIG_SEEN_ANNOTATION)
        });
        if newer {
            out.insert(key, pod);
        }
    }
    out
}

impl StatusSyncer {
    pub fn new(
        client: kube::Client,
        store: Arc<StatusStore>,
        node_name: String,
        mirror_inputs: MirrorInputs,
    ) -> Self {
        StatusSyncer {
            mirrors: MirrorManager::new(client.clone(), node_name),
            client,
            store,
            sent: HashMap::new(),
            mirror_inputs,
        }
    }

    /// Mirror pods for every static pod, and none for static pods that are gone.
    async fn sync_mirrors(&mut self) {
        let pods = static_pods(&self.store);
        for pod in pods.values() {
            self.mirrors.ensure(pod).await;
        }
        let live: Vec<PodName> = pods.into_keys().collect();
        self.mirrors.remove_absent(&live).await;
        self.remove_stale_mirrors().await;
    }

    /// Deletes the mirror pods the API server holds for this node that stand for no static pod
    /// (or for another version of one), whoever made them and whenever: also those made before
    /// a restart, or by another kubelet before this one took the node over. Waits until every
    /// source has reported and the API source has listed. The mirrors of static pods the
    /// kubelet runs (or still stops) stay `ensure`'s.
    async fn remove_stale_mirrors(&mut self) {
        let statics = self.mirror_inputs.static_pods.borrow_and_update().clone();
        let listed = self.mirror_inputs.mirror_pods.borrow_and_update().clone();
        let (Some(statics), Some(listed)) = (statics, listed) else {
            return;
        };
        let running: HashSet<PodName> = static_pods(&self.store).into_keys().collect();
        self.mirrors.remove_stale(&listed, &statics, &running).await;
    }

    async fn changed(&mut self, uid: &str) {
        if let Some((pod, _)) = self.store.entry(uid)
            && is_static_pod(&pod)
        {
            self.mirrors.ensure(&pod).await;
        }
        self.patch(uid).await;
    }

    async fn patch(&mut self, uid: &str) {
        let Some((pod, status)) = self.store.entry(uid) else {
            self.sent.remove(uid);
            return;
        };
        // Static pods show their status on their mirror pod, guarded by the mirror's UID.
        let target = if is_api_pod(&pod) {
            uid.to_string()
        } else if is_static_pod(&pod) {
            match self.mirrors.mirror_uid(&pod) {
                Some(u) => u.to_string(),
                None => return,
            }
        } else {
            return;
        };
        if self
            .sent
            .get(uid)
            .is_some_and(|(t, s)| *t == target && *s == status)
        {
            return;
        }
        let m = &pod.metadata;
        let (ns, name) = (
            m.namespace.as_deref().unwrap_or("default"),
            m.name.as_deref().unwrap_or_default(),
        );
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let body = json!({ "metadata": { "uid": target }, "status": status });
        let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
        let call = api.patch_status(name, &params, &patch);
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(_)) => {
                debug!(pod = %format!("{ns}/{name}"), "Status patched");
                self.sent.insert(uid.to_string(), (target, status));
            }
            Ok(Err(kube::Error::Api(e))) if e.code == 404 || e.code == 409 => {
                debug!(pod = %format!("{ns}/{name}"), code = e.code, "Pod gone or replaced; status not sent");
            }
            Ok(Err(err)) => {
                warn!(pod = %format!("{ns}/{name}"), %err, "Failed to patch pod status")
            }
            Err(_) => warn!(pod = %format!("{ns}/{name}"), "Patching pod status timed out"),
        }
    }

    /// A deleted API pod's last status, so that watchers see how it ended before it goes.
    async fn patch_final(&mut self, uid: &str, ns: &str, name: &str, status: &PodStatus) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let body = json!({ "metadata": { "uid": uid }, "status": status });
        let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
        let call = api.patch_status(name, &params, &patch);
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(_)) => debug!(pod = %format!("{ns}/{name}"), "Final status patched"),
            Ok(Err(kube::Error::Api(e))) if e.code == 404 || e.code == 409 => {}
            Ok(Err(err)) => {
                warn!(pod = %format!("{ns}/{name}"), %err, "Failed to patch the final pod status")
            }
            Err(_) => {
                warn!(pod = %format!("{ns}/{name}"), "Patching the final pod status timed out")
            }
        }
    }

    async fn delete(&mut self, uid: &str, namespace: &str, name: &str) {
        self.sent.remove(uid);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match tokio::time::timeout(CALL_TIMEOUT, api.delete(name, &params)).await {
            Ok(Ok(_)) => {
                info!(pod = %format!("{namespace}/{name}"), "Pod deleted from the API server")
            }
            Ok(Err(kube::Error::Api(e))) if e.code == 404 || e.code == 409 => {}
            Ok(Err(err)) => {
                warn!(pod = %format!("{namespace}/{name}"), %err, "Failed to delete pod")
            }
            Err(_) => warn!(pod = %format!("{namespace}/{name}"), "Deleting pod timed out"),
        }
    }

    pub async fn run(mut self, mut events: mpsc::Receiver<StatusEvent>, cancel: CancellationToken) {
        let mut resync = tokio::time::interval(RESYNC);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let (statics, listed) = (
                self.mirror_inputs.static_pods.clone(),
                self.mirror_inputs.mirror_pods.clone(),
            );
            tokio::select! {
                _ = cancel.cancelled() => return,
                // A static pod removed, or the API server's mirror pods seen for the first time
                // (right after a start) or changed: stale mirrors go at once, not at the resync.
                Ok(()) = changed(statics) => self.remove_stale_mirrors().await,
                Ok(()) = changed(listed) => self.remove_stale_mirrors().await,
                e = events.recv() => match e {
                    None => return,
                    Some(StatusEvent::Changed(uid)) => self.changed(&uid).await,
                    Some(StatusEvent::Terminated { uid, namespace, name, last }) => {
                        if let Some(status) = last {
                            self.patch_final(&uid, &namespace, &name, &status).await;
                        }
                        self.delete(&uid, &namespace, &name).await
                    }
                },
                _ = resync.tick() => {
                    let live = self.store.uids();
                    self.sent.retain(|uid, _| live.contains(uid));
                    self.sync_mirrors().await;
                    for uid in live {
                        self.patch(&uid).await;
                    }
                }
            }
        }
    }
}
