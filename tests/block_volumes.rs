//! Claims of `volumeMode: Block` reach the containers as devices (`volumeDevices`), through
//! the real API server and containerd: a CSI volume of the tests' driver (a loop device) is
//! staged and published with the Block capability at upstream's `volumeDevices` paths, linked
//! from the pod's folder, written by the pod through its device and read back from the
//! driver's backing file; the pod's deletion unpublishes and unstages it and leaves nothing
//! behind, as does a restart after a kill -9 for a pod deleted meanwhile, and the node reports
//! the device in `volumesInUse` while a pod has it. A `local` volume whose path is a device (a loop device the test attaches) is handed
//! to its pod as that device.

mod common;
#[path = "common/csi_driver.rs"]
mod csi_driver;

use std::io::{Read, Seek, Write};
use std::path::Path;
use std::time::Duration;

use common::storage::{create_bound, mounts_under, pv, remove_claims_and_volumes, terminated};
use common::*;
use csi_driver::{Options, TestDriver, attach_loop, detach_loop};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const NODE: &str = "krs-block-node";
const DRIVER: &str = "block.csi.kubelet-rs.io";
const CSI_PV: &str = "krs-block-csi-pv";
const CSI_CLAIM: &str = "krs-block-csi-pvc";
const LOCAL_PV: &str = "krs-block-local-pv";
const LOCAL_CLAIM: &str = "krs-block-local-pvc";
const CSI_POD: &str = "krs-block-csi";
const LOCAL_POD: &str = "krs-block-local";
const SURVIVOR: &str = "krs-block-survivor";

fn device_pod(name: &str, claim: &str, script: &str) -> Pod {
    api_pod(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "volumeDevices": [{"name": "disk", "devicePath": "/dev/xvda"}],
            }],
            "volumes": [{"name": "disk", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }))
}

/// A loop device the test attached, detached when the test ends, failed or not.
struct LoopDevice(std::path::PathBuf);

impl Drop for LoopDevice {
    fn drop(&mut self) {
        detach_loop(&self.0);
    }
}

fn first_bytes(file: &Path, n: usize) -> String {
    let mut buf = vec![0; n];
    std::fs::File::open(file)
        .unwrap()
        .read_exact(&mut buf)
        .unwrap();
    String::from_utf8_lossy(&buf).into_owned()
}

async fn wait_call(driver: &TestDriver, op: &str) -> csi_driver::Call {
    wait_async(Duration::from_secs(60), op, || async {
        driver.calls().into_iter().find(|c| c.op == op)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn block_claims_reach_containers_as_devices() {
    // Kubelets sharing one containerd remove each other's pods.
    let _guard = serial();
    let (client, pods) = default_pods(&[CSI_POD, LOCAL_POD, SURVIVOR]).await;
    let csidrivers: Api<CSIDriver> = Api::all(client.clone());
    remove_claims_and_volumes(&client, &[CSI_CLAIM, LOCAL_CLAIM], &[CSI_PV, LOCAL_PV]).await;
    let _ = csidrivers.delete(DRIVER, &DeleteParams::default()).await;
    let driver_object: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": DRIVER},
        "spec": {"attachRequired": false, "podInfoOnMount": false},
    }))
    .unwrap();
    csidrivers
        .create(&PostParams::default(), &driver_object)
        .await
        .unwrap();
    let csi_pv = pv(
        CSI_PV,
        CSI_CLAIM,
        json!({"volumeMode": "Block", "csi": {"driver": DRIVER, "volumeHandle": "blk-1"}}),
    );
    create_bound(&client, &csi_pv, CSI_CLAIM).await;

    let mut k = Kubelet::new("block-volumes");
    // A device of the test's own for the local volume, holding what the pod must read.
    let image = k.dir.path().join("local.img");
    let local_device = LoopDevice(attach_loop(&image).unwrap());
    let local_device = &local_device.0;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(local_device)
        .unwrap();
    f.rewind().unwrap();
    f.write_all(b"by-test!").unwrap();
    f.sync_all().unwrap();
    drop(f);
    let local_pv = pv(
        LOCAL_PV,
        LOCAL_CLAIM,
        json!({
            "volumeMode": "Block",
            "local": {"path": local_device.to_string_lossy()},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}},
        }),
    );
    create_bound(&client, &local_pv, LOCAL_CLAIM).await;

    k.start_as_node(NODE, &["--sync-frequency=10s"]);
    let registry = k.root_dir.join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let driver = TestDriver::start(Options::new(DRIVER, "node-1"), k.dir.path(), &registry);

    // The CSI device: staged and published as a block volume, written through the device
    // while the pod runs (a finished pod's volumes are given back at once).
    let writer = device_pod(
        CSI_POD,
        CSI_CLAIM,
        "test -b /dev/xvda && printf from-pod | dd of=/dev/xvda bs=512 count=1 conv=sync 2>/dev/null && sync && sleep 3600",
    );
    create_pod(&pods, &writer).await;
    let backing = driver.backing.join("blk-1.img");
    wait_for(
        Duration::from_secs(90),
        "the pod's write on its device",
        || (backing.exists() && first_bytes(&backing, 8) == "from-pod").then_some(()),
    );
    let uid = pods
        .get(CSI_POD)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap_or_default();
    let devices = k.root_dir.join("plugins/kubernetes.io/csi/volumeDevices");
    let stage = wait_call(&driver, "NodeStageVolume").await;
    assert!(stage.block, "{stage:?}");
    assert_eq!(
        Path::new(&stage.path),
        devices.join("staging").join(CSI_PV),
        "{stage:?}"
    );
    let publish = wait_call(&driver, "NodePublishVolume").await;
    let published = devices.join("publish").join(CSI_PV).join(&uid);
    assert!(publish.block, "{publish:?}");
    assert_eq!(Path::new(&publish.path), published, "{publish:?}");
    assert_eq!(
        Path::new(&publish.staging),
        devices.join("staging").join(CSI_PV)
    );
    let link = k
        .root_dir
        .join("pods")
        .join(&uid)
        .join("volumeDevices/kubernetes.io~csi")
        .join(CSI_PV);
    assert_eq!(std::fs::read_link(&link).unwrap(), published);

    // Deleted: unpublished, unstaged (the loop device goes), and nothing stays.
    delete_now(&pods, &[CSI_POD]).await;
    wait_call(&driver, "NodeUnstageVolume").await;
    assert_eq!(
        driver.ops(),
        [
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume"
        ]
    );
    assert_eq!(driver.loop_device("blk-1"), None);
    wait_for(
        Duration::from_secs(30),
        "no mount under the root dir and no block volume folder",
        || {
            (mounts_under(&k.root_dir).is_empty()
                && !devices.join("publish").join(CSI_PV).exists()
                && !devices.join("staging").join(CSI_PV).exists()
                && !devices.join(CSI_PV).exists())
            .then_some(())
        },
    );

    // Published again for another pod, then the kubelet is killed and the pod deleted: after
    // the restart the device is unpublished and unstaged from what the kubelet left on disk.
    // Meanwhile the node reports the volume in use.
    create_pod(&pods, &device_pod(SURVIVOR, CSI_CLAIM, "sleep 3600")).await;
    wait_async(Duration::from_secs(90), "the survivor to run", || async {
        first_running(&pods.get(SURVIVOR).await.ok()?).then_some(())
    })
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    let in_use = format!("kubernetes.io/csi/{DRIVER}^blk-1");
    wait_async(Duration::from_secs(60), "volumesInUse", || async {
        let node = nodes.get(NODE).await.ok()?;
        node.status?.volumes_in_use?.contains(&in_use).then_some(())
    })
    .await;
    k.kill();
    delete_now(&pods, &[SURVIVOR]).await;
    let before = driver.calls().len();
    k.start_as_node(NODE, &["--sync-frequency=10s"]);
    wait_async(
        Duration::from_secs(90),
        "the survivor's device to be unstaged",
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
        "nothing of the device left",
        || (mounts_under(&k.root_dir).is_empty() && !devices.join(CSI_PV).exists()).then_some(()),
    );

    // The local device, as it is.
    let reader = device_pod(
        LOCAL_POD,
        LOCAL_CLAIM,
        "test -b /dev/xvda && head -c 8 /dev/xvda > /dev/termination-log",
    );
    create_pod(&pods, &reader).await;
    assert_eq!(
        terminated(&pods, LOCAL_POD).await,
        "0 by-test!",
        "{}",
        tail(&k.log(), 60)
    );
    let local_uid = pods
        .get(LOCAL_POD)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap_or_default();
    let local_link = k
        .root_dir
        .join("pods")
        .join(&local_uid)
        .join("volumeDevices/kubernetes.io~local-volume")
        .join(LOCAL_PV);
    assert_eq!(&std::fs::read_link(&local_link).unwrap(), local_device);

    delete_now(&pods, &[LOCAL_POD]).await;
    remove_claims_and_volumes(&client, &[CSI_CLAIM, LOCAL_CLAIM], &[CSI_PV, LOCAL_PV]).await;
    let _ = csidrivers.delete(DRIVER, &DeleteParams::default()).await;
}
