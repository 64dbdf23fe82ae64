//! What the storage tests share: claims bound by name to a PersistentVolume, the mounts left
//! under a folder, a run-once pod's result, and the volume events a pod gets.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams};
use serde_json::json;

/// A 1Mi ReadWriteOnce claim of no storage class that names its volume, so the API server's
/// volume binder binds the two at once.
pub fn claim(name: &str, pv: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }))
    .unwrap()
}

/// A 1Mi ReadWriteOnce volume of no storage class, kept after use, reserved for `claim` in
/// "default"; `source` holds the fields of its kind (`{"hostPath": {...}}`, `{"csi": {...}}`,
/// and `nodeAffinity` where it has one).
pub fn pv(name: &str, claim: &str, source: serde_json::Value) -> PersistentVolume {
    let mut spec = json!({
        "capacity": {"storage": "1Mi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "",
        "persistentVolumeReclaimPolicy": "Retain",
        "claimRef": {"namespace": "default", "name": claim},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), source.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// Creates `volume` and a claim `claim` for it in "default", of the volume's `volumeMode`
/// (a claim binds only to a volume of its own mode).
pub async fn create_bound(client: &kube::Client, volume: &PersistentVolume, claim_name: &str) {
    let pv_name = volume.metadata.name.as_deref().unwrap();
    let post = kube::api::PostParams::default();
    let pv_api: Api<PersistentVolume> = Api::all(client.clone());
    pv_api.create(&post, volume).await.unwrap();
    let mut claim = claim(claim_name, pv_name);
    claim.spec.as_mut().unwrap().volume_mode =
        volume.spec.as_ref().and_then(|s| s.volume_mode.clone());
    let claim_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    claim_api.create(&post, &claim).await.unwrap();
}

/// Removes the claims (in "default") and the volumes, whether or not they exist, and waits
/// until they are gone: a volume or claim still being deleted (its protection finalizer waits
/// for its users) would refuse the next run's object of the same name.
pub async fn remove_claims_and_volumes(client: &kube::Client, claims: &[&str], pvs: &[&str]) {
    let claim_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pv_api: Api<PersistentVolume> = Api::all(client.clone());
    for c in claims {
        let _ = claim_api.delete(c, &DeleteParams::default()).await;
    }
    for p in pvs {
        let _ = pv_api.delete(p, &DeleteParams::default()).await;
    }
    super::wait_async(
        Duration::from_secs(90),
        "the claims and volumes to be gone",
        || async {
            for c in claims {
                if claim_api.get_opt(c).await.ok()?.is_some() {
                    return None;
                }
            }
            for p in pvs {
                if pv_api.get_opt(p).await.ok()?.is_some() {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

/// The mount points below `dir`, as this process's mount table has them.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|mp| mp.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// "<exit code> <termination message>" of the pod's first container, once it has ended.
pub async fn terminated(pods: &Api<Pod>, name: &str) -> String {
    super::wait_async(Duration::from_secs(90), "the pod to finish", || async {
        let p = pods.get(name).await.ok()?;
        let done = super::first_state(&p)?.terminated.clone()?;
        Some(format!(
            "{} {}",
            done.exit_code,
            done.message.unwrap_or_default().trim()
        ))
    })
    .await
}

/// The first message of an event of pod `pod` (in "default") that starts with `prefix`,
/// waiting up to `timeout` for it.
pub async fn event_starting(
    client: &kube::Client,
    pod: &str,
    prefix: &str,
    timeout: Duration,
) -> String {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let selector = format!("involvedObject.name={pod}");
    super::wait_async(timeout, prefix, || async {
        let list = events
            .list(&kube::api::ListParams::default().fields(&selector))
            .await
            .ok()?;
        list.items
            .into_iter()
            .filter_map(|e| e.message)
            .find(|m| m.starts_with(prefix))
    })
    .await
}
