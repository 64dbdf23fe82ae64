//! Admission sees the node's labels as they are now: a label added after the node registered
//! (`kubectl label node`) admits a pod that selects it, as upstream's node informer does.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

const NODE: &str = "krs-label-node";
const POD: &str = "krs-label-selector";
const LABEL: &str = "kubelet-rs.test/color";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_added_after_registration_admits_pods_that_select_it() {
    let client = admin_client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let gone = DeleteParams::default().grace_period(0);
    let _ = pods.delete(POD, &gone).await;

    let mut k = Kubelet::started_as_node("node-labels", NODE);
    wait_async(Duration::from_secs(60), "the node to register", || async {
        nodes.get_opt(NODE).await.ok()?.map(|_| ())
    })
    .await;
    let patch = json!({"metadata": {"labels": {LABEL: "blue"}}});
    nodes
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    let mut pod = bound_sleeper(POD, NODE);
    pod["spec"]["nodeSelector"] = json!({LABEL: "blue"});
    let pod = api_pod(pod);
    create_pod(&pods, &pod).await;
    let phase = wait_async(
        Duration::from_secs(60),
        "the pod to run or fail",
        || async {
            let p = pods.get(POD).await.ok()?;
            let status = p.status?;
            let phase = status.phase.unwrap_or_default();
            (phase == "Running" || phase == "Failed")
                .then(|| format!("{phase} {}", status.reason.unwrap_or_default()))
        },
    )
    .await;
    assert_eq!(phase.trim(), "Running", "admission used stale labels");

    let _ = pods.delete(POD, &gone).await;
    let _ = nodes.delete(NODE, &DeleteParams::default()).await;
    k.cleanup();
}
