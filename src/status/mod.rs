//! API pod status: generated from the spec and what the runtime shows, and kept per pod for
//! whoever reads it (the read-only API now, the API server later).

mod generate;

pub use generate::{PodStatusInput, generate_pod_status, pod_phase};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Pod, PodStatus};

#[derive(Clone, Debug)]
struct Entry {
    pod: Arc<Pod>,
    status: PodStatus,
}

/// The latest spec and status of every pod the kubelet runs. Bounded by the pods themselves:
/// workers remove their entry when the pod is gone.
#[derive(Default, Debug)]
pub struct StatusStore {
    pods: Mutex<HashMap<String, Entry>>,
}

impl StatusStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores a new status, keeping each condition's lastTransitionTime while its value holds.
    /// Returns whether anything changed.
    pub fn set(&self, uid: &str, pod: Arc<Pod>, mut status: PodStatus) -> bool {
        let mut pods = self.lock();
        if let Some(old) = pods.get(uid) {
            carry_transition_times(&old.status, &mut status);
            if old.status == status && Arc::ptr_eq(&old.pod, &pod) {
                return false;
            }
        }
        pods.insert(uid.to_string(), Entry { pod, status });
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
        let mut out: Vec<Pod> = self
            .lock()
            .values()
            .map(|e| {
                let mut p = (*e.pod).clone();
                p.status = Some(e.status.clone());
                p
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        out
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
