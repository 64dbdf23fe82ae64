//! Online expansion of the claims' CSI volumes pods have in use, checked on each pod sync as
//! upstream's volume manager checks when it processes the pod again: once the PersistentVolume
//! is larger than the size the claim's status records, the driver grows the volume, then the
//! claim's status records the new size and loses its resize conditions. The check runs beside
//! the sync, never holding it; one per volume at a time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::{error, info, warn};

use super::csi::Drivers;
use super::csi::expand::{Expandable, node_expand};
use super::persistent::read;
use crate::events::{EventRecorder, EventType};
use crate::quantity::parse_bytes;

/// The claim conditions a finished resize removes, upstream's list.
const RESIZE_CONDITIONS: [&str; 2] = ["Resizing", "FileSystemResizePending"];

/// Where one pod's volume stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Checking,
    /// This size was given up on for the pod (read-only, or the driver refused a volume in
    /// use): not asked for again, as upstream marks the volume resized.
    GaveUp(i64),
}

pub struct Expansions {
    client: kube::Client,
    drivers: Arc<Drivers>,
    root_dir: PathBuf,
    events: EventRecorder,
    /// By "<pod uid>/<volume>"; an entry goes with its pod, so it is bounded by the pods.
    state: Mutex<HashMap<String, State>>,
}

impl Expansions {
    pub fn new(
        client: kube::Client,
        drivers: Arc<Drivers>,
        root_dir: PathBuf,
        events: EventRecorder,
    ) -> Self {
        Expansions {
            client,
            drivers,
            root_dir,
            events,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, State>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a check of the pod's `volume`, published at `target`, unless one runs.
    pub fn check(self: &Arc<Self>, pod: &Pod, volume: &str, e: &Arc<Expandable>, target: &Path) {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let key = format!("{uid}/{volume}");
        let gave_up = {
            let mut state = self.lock();
            let gave_up = match state.get(&key) {
                Some(State::Checking) => return,
                Some(State::GaveUp(size)) => Some(*size),
                None => None,
            };
            state.insert(key.clone(), State::Checking);
            gave_up
        };
        // Only what its events name.
        let pod = Pod {
            metadata: pod.metadata.clone(),
            ..Default::default()
        };
        let this = self.clone();
        let e = e.clone();
        let target = target.to_path_buf();
        tokio::spawn(async move {
            let outcome = this.run(&pod, &e, &target, gave_up).await;
            let mut state = this.lock();
            // The pod may have gone meanwhile: its entry is not made again.
            if let Some(s) = state.get_mut(&key) {
                match outcome.or(gave_up) {
                    Some(size) => *s = State::GaveUp(size),
                    None => {
                        state.remove(&key);
                    }
                }
            }
        });
    }

    /// Forgets the pod's volumes (its teardown).
    pub fn forget(&self, uid: &str) {
        let prefix = format!("{uid}/");
        self.lock().retain(|k, _| !k.starts_with(&prefix));
    }

    /// One check; the size given up on, if it gave up.
    async fn run(
        &self,
        pod: &Pod,
        e: &Expandable,
        target: &Path,
        gave_up: Option<i64>,
    ) -> Option<i64> {
        let pv_name = &e.vol.name;
        let (namespace, claim_name) = &e.claim;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        let read_both = async {
            let claim = read(claims.get(claim_name)).await?;
            let pv = read(pvs.get(pv_name)).await?;
            Ok::<_, super::persistent::ReadError>((claim, pv))
        };
        let (claim, pv) = match read_both.await {
            Ok(both) => both,
            Err(err) => {
                warn!(volume = %pv_name, %err, "Could not read the claim and its volume to check for a resize");
                return None;
            }
        };
        let storage = |q: Option<&Quantity>| q.and_then(|q| parse_bytes(q).ok()).unwrap_or(0);
        let pv_size = pv
            .spec
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"));
        let new_size = storage(pv_size);
        let recorded = storage(
            claim
                .status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .and_then(|c| c.get("storage")),
        );
        if new_size <= recorded || gave_up == Some(new_size) {
            return None;
        }
        let for_volume = format!("for volume {pv_name:?}");
        if e.vol.read_only {
            let message = format!(
                "MountVolume.NodeExpandVolume failed {for_volume} requested read-only file system"
            );
            warn!("{message}");
            self.both(
                pod,
                &claim,
                EventType::Warning,
                "FileSystemResizeFailed",
                &message,
            );
            return Some(new_size);
        }
        match node_expand(&self.drivers, &self.root_dir, e, target, new_size).await {
            Ok(()) => {}
            Err(err) if err.in_use() => {
                error!(volume = %pv_name, %err, "MountVolume.NodeExpandVolume failed; the volume stays as it is");
                return Some(new_size);
            }
            Err(err) => {
                let message =
                    format!("NodeExpandVolume.NodeExpandVolume failed {for_volume} : {err}");
                self.events
                    .pod(pod, EventType::Warning, "VolumeResizeFailed", &message);
                return None;
            }
        }
        // Upstream's words, trailing space included (its message has an empty suffix).
        let message = format!("MountVolume.NodeExpandVolume succeeded {for_volume} ");
        info!(volume = %pv_name, bytes = new_size, "MountVolume.NodeExpandVolume succeeded");
        self.both(
            pod,
            &claim,
            EventType::Normal,
            "FileSystemResizeSuccessful",
            &message,
        );
        if let Err(err) = read(claims.patch_status(
            claim_name,
            &PatchParams::default(),
            &Patch::Merge(resize_finished(&claim, pv_size.cloned())),
        ))
        .await
        {
            // The next sync asks the driver again, which finds nothing to do.
            let message = format!(
                "NodeExpandVolume.NodeExpandVolume failed {for_volume} : MountVolume.NodeExpandVolume update PVC status failed : {err}"
            );
            self.events
                .pod(pod, EventType::Warning, "VolumeResizeFailed", &message);
        }
        None
    }

    fn both(
        &self,
        pod: &Pod,
        claim: &PersistentVolumeClaim,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        self.events.pod(pod, kind, reason, message);
        self.events.claim(claim, kind, reason, message);
    }
}

/// The status patch of a finished resize: the claim's size is the volume's, and its resize
/// conditions go (the others stay).
fn resize_finished(claim: &PersistentVolumeClaim, size: Option<Quantity>) -> serde_json::Value {
    let status = claim.status.as_ref();
    let kept: Vec<_> = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| !RESIZE_CONDITIONS.contains(&c.type_.as_str()))
        .collect();
    json!({"status": {
        "capacity": {"storage": size},
        "conditions": if kept.is_empty() { serde_json::Value::Null } else { json!(kept) },
    }})
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimCondition, PersistentVolumeClaimStatus};

    fn claim_with(conditions: &[&str]) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            status: Some(PersistentVolumeClaimStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|t| PersistentVolumeClaimCondition {
                            type_: t.to_string(),
                            status: "True".into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_finished_resize_records_the_size_and_drops_only_resize_conditions() {
        let size = Some(Quantity("2Gi".into()));
        let patch = resize_finished(&claim_with(&["FileSystemResizePending"]), size.clone());
        assert_eq!(
            patch,
            json!({"status": {"capacity": {"storage": "2Gi"}, "conditions": null}})
        );
        let patch = resize_finished(&claim_with(&["Resizing", "ModifyingVolume"]), size);
        assert_eq!(patch["status"]["conditions"][0]["type"], "ModifyingVolume");
        assert_eq!(
            patch["status"]["conditions"].as_array().map(Vec::len),
            Some(1)
        );
    }
}
