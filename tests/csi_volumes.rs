//! CSI volumes through a registered driver (the tests' own, `common/csi_driver.rs`), the real
//! API server and its attach/detach controller: a claim bound to a CSI PersistentVolume is
//! staged once at upstream's global path and published at the pod's path with the
//! volume's attributes and, for a driver whose CSIDriver object says podInfoOnMount, the
//! pod's identity; the kubelet gives it to the pod's fsGroup when the driver's fsGroupPolicy
//! says so; the pod's deletion unpublishes it and, as it was the last user, unstages it. A
//! driver that needs attaching waits for the VolumeAttachment to be attached and passes its
//! metadata on. The node reports a published volume in `volumesInUse`. A pod deleted while
//! the kubelet was killed has its volume unpublished after the restart, from what the kubelet
//! left on disk. A published volume's usage comes from the driver's NodeGetVolumeStats into
//! the Summary (with its claim) and kubelet_volume_stats_*. An inline (ephemeral) CSI volume is published for its pod alone under
//! upstream's derived handle, never staged nor reported in use, and unpublished with the pod;
//! a driver whose CSIDriver object does not list the Ephemeral mode is refused with
//! upstream's event.

mod common;
#[path = "common/csi_driver.rs"]
mod csi_driver;

use std::time::Duration;

use common::storage::{
    create_bound, event_starting, mounts_under, pv, remove_claims_and_volumes, terminated,
};
use common::*;
use csi_driver::{Options, TestDriver};
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NODE: &str = "krs-csi-vol-node";
const DRIVER: &str = "plain.csi.kubelet-rs.io";
const ATTACHING: &str = "attaching.csi.kubelet-rs.io";
const PV: &str = "krs-csi-pv";
const CLAIM: &str = "krs-csi-pvc";
const ATTACH_PV: &str = "krs-csi-attach-pv";
const ATTACH_CLAIM: &str = "krs-csi-attach-pvc";
const WRITER: &str = "krs-csi-writer";
const ATTACHED: &str = "krs-csi-attached";
const SURVIVOR: &str = "krs-csi-survivor";
const INLINE_NODE: &str = "krs-csi-inline-node";
const INLINE_DRIVER: &str = "inline.csi.kubelet-rs.io";
const PERSISTENT_ONLY: &str = "persistent-only.csi.kubelet-rs.io";
const INLINE: &str = "krs-csi-inline";
const REFUSED: &str = "krs-csi-refused";

fn csi_driver_object(name: &str, attach_required: bool) -> CSIDriver {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"attachRequired": attach_required, "podInfoOnMount": true, "fsGroupPolicy": "File"},
    }))
    .unwrap()
}

fn csi_pv(name: &str, driver: &str, handle: &str, claim: &str) -> PersistentVolume {
    pv(
        name,
        claim,
        json!({"csi": {"driver": driver, "volumeHandle": handle,
                       "volumeAttributes": {"color": "blue"}}}),
    )
}

fn claim_pod(name: &str, claim: &str, script: &str, restart: &str) -> Pod {
    api_pod(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsUser": 1000, "fsGroup": 3456},
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }))
}

fn inline_pod(name: &str, driver: &str, script: &str) -> Pod {
    api_pod(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": INLINE_NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }],
            "volumes": [{"name": "scratch", "csi": {
                "driver": driver, "volumeAttributes": {"size": "small"}}}],
        },
    }))
}

async fn wait_call(driver: &TestDriver, op: &str, path_part: &str) -> csi_driver::Call {
    wait_async(Duration::from_secs(60), op, || async {
        driver
            .calls()
            .into_iter()
            .find(|c| c.op == op && c.path.contains(path_part))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn csi_volumes_are_staged_published_and_torn_down() {
    // Kubelets sharing one containerd remove each other's pods.
    let _guard = serial();
    use std::os::unix::fs::MetadataExt;
    let (client, pods) = default_pods(&[WRITER, ATTACHED, SURVIVOR]).await;
    let csidrivers: Api<CSIDriver> = Api::all(client.clone());
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let none = DeleteParams::default();
    remove_claims_and_volumes(&client, &[CLAIM, ATTACH_CLAIM], &[PV, ATTACH_PV]).await;
    for d in [DRIVER, ATTACHING] {
        let _ = csidrivers.delete(d, &none).await;
    }
    let post = PostParams::default();
    csidrivers
        .create(&post, &csi_driver_object(DRIVER, false))
        .await
        .unwrap();
    csidrivers
        .create(&post, &csi_driver_object(ATTACHING, true))
        .await
        .unwrap();
    create_bound(&client, &csi_pv(PV, DRIVER, "vol-1", CLAIM), CLAIM).await;
    let attach_pv = csi_pv(ATTACH_PV, ATTACHING, "vol-2", ATTACH_CLAIM);
    create_bound(&client, &attach_pv, ATTACH_CLAIM).await;

    let mut k = Kubelet::new("csi-volumes");
    k.start_as_node(NODE, &["--sync-frequency=10s"]);
    let registry = k.root_dir.join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let driver = TestDriver::start(Options::new(DRIVER, "node-1"), k.dir.path(), &registry);
    let attaching = TestDriver::start(Options::new(ATTACHING, "node-1"), k.dir.path(), &registry);

    // Staged, published with the attributes and the pod's identity, given to the fsGroup.
    let writer = claim_pod(
        WRITER,
        CLAIM,
        "echo hi > /data/by-pod && echo written > /dev/termination-log",
        "Never",
    );
    create_pod(&pods, &writer).await;
    assert_eq!(
        terminated(&pods, WRITER).await,
        "0 written",
        "{}",
        tail(&k.log(), 60)
    );
    let stage = wait_call(&driver, "NodeStageVolume", "globalmount").await;
    assert!(
        stage.path.starts_with(
            &k.root_dir
                .join("plugins/kubernetes.io/csi")
                .join(DRIVER)
                .to_string_lossy()
                .into_owned()
        ),
        "{stage:?}"
    );
    let publish = wait_call(
        &driver,
        "NodePublishVolume",
        &format!("kubernetes.io~csi/{PV}/mount"),
    )
    .await;
    assert_eq!(publish.volume, "vol-1");
    assert_eq!(
        publish.context.get("color").map(String::as_str),
        Some("blue")
    );
    assert_eq!(
        publish
            .context
            .get("csi.storage.k8s.io/pod.name")
            .map(String::as_str),
        Some(WRITER)
    );
    let backing = driver.backing.join("vol-1");
    assert_eq!(
        std::fs::read_to_string(backing.join("by-pod")).unwrap(),
        "hi\n"
    );
    assert_eq!(std::fs::metadata(&backing).unwrap().gid(), 3456);

    // Deleted: unpublished, then unstaged as it was the last user; nothing stays mounted.
    delete_now(&pods, &[WRITER]).await;
    wait_call(
        &driver,
        "NodeUnpublishVolume",
        &format!("kubernetes.io~csi/{PV}/mount"),
    )
    .await;
    wait_call(&driver, "NodeUnstageVolume", "globalmount").await;
    let ops = driver.ops();
    assert_eq!(
        ops,
        [
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume"
        ],
        "one stage, one publish, and their undoing"
    );
    wait_for(
        Duration::from_secs(30),
        "no mount under the root dir",
        || mounts_under(&k.root_dir).is_empty().then_some(()),
    );

    // A driver that needs attaching: the pod waits for the VolumeAttachment.
    let attached = claim_pod(
        ATTACHED,
        ATTACH_CLAIM,
        "echo ok > /dev/termination-log",
        "Never",
    );
    create_pod(&pods, &attached).await;
    let waiting =
        format!("MountVolume.WaitForAttach failed for volume \"{ATTACH_PV}\" : volume vol-2");
    event_starting(&client, ATTACHED, &waiting, Duration::from_secs(60)).await;
    // The attach/detach controller makes the VolumeAttachment; a driver's attacher would mark
    // it attached, which the test does here.
    let va = wait_async(Duration::from_secs(60), "the VolumeAttachment", || async {
        attachments
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|va| va.spec.attacher == ATTACHING)
    })
    .await;
    let va_name = va.metadata.name.unwrap();
    let status =
        json!({"status": {"attached": true, "attachmentMetadata": {"devicePath": "/dev/fake0"}}});
    attachments
        .patch_status(&va_name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(
        terminated(&pods, ATTACHED).await,
        "0 ok",
        "{}",
        tail(&k.log(), 60)
    );
    let stage = wait_call(&attaching, "NodeStageVolume", "globalmount").await;
    assert_eq!(
        stage.publish_context.get("devicePath").map(String::as_str),
        Some("/dev/fake0")
    );
    delete_now(&pods, &[ATTACHED]).await;

    // Killed with a volume published, the pod deleted meanwhile: after the restart the volume
    // is unpublished and unstaged from what the kubelet left on disk.
    let survivor = claim_pod(SURVIVOR, CLAIM, "sleep 3600", "Always");
    create_pod(&pods, &survivor).await;
    wait_async(Duration::from_secs(90), "the survivor to run", || async {
        first_running(&pods.get(SURVIVOR).await.ok()?).then_some(())
    })
    .await;
    // The node reports the volume in use, so that no controller detaches it under the pod.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let in_use = format!("kubernetes.io/csi/{DRIVER}^vol-1");
    wait_async(Duration::from_secs(60), "volumesInUse", || async {
        let node = nodes.get(NODE).await.ok()?;
        node.status?.volumes_in_use?.contains(&in_use).then_some(())
    })
    .await;
    // Its usage, from the driver's NodeGetVolumeStats, names the claim in the Summary and in
    // kubelet_volume_stats_*.
    let summary = wait_for(Duration::from_secs(60), "the volume's stats", || {
        let (code, body) = http_get(k.ro_port, "/stats/summary")?;
        let s: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| code == 200)?;
        let pod = s["pods"]
            .as_array()?
            .iter()
            .find(|p| p["podRef"]["name"] == SURVIVOR)?;
        let volumes = pod["volume"].as_array()?;
        volumes.iter().find(|v| v["name"] == "data").cloned()
    });
    assert_eq!(
        summary["pvcRef"],
        json!({"name": CLAIM, "namespace": "default"})
    );
    assert!(
        summary["capacityBytes"].as_u64().is_some_and(|n| n > 0),
        "{summary}"
    );
    assert!(summary["inodesUsed"].as_u64().is_some(), "{summary}");
    let (code, metrics) = http_get(k.ro_port, "/metrics").expect("/metrics");
    assert_eq!(code, 200);
    for family in [
        "capacity_bytes",
        "available_bytes",
        "used_bytes",
        "inodes_free",
    ] {
        let series = format!(
            "kubelet_volume_stats_{family}{{namespace=\"default\",persistentvolumeclaim=\"{CLAIM}\"}} "
        );
        assert!(metrics.contains(&series), "no {series} in /metrics");
    }
    k.kill();
    delete_now(&pods, &[SURVIVOR]).await;
    let before = driver.calls().len();
    k.start_as_node(NODE, &["--sync-frequency=10s"]);
    wait_async(
        Duration::from_secs(90),
        "the survivor's volume to be unstaged",
        || async {
            driver.calls()[before..]
                .iter()
                .any(|c| c.op == "NodeUnstageVolume")
                .then_some(())
        },
    )
    .await;
    let after: Vec<&str> = driver.calls()[before..].iter().map(|c| c.op).collect();
    assert_eq!(
        after,
        ["NodeUnpublishVolume", "NodeUnstageVolume"],
        "{}",
        tail(&k.log(), 60)
    );
    wait_for(
        Duration::from_secs(30),
        "no mount under the root dir",
        || mounts_under(&k.root_dir).is_empty().then_some(()),
    );
    wait_async(
        Duration::from_secs(60),
        "volumesInUse to be emptied",
        || async {
            let node = nodes.get(NODE).await.ok()?;
            let used = node.status?.volumes_in_use.unwrap_or_default();
            (!used.contains(&in_use)).then_some(())
        },
    )
    .await;

    remove_claims_and_volumes(&client, &[CLAIM, ATTACH_CLAIM], &[PV, ATTACH_PV]).await;
    for d in [DRIVER, ATTACHING] {
        let _ = csidrivers.delete(d, &none).await;
    }
    let _ = attachments.delete(&va_name, &none).await;
    drop((driver, attaching));
    k.cleanup();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn inline_csi_volumes_live_and_go_with_their_pod() {
    // Kubelets sharing one containerd remove each other's pods.
    let _guard = serial();
    let (client, pods) = default_pods(&[INLINE, REFUSED]).await;
    let csidrivers: Api<CSIDriver> = Api::all(client.clone());
    let none = DeleteParams::default();
    for d in [INLINE_DRIVER, PERSISTENT_ONLY] {
        let _ = csidrivers.delete(d, &none).await;
    }
    let object = |name: &str, modes: &[&str]| -> CSIDriver {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"attachRequired": false, "podInfoOnMount": true,
                     "volumeLifecycleModes": modes},
        }))
        .unwrap()
    };
    let post = PostParams::default();
    let inline_object = object(INLINE_DRIVER, &["Persistent", "Ephemeral"]);
    csidrivers.create(&post, &inline_object).await.unwrap();
    let persistent_only = object(PERSISTENT_ONLY, &["Persistent"]);
    csidrivers.create(&post, &persistent_only).await.unwrap();

    let mut k = Kubelet::new("csi-inline");
    k.start_as_node(INLINE_NODE, &["--sync-frequency=10s"]);
    let registry = k.root_dir.join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let driver = TestDriver::start(
        Options::new(INLINE_DRIVER, "node-1"),
        k.dir.path(),
        &registry,
    );

    // Published (never staged) under the handle upstream derives from the pod and volume.
    let pod = inline_pod(
        INLINE,
        INLINE_DRIVER,
        "echo hi > /scratch/by-pod && sleep 3600",
    );
    let uid = create_pod(&pods, &pod).await;
    let publish = wait_call(
        &driver,
        "NodePublishVolume",
        "kubernetes.io~csi/scratch/mount",
    )
    .await;
    let digest = ring::digest::digest(&ring::digest::SHA256, format!("{uid}scratch").as_bytes());
    let handle = format!("csi-{}", hex::encode(digest));
    assert_eq!(publish.volume, handle);
    let context = |k: &str| publish.context.get(k).map(String::as_str);
    assert_eq!(context("size"), Some("small"));
    assert_eq!(context("csi.storage.k8s.io/ephemeral"), Some("true"));
    assert_eq!(context("csi.storage.k8s.io/pod.uid"), Some(uid.as_str()));
    let written = driver.backing.join(&handle).join("by-pod");
    wait_for(Duration::from_secs(90), "the pod's write", || {
        std::fs::read_to_string(&written)
            .ok()
            .filter(|s| s == "hi\n")
    });
    // Never attached, so never reported in use: watched over more than one status update.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for _ in 0..8 {
        let node = nodes.get(INLINE_NODE).await.unwrap();
        let in_use = node
            .status
            .and_then(|s| s.volumes_in_use)
            .unwrap_or_default();
        assert!(in_use.iter().all(|v| !v.contains(&handle)), "{in_use:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    // Unpublished with the pod, and nothing stays mounted.
    delete_now(&pods, &[INLINE]).await;
    wait_call(
        &driver,
        "NodeUnpublishVolume",
        "kubernetes.io~csi/scratch/mount",
    )
    .await;
    assert_eq!(driver.ops(), ["NodePublishVolume", "NodeUnpublishVolume"]);
    wait_for(
        Duration::from_secs(30),
        "no mount under the root dir",
        || mounts_under(&k.root_dir).is_empty().then_some(()),
    );

    // A driver that takes no inline volumes: refused before any call, the pod never starts.
    create_pod(&pods, &inline_pod(REFUSED, PERSISTENT_ONLY, "true")).await;
    let refusal = event_starting(
        &client,
        REFUSED,
        "MountVolume.NewMounter initialization failed for volume \"scratch\"",
        Duration::from_secs(60),
    )
    .await;
    assert!(
        refusal.ends_with(&format!(
            "volume mode \"Ephemeral\" not supported by driver {PERSISTENT_ONLY} (only supports [\"Persistent\"])"
        )),
        "{refusal}"
    );
    let refused = pods.get(REFUSED).await.unwrap();
    assert!(
        first_state(&refused).is_none_or(|s| s.running.is_none() && s.terminated.is_none()),
        "{refused:?}"
    );
    delete_now(&pods, &[REFUSED]).await;

    for d in [INLINE_DRIVER, PERSISTENT_ONLY] {
        let _ = csidrivers.delete(d, &none).await;
    }
    drop(driver);
    k.cleanup();
}
