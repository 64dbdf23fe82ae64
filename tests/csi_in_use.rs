//! What changes in a CSI volume while its pod runs, through the real API server.
//!
//! A claim's volume grows: once the PersistentVolume is larger than the claim's status says
//! (what the external resizer does, played here by the test), the kubelet asks the driver for
//! NodeExpandVolume at the pod's target path with the staging path and the new size, then
//! records the size in the claim's status and drops its FileSystemResizePending condition,
//! with upstream's events on the pod and the claim. A driver that does not offer
//! EXPAND_VOLUME leaves the claim as it was and the pod gets upstream's VolumeResizeFailed
//! event; the pod runs on.
//!
//! A driver whose CSIDriver object says requiresRepublish is asked NodePublishVolume again on
//! each sync of the pod, and one with tokenRequests gets the pod's service account tokens
//! for those audiences in the volume context (`csi.storage.k8s.io/serviceAccount.tokens`).

mod common;
#[path = "common/csi_driver.rs"]
mod csi_driver;

use std::time::Duration;

use common::storage::{create_bound, event_starting, pv, remove_claims_and_volumes};
use common::*;
use csi_driver::{Options, TestDriver};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NODE: &str = "krs-csi-grow-node";
const GROWING: &str = "grow.csi.kubelet-rs.io";
const FIXED: &str = "fixed.csi.kubelet-rs.io";
const PV: &str = "krs-grow-pv";
const CLAIM: &str = "krs-grow-pvc";
const FIXED_PV: &str = "krs-fixed-pv";
const FIXED_CLAIM: &str = "krs-fixed-pvc";
const GROWER: &str = "krs-grower";
const STUCK: &str = "krs-stuck";
const REPUBLISHED: &str = "republish.csi.kubelet-rs.io";
const TOKENED: &str = "krs-tokened";
const AUDIENCE: &str = "krs-vault";
/// 2Mi, twice what the test volumes start with.
const GROWN: i64 = 2 * 1024 * 1024;

/// A pod that sleeps with `source` (a volume's source fields) mounted at /data.
fn sleeper(name: &str, source: serde_json::Value) -> Pod {
    let mut volume = json!({"name": "data"});
    if let (Some(v), Some(fields)) = (volume.as_object_mut(), source.as_object()) {
        v.extend(fields.clone());
    }
    api_pod(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [volume],
        },
    }))
}

fn claimed(claim: &str) -> serde_json::Value {
    json!({"persistentVolumeClaim": {"claimName": claim}})
}

/// What the external resizer does once the driver's controller grew the volume: the
/// PersistentVolume's capacity, and the claim's condition saying the node must finish.
async fn resize(client: &kube::Client, pv_name: &str, claim: &str) {
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let patch = PatchParams::default();
    pvs.patch(
        pv_name,
        &patch,
        &Patch::Merge(json!({"spec": {"capacity": {"storage": "2Mi"}}})),
    )
    .await
    .unwrap();
    let pending = json!({"status": {"conditions": [{
        "type": "FileSystemResizePending", "status": "True",
        "message": "Waiting for user to (re-)start a pod to finish file system resize of volume on node.",
    }]}});
    claims
        .patch_status(claim, &patch, &Patch::Merge(pending))
        .await
        .unwrap();
}

async fn claim_status(client: &kube::Client, claim: &str) -> (String, Vec<String>) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let status = claims.get(claim).await.unwrap().status.unwrap_or_default();
    let size = status
        .capacity
        .and_then(|c| c.get("storage").map(|q| q.0.clone()))
        .unwrap_or_default();
    let conditions = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    (size, conditions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn claims_csi_volumes_grow_while_their_pod_runs() {
    // Kubelets sharing one containerd remove each other's pods.
    let _guard = serial();
    let (client, pods) = default_pods(&[GROWER, STUCK]).await;
    let csidrivers: Api<CSIDriver> = Api::all(client.clone());
    let none = DeleteParams::default();
    remove_claims_and_volumes(&client, &[CLAIM, FIXED_CLAIM], &[PV, FIXED_PV]).await;
    for d in [GROWING, FIXED] {
        let _ = csidrivers.delete(d, &none).await;
    }
    let post = PostParams::default();
    for d in [GROWING, FIXED] {
        let object: CSIDriver = serde_json::from_value(json!({
            "metadata": {"name": d},
            "spec": {"attachRequired": false},
        }))
        .unwrap();
        csidrivers.create(&post, &object).await.unwrap();
    }
    let csi =
        |driver: &str, handle: &str| json!({"csi": {"driver": driver, "volumeHandle": handle}});
    create_bound(&client, &pv(PV, CLAIM, csi(GROWING, "vol-g")), CLAIM).await;
    create_bound(
        &client,
        &pv(FIXED_PV, FIXED_CLAIM, csi(FIXED, "vol-f")),
        FIXED_CLAIM,
    )
    .await;

    let mut k = Kubelet::new("csi-expansion");
    k.start_as_node(NODE, &["--sync-frequency=5s"]);
    let registry = k.root_dir.join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let mut growing_opts = Options::new(GROWING, "node-1");
    growing_opts.expand = true;
    let growing = TestDriver::start(growing_opts, k.dir.path(), &registry);
    let fixed = TestDriver::start(Options::new(FIXED, "node-1"), k.dir.path(), &registry);

    // Grown at the pod's path, staging path given, to the volume's new size; then the claim
    // says so and its resize condition is gone.
    create_pod(&pods, &sleeper(GROWER, claimed(CLAIM))).await;
    let running = |pods: Api<Pod>, name: &'static str| async move {
        wait_async(Duration::from_secs(90), "the pod to run", || async {
            first_running(&pods.get(name).await.ok()?).then_some(())
        })
        .await
    };
    running(pods.clone(), GROWER).await;
    assert_eq!(claim_status(&client, CLAIM).await.0, "1Mi");
    resize(&client, PV, CLAIM).await;
    let grown = wait_async(Duration::from_secs(60), "NodeExpandVolume", || async {
        growing
            .calls()
            .into_iter()
            .find(|c| c.op == "NodeExpandVolume")
    })
    .await;
    assert_eq!(grown.volume, "vol-g");
    assert_eq!(grown.bytes, GROWN);
    assert!(
        grown
            .path
            .ends_with(&format!("volumes/kubernetes.io~csi/{PV}/mount")),
        "{grown:?}"
    );
    assert!(grown.staging.ends_with("/globalmount"), "{grown:?}");
    let (size, conditions) =
        wait_async(Duration::from_secs(30), "the claim's new size", || async {
            let status = claim_status(&client, CLAIM).await;
            (status.0 == "2Mi").then_some(status)
        })
        .await;
    assert_eq!(size, "2Mi");
    assert!(conditions.is_empty(), "{conditions:?}");
    let succeeded = format!("MountVolume.NodeExpandVolume succeeded for volume \"{PV}\"");
    let timeout = Duration::from_secs(30);
    event_starting(&client, GROWER, &succeeded, timeout).await;
    event_starting(&client, CLAIM, &succeeded, timeout).await;
    // Asked once: later syncs find the claim as large as its volume.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let asked = growing
        .ops()
        .iter()
        .filter(|op| **op == "NodeExpandVolume")
        .count();
    assert_eq!(asked, 1, "{:?}", growing.ops());

    // A driver that cannot grow a volume on the node: the pod is told, the claim keeps its
    // size and condition, and the pod runs on.
    create_pod(&pods, &sleeper(STUCK, claimed(FIXED_CLAIM))).await;
    running(pods.clone(), STUCK).await;
    resize(&client, FIXED_PV, FIXED_CLAIM).await;
    let failed = event_starting(
        &client,
        STUCK,
        "NodeExpandVolume.NodeExpandVolume failed",
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        failed,
        format!(
            "NodeExpandVolume.NodeExpandVolume failed for volume \"{FIXED_PV}\" : Expander.NodeExpand found CSI plugin kubernetes.io/csi/{FIXED} to not support node expansion"
        )
    );
    assert!(
        !fixed.ops().contains(&"NodeExpandVolume"),
        "{:?}",
        fixed.ops()
    );
    let (size, conditions) = claim_status(&client, FIXED_CLAIM).await;
    assert_eq!(size, "1Mi");
    assert_eq!(conditions, ["FileSystemResizePending"]);
    assert!(first_running(&pods.get(STUCK).await.unwrap()));

    delete_now(&pods, &[GROWER, STUCK]).await;
    wait_async(
        Duration::from_secs(60),
        "the volumes unpublished",
        || async {
            let unpublished = |d: &TestDriver| d.ops().contains(&"NodeUnpublishVolume");
            (unpublished(&growing) && unpublished(&fixed)).then_some(())
        },
    )
    .await;
    remove_claims_and_volumes(&client, &[CLAIM, FIXED_CLAIM], &[PV, FIXED_PV]).await;
    for d in [GROWING, FIXED] {
        let _ = csidrivers.delete(d, &none).await;
    }
    drop((growing, fixed));
    k.cleanup();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn republishing_drivers_are_called_each_sync_with_fresh_tokens() {
    let _guard = serial();
    let (client, pods) = default_pods(&[TOKENED]).await;
    let csidrivers: Api<CSIDriver> = Api::all(client.clone());
    let _ = csidrivers
        .delete(REPUBLISHED, &DeleteParams::default())
        .await;
    let object: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": REPUBLISHED},
        "spec": {"attachRequired": false, "volumeLifecycleModes": ["Ephemeral"],
                 "requiresRepublish": true,
                 "tokenRequests": [{"audience": AUDIENCE, "expirationSeconds": 600}]},
    }))
    .unwrap();
    let made = csidrivers
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    // The v1.20 API server keeps these fields only with its CSIServiceAccountToken gate.
    assert_eq!(made.spec.requires_republish, Some(true), "{made:?}");

    let mut k = Kubelet::new("csi-republish");
    k.start_as_node(NODE, &["--sync-frequency=5s"]);
    let registry = k.root_dir.join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let driver = TestDriver::start(Options::new(REPUBLISHED, "node-1"), k.dir.path(), &registry);

    let pod = sleeper(TOKENED, json!({"csi": {"driver": REPUBLISHED}}));
    create_pod(&pods, &pod).await;
    // Published at start, then again on later syncs at the same path.
    let publishes = wait_async(Duration::from_secs(90), "three publishes", || async {
        let calls: Vec<_> = driver
            .calls()
            .into_iter()
            .filter(|c| c.op == "NodePublishVolume")
            .collect();
        (calls.len() >= 3).then_some(calls)
    })
    .await;
    assert!(
        publishes.iter().all(|c| c.path == publishes[0].path),
        "{publishes:?}"
    );
    let p = pods.get(TOKENED).await.unwrap();
    assert!(first_running(&p), "{:?}", p.status);
    // Each carries a token bound to the pod for the audience, with its expiry.
    for call in &publishes {
        let raw = &call.context["csi.storage.k8s.io/serviceAccount.tokens"];
        let tokens: serde_json::Value = serde_json::from_str(raw).unwrap();
        let token = tokens[AUDIENCE]["token"].as_str().unwrap_or_default();
        assert_eq!(token.split('.').count(), 3, "{raw}");
        let expiry = tokens[AUDIENCE]["expirationTimestamp"]
            .as_str()
            .unwrap_or_default();
        assert!(expiry.parse::<jiff::Timestamp>().is_ok(), "{raw}");
    }
    let unpublishes = driver
        .ops()
        .iter()
        .filter(|op| **op == "NodeUnpublishVolume")
        .count();
    assert_eq!(unpublishes, 0, "{:?}", driver.ops());

    delete_now(&pods, &[TOKENED]).await;
    wait_async(
        Duration::from_secs(60),
        "the volume unpublished",
        || async { driver.ops().contains(&"NodeUnpublishVolume").then_some(()) },
    )
    .await;
    let _ = csidrivers
        .delete(REPUBLISHED, &DeleteParams::default())
        .await;
    drop(driver);
    k.cleanup();
}
