//! API pod status: generated from the spec and what the runtime shows, and kept per pod for
//! whoever reads it (the read-only API now, the API server later).

pub mod apiserver;
mod conditions;
mod container_status;
mod ephemeral;
mod generate;
mod history;
pub mod mirror;
mod phase;
pub mod resize;
mod terminal;

pub use generate::{PodFailure, PodStatusInput, generate_pod_status};
pub use resize::{ResizePending, ResizeView};
pub use terminal::mark_terminal;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Pod, PodStatus};

#[derive(Clone, Debug)]
struct Entry {
    pod: Arc<Pod>,
    status: PodStatus,
}

impl Entry {
    fn with_status(&self) -> Pod {
        let mut p = (*self.pod).clone();
        p.status = Some(self.status.clone());
        p
    }
}

/// Whether a pod's status says it has finished (Succeeded or Failed): nothing in it runs again.
pub fn has_finished(status: &PodStatus) -> bool {
    matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
}

/// What the API-server status syncer is told.
#[derive(Clone, Debug, PartialEq)]
pub enum StatusEvent {
    Changed(String),
    /// The pod's containers are gone after a deletion was requested: publish its final
    /// status, if there is one, then delete the object.
    Terminated {
        uid: String,
        namespace: String,
        name: String,
        last: Option<Box<PodStatus>>,
    },
}

/// The latest spec and status of every pod the kubelet runs. Bounded by the pods themselves:
/// workers remove their entry when the pod is gone.
#[derive(Default, Debug)]
pub struct StatusStore {
    pods: Mutex<HashMap<String, Entry>>,
    /// Set when an API server receives statuses. Notifications are best effort (a full
    /// channel drops them); the syncer's periodic pass catches up.
    notify: Option<tokio::sync::mpsc::Sender<StatusEvent>>,
}

/// Queue of status notifications to the API-server syncer.
const NOTIFY_QUEUE: usize = 1024;

/// What the sources say about static pods and the API server's mirror pods, for the syncer's
/// mirror pods.
pub struct MirrorInputs {
    pub static_pods: tokio::sync::watch::Receiver<Option<Arc<crate::sources::StaticPods>>>,
    pub mirror_pods: tokio::sync::watch::Receiver<Option<Arc<Vec<crate::sources::MirrorPod>>>>,
}

/// The kubelet's status store; with an API server, a syncer in `tasks` patches each pod's
/// status there as it changes and keeps the static pods' mirror pods.
pub fn spawn(
    client: Option<&kube::Client>,
    node_name: &str,
    mirror_inputs: MirrorInputs,
    tasks: &mut crate::tasks::Tasks,
    cancel: &tokio_util::sync::CancellationToken,
) -> Arc<StatusStore> {
    let Some(client) = client else {
        return Arc::new(StatusStore::default());
    };
    let (tx, rx) = tokio::sync::mpsc::channel(NOTIFY_QUEUE);
    let store = Arc::new(StatusStore::with_notifier(tx));
    let syncer = apiserver::StatusSyncer::new(
        client.clone(),
        store.clone(),
        node_name.into(),
        mirror_inputs,
    );
    tasks.critical("status syncer", syncer.run(rx, cancel.child_token()));
    store
}

impl StatusStore {
    pub fn with_notifier(notify: tokio::sync::mpsc::Sender<StatusEvent>) -> Self {
        StatusStore {
            pods: Mutex::default(),
            notify: Some(notify),
        }
    }

    fn tell(&self, event: StatusEvent) {
        if let Some(n) = &self.notify {
            let _ = n.try_send(event);
        }
    }

    /// The pod and its status, for the syncer.
    pub fn entry(&self, uid: &str) -> Option<(Arc<Pod>, PodStatus)> {
        self.lock()
            .get(uid)
            .map(|e| (e.pod.clone(), e.status.clone()))
    }

    pub fn uids(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Removes the pod and, when its deletion was requested, asks for the object's deletion.
    pub fn finish(&self, uid: &str, pod: &Pod) {
        self.finish_with(uid, pod, None);
    }

    /// [`Self::finish`], with the status the pod ended with, which the API server gets before
    /// the object is deleted (as upstream's status manager makes a deleted pod terminal).
    pub fn finish_with(&self, uid: &str, pod: &Pod, last: Option<PodStatus>) {
        self.remove(uid);
        if pod.metadata.deletion_timestamp.is_some() {
            let m = &pod.metadata;
            self.tell(StatusEvent::Terminated {
                uid: uid.to_string(),
                namespace: m.namespace.clone().unwrap_or_default(),
                name: m.name.clone().unwrap_or_default(),
                last: last.map(Box::new),
            });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores a new status, keeping each condition's lastTransitionTime while its value holds.
    /// Returns whether anything changed.
    pub fn set(&self, uid: &str, pod: Arc<Pod>, mut status: PodStatus) -> bool {
        let mut pods = self.lock();
        if let Some(old) = pods.get(uid) {
            carry_transition_times(&old.status, &mut status);
            history::carry_container_history(&old.status, &mut status);
            if old.status == status && Arc::ptr_eq(&old.pod, &pod) {
                return false;
            }
        } else if let Some(reported) = pod.status.as_ref() {
            // First status since this kubelet started: the conditions' transition times the API
            // server holds (from before a restart) stay while their values hold, and so does
            // the history of containers the runtime no longer has.
            carry_transition_times(reported, &mut status);
            history::carry_container_history(reported, &mut status);
        }
        pods.insert(uid.to_string(), Entry { pod, status });
        drop(pods);
        self.tell(StatusEvent::Changed(uid.to_string()));
        true
    }

    pub fn status(&self, uid: &str) -> Option<PodStatus> {
        self.lock().get(uid).map(|e| e.status.clone())
    }

    pub fn remove(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Every pod with its current status, sorted by namespace and name.
    pub fn pods(&self) -> Vec<Pod> {
        let mut out: Vec<Pod> = self.lock().values().map(Entry::with_status).collect();
        out.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        out
    }

    /// What `pick` takes from each pod and its status, under the lock, without copying the
    /// pods it passes over.
    pub fn select<T>(&self, mut pick: impl FnMut(&Arc<Pod>, &PodStatus) -> Option<T>) -> Vec<T> {
        self.lock()
            .values()
            .filter_map(|e| pick(&e.pod, &e.status))
            .collect()
    }

    /// The pod `namespace/name` with its current status (the one with `uid`, when given),
    /// without copying the others.
    pub fn find(&self, namespace: &str, name: &str, uid: Option<&str>) -> Option<Pod> {
        self.lock()
            .values()
            .find(|e| {
                let m = &e.pod.metadata;
                m.namespace.as_deref() == Some(namespace)
                    && m.name.as_deref() == Some(name)
                    && uid.is_none_or(|u| m.uid.as_deref() == Some(u))
            })
            .map(Entry::with_status)
    }
}

fn carry_transition_times(old: &PodStatus, new: &mut PodStatus) {
    let Some(old_conditions) = old.conditions.as_ref() else {
        return;
    };
    for c in new.conditions.iter_mut().flatten() {
        if let Some(prev) = old_conditions
            .iter()
            .find(|o| o.type_ == c.type_ && o.status == c.status)
        {
            c.last_transition_time = prev.last_transition_time.clone();
        }
    }
    if new.start_time.is_none() {
        new.start_time = old.start_time.clone();
    }
}
