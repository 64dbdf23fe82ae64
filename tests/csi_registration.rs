//! CSI drivers register through the plugin manager, against the real API server: a driver's
//! registration socket in `<root-dir>/plugins_registry/` gets NodeGetInfo asked of it and
//! its node ID, topology keys and volume limit published in the node's CSINode and the
//! Node's `csi.volume.kubernetes.io/nodeid` annotation and labels, as upstream publishes
//! them; the socket's removal takes it out again; a kubelet restart registers it anew;
//! an unsupported version or plugin type is refused with upstream's reason (device plugins go
//! to the device manager, which checks them as upstream's does).

mod common;
#[path = "common/csi_driver.rs"]
mod csi_driver;

use std::time::Duration;

use common::*;
use csi_driver::{Options, TestDriver};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, DeleteParams};

const NODE: &str = "krs-csi-node";
const DRIVER: &str = "test.csi.kubelet-rs.io";
const ZONE_KEY: &str = "topology.test.csi.kubelet-rs.io/zone";
const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";

async fn driver_entry(
    csinodes: &Api<CSINode>,
) -> Option<k8s_openapi::api::storage::v1::CSINodeDriver> {
    let c = csinodes.get_opt(NODE).await.ok()??;
    c.spec.drivers.into_iter().find(|d| d.name == DRIVER)
}

async fn node_ids(nodes: &Api<Node>) -> Option<String> {
    let n = nodes.get_opt(NODE).await.ok()??;
    n.metadata.annotations?.get(NODE_ID_ANNOTATION).cloned()
}

async fn verdict(driver: &TestDriver, n: usize) -> (bool, String) {
    wait_async(Duration::from_secs(30), "the kubelet's verdict", || async {
        driver.verdicts().get(n).cloned()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn a_driver_registers_publishes_its_node_info_and_deregisters() {
    // Kubelets sharing one containerd remove each other's pods.
    let _guard = serial();
    let client = admin_client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let csinodes: Api<CSINode> = Api::all(client.clone());
    let _ = nodes.delete(NODE, &DeleteParams::default()).await;
    let _ = csinodes.delete(NODE, &DeleteParams::default()).await;

    let mut k = Kubelet::started_as_node("csi-registration", NODE);
    let registry = k.root_dir.join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();

    // Made at start, before any driver: owned by the Node, with the migration annotation.
    let csinode = wait_async(Duration::from_secs(60), "the CSINode object", || async {
        csinodes.get_opt(NODE).await.ok()?
    })
    .await;
    let owner = &csinode.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", NODE));
    let migrated = &csinode.metadata.annotations.as_ref().unwrap()["storage.alpha.kubernetes.io/migrated-plugins"];
    assert!(migrated.contains("kubernetes.io/gce-pd"), "{migrated}");

    let mut opts = Options::new(DRIVER, "node-abc");
    opts.max_volumes = 7;
    opts.topology.insert(ZONE_KEY.to_string(), "z1".to_string());
    let mut driver = TestDriver::start(opts, k.dir.path(), &registry);
    assert_eq!(
        verdict(&driver, 0).await,
        (true, String::new()),
        "{}",
        tail(&k.log(), 40)
    );

    let entry = wait_async(Duration::from_secs(30), "the driver in CSINode", || {
        driver_entry(&csinodes)
    })
    .await;
    assert_eq!(entry.node_id, "node-abc");
    assert_eq!(entry.topology_keys, Some(vec![ZONE_KEY.to_string()]));
    assert_eq!(entry.allocatable.and_then(|a| a.count), Some(7));
    let ids = node_ids(&nodes).await.expect("the node ID annotation");
    assert_eq!(ids, format!(r#"{{"{DRIVER}":"node-abc"}}"#));
    let node = nodes.get(NODE).await.unwrap();
    assert_eq!(
        node.metadata
            .labels
            .unwrap()
            .get(ZONE_KEY)
            .map(String::as_str),
        Some("z1")
    );

    // A restarted kubelet finds the socket and registers the driver again.
    k.stop();
    k.start_as_node(NODE, &[]);
    assert_eq!(
        verdict(&driver, 1).await,
        (true, String::new()),
        "{}",
        tail(&k.log(), 40)
    );

    // The socket goes: the driver leaves CSINode and the annotation.
    driver.stop_registration();
    wait_async(
        Duration::from_secs(30),
        "the driver to leave CSINode",
        || async {
            let c = csinodes.get_opt(NODE).await.ok()??;
            c.spec
                .drivers
                .iter()
                .all(|d| d.name != DRIVER)
                .then_some(())
        },
    )
    .await;
    wait_async(
        Duration::from_secs(30),
        "the node ID annotation to go",
        || async { node_ids(&nodes).await.is_none().then_some(()) },
    )
    .await;

    let _ = csinodes.delete(NODE, &DeleteParams::default()).await;
    let _ = nodes.delete(NODE, &DeleteParams::default()).await;
    k.cleanup();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn unsupported_versions_and_plugin_types_are_refused_with_the_reason() {
    // Kubelets sharing one containerd remove each other's pods.
    let _guard = serial();
    let mut k = Kubelet::new("csi-refusals");
    k.start();
    let registry = k.root_dir.join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();

    let mut old = Options::new("old.csi.kubelet-rs.io", "n1");
    old.versions = vec!["0.3.0".to_string()];
    let old = TestDriver::start(old, k.dir.path(), &registry);
    let (registered, reason) = verdict(&old, 0).await;
    assert!(!registered);
    assert!(
        reason.contains("plugin validation failed") && reason.contains("must be v1.x"),
        "{reason}"
    );

    let mut dra = Options::new("dra.kubelet-rs.io", "n1");
    dra.plugin_type = "DRAPlugin".to_string();
    let dra = TestDriver::start(dra, k.dir.path(), &registry);
    let (registered, reason) = verdict(&dra, 0).await;
    assert!(!registered);
    assert!(
        reason.contains("no handler registered for plugin type: DRAPlugin"),
        "{reason}"
    );

    // Device plugins go to the device manager, which checks their versions as upstream's.
    let mut device = Options::new("example.com/widget", "n1");
    device.plugin_type = "DevicePlugin".to_string();
    let device = TestDriver::start(device, k.dir.path(), &registry);
    let (registered, reason) = verdict(&device, 0).await;
    assert!(!registered);
    assert!(
        reason.contains("manager version, v1beta1, is not among plugin supported versions [1.0.0]"),
        "{reason}"
    );

    // Standalone, a good driver is still taken (for this kubelet's own volumes).
    let good = TestDriver::start(
        Options::new("good.csi.kubelet-rs.io", "n1"),
        k.dir.path(),
        &registry,
    );
    assert_eq!(
        verdict(&good, 0).await,
        (true, String::new()),
        "{}",
        tail(&k.log(), 40)
    );
    k.assert_alive();
    k.cleanup();
}
