//! Device plugins against the real API server and containerd: our own test plugin registers
//! on `/var/lib/kubelet/device-plugins/kubelet.sock`; its devices show in the Node's capacity
//! and allocatable (unhealthy ones leave allocatable); a pod that asks for one gets the
//! plugin's env, device node and mount; one that asks for more than is free is failed at
//! admission with upstream's reason before any container starts; pod-resources lists the
//! device; after kill -9 the restarted kubelet takes the plugin's registration again, keeps
//! the allocation (checkpoint) and leaves the container running.

mod common;
#[path = "common/device_plugin.rs"]
mod device_plugin;

use std::time::Duration;

use common::*;
use device_plugin::TestPlugin;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams};

const NODE: &str = "krs-devices-node";
const RESOURCE: &str = "widgets.kubelet-rs.io/widget";

async fn node_counts(nodes: &Api<Node>) -> Option<(String, String)> {
    let status = nodes.get_opt(NODE).await.ok()??.status?;
    let capacity = status.capacity?.get(RESOURCE)?.0.clone();
    let allocatable = status.allocatable?.get(RESOURCE)?.0.clone();
    Some((capacity, allocatable))
}

async fn wait_counts(nodes: &Api<Node>, want: (&str, &str), k: &Kubelet) {
    let want = (want.0.to_string(), want.1.to_string());
    let what = format!("node capacity/allocatable {want:?}");
    let got = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if node_counts(nodes).await.as_ref() == Some(&want) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await;
    assert!(
        got.is_ok(),
        "timed out waiting for {what}: {:?}\n{}",
        node_counts(nodes).await,
        tail(&k.log(), 40)
    );
}

fn widget_pod(name: &str, widgets: u32, out: &std::path::Path) -> Pod {
    let mut p = bound_sleeper(name, NODE);
    let script = format!(
        "echo \"${}\" > /out/env; test -c {} && echo yes > /out/device; cat {}/hello > /out/mount; sleep 3600",
        device_plugin::ENV,
        device_plugin::DEVICE_PATH,
        device_plugin::MOUNT_PATH
    );
    p["spec"]["containers"][0]["command"] = serde_json::json!(["sh", "-c", script]);
    p["spec"]["containers"][0]["resources"] =
        serde_json::json!({"limits": {RESOURCE: widgets.to_string()}});
    p["spec"]["containers"][0]["volumeMounts"] =
        serde_json::json!([{"name": "out", "mountPath": "/out"}]);
    p["spec"]["volumes"] =
        serde_json::json!([{"name": "out", "hostPath": {"path": out.display().to_string()}}]);
    api_pod(p)
}

async fn listed_devices(k: &Kubelet, pod: &str) -> Vec<(String, Vec<String>)> {
    use kubelet_rs::testing::podresources::{
        ListPodResourcesRequest, pod_resources_lister_client::PodResourcesListerClient,
    };
    let socket = k.root_dir.join("pod-resources/kubelet.sock");
    let channel =
        kubelet_rs::testing::connect_channel(&socket.display().to_string(), Duration::from_secs(5))
            .await
            .expect("pod-resources socket");
    let listed = PodResourcesListerClient::new(channel)
        .list(ListPodResourcesRequest {})
        .await
        .expect("List")
        .into_inner();
    listed
        .pod_resources
        .into_iter()
        .filter(|p| p.name == pod)
        .flat_map(|p| p.containers)
        .flat_map(|c| c.devices)
        .map(|d| (d.resource_name, d.device_ids))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn devices_reach_pods_follow_health_refuse_overcommit_and_survive_a_kubelet_crash() {
    // Kubelets sharing one containerd remove each other's pods; one device-plugins folder.
    let _guard = serial();
    let (client, pods) = default_pods(&["widget-a", "widget-b"]).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let _ = nodes.delete(NODE, &DeleteParams::default()).await;

    let mut k = Kubelet::started_as_node("device-plugins", NODE);
    let plugin = TestPlugin::start(RESOURCE, "krs-widgets.sock", &["w1", "w2"]);
    let verdict = wait_async(
        Duration::from_secs(30),
        "the plugin's registration",
        || async { plugin.verdicts().first().cloned() },
    )
    .await;
    assert_eq!(verdict, None, "registration refused");
    wait_counts(&nodes, ("2", "2"), &k).await;

    // A pod with one widget gets the plugin's env, device node and mount.
    let out_a = k.dir.path().join("out-a");
    std::fs::create_dir_all(&out_a).unwrap();
    create_pod(&pods, &widget_pod("widget-a", 1, &out_a)).await;
    wait_phase(&pods, "widget-a", "Running", Duration::from_secs(60)).await;
    let read = |f: &str| std::fs::read_to_string(out_a.join(f)).ok();
    let env = wait_for(Duration::from_secs(20), "the container's report", || {
        read("mount").and(read("env"))
    });
    let held = plugin.allocations.lock().unwrap().clone();
    assert_eq!(held.len(), 1, "one Allocate: {held:?}");
    assert_eq!(env.trim(), held[0].join(","));
    assert_eq!(read("device").as_deref(), Some("yes\n"));
    assert_eq!(read("mount").as_deref(), Some("from the widget plugin\n"));
    let listed = listed_devices(&k, "widget-a").await;
    assert_eq!(listed, vec![(RESOURCE.to_string(), held[0].clone())]);

    // The other widget turns unhealthy: it leaves allocatable, not capacity.
    let other = if held[0][0] == "w1" { "w2" } else { "w1" };
    plugin.set_health(other, false);
    wait_counts(&nodes, ("2", "1"), &k).await;

    // Nothing is free now: a pod asking for one is failed before any container starts.
    let out_b = k.dir.path().join("out-b");
    std::fs::create_dir_all(&out_b).unwrap();
    create_pod(&pods, &widget_pod("widget-b", 1, &out_b)).await;
    let status = wait_phase(&pods, "widget-b", "Failed", Duration::from_secs(30)).await;
    assert_eq!(status.reason.as_deref(), Some("UnexpectedAdmissionError"));
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(&format!(
            "Allocate failed due to requested number of devices unavailable for {RESOURCE}. Requested: 1, Available: 0, which is unexpected"
        )),
        "{message}"
    );
    assert!(
        status
            .container_statuses
            .is_none_or(|c| c.iter().all(|c| c.container_id.is_none()))
    );
    assert!(!out_b.join("env").exists());

    // kill -9 and a new start: the plugin registers again, the container runs on untouched
    // and keeps its widget (the checkpoint), pod-resources still lists it.
    let before = running_container_id(&pods.get("widget-a").await.unwrap());
    k.kill();
    k.start_as_node(NODE, &[]);
    let verdict = wait_async(
        Duration::from_secs(30),
        "the second registration",
        || async { plugin.verdicts().get(1).cloned() },
    )
    .await;
    assert_eq!(verdict, None, "registration refused");
    wait_counts(&nodes, ("2", "1"), &k).await;
    // The Node already said 2/1 before the kill, so the counts prove nothing about the new
    // kubelet: pod-resources lists a pod only once the new kubelet knows it from the apiserver.
    let listed = wait_async(
        Duration::from_secs(30),
        "widget-a in pod-resources after the restart",
        || async {
            let listed = listed_devices(&k, "widget-a").await;
            (!listed.is_empty()).then_some(listed)
        },
    )
    .await;
    assert_eq!(listed, vec![(RESOURCE.to_string(), held[0].clone())]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let a = pods.get("widget-a").await.unwrap();
    assert_eq!(
        running_container_id(&a),
        before,
        "the container was not replaced"
    );
    assert_eq!(first_status(&a).map(|s| s.restart_count), Some(0));
    assert_eq!(
        plugin.allocations.lock().unwrap().len(),
        1,
        "no new Allocate"
    );

    // The plugin goes: its devices are unhealthy, capacity stays for the grace period.
    plugin.stop();
    wait_counts(&nodes, ("2", "0"), &k).await;

    delete_now(&pods, &["widget-a", "widget-b"]).await;
    let _ = nodes.delete(NODE, &DeleteParams::default()).await;
    k.cleanup();
}
