//! Readiness gates through the real API server: a pod whose containers are ready stays not
//! Ready (reason ReadinessGatesNotReady, upstream's messages) until another writer sets the
//! gate's condition True on the pod's status, and follows it back to False; the kubelet's own
//! status patches keep that condition.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const NODE: &str = "krs-gates-node";
const POD: &str = "krs-readiness-gate";
const GATE: &str = "example.com/feature-ready";

fn condition(p: &Pod, type_: &str) -> Option<PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

async fn set_gate(pods: &Api<Pod>, status: &str) {
    let patch = json!({"status": {"conditions": [{"type": GATE, "status": status}]}});
    pods.patch_status(POD, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("patch the gate's condition");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_gates_hold_ready() {
    let (_, pods) = default_pods(&[POD]).await;

    let mut k = Kubelet::started_as_node("readiness-gates", NODE);
    let mut pod = bound_sleeper(POD, NODE);
    pod["spec"]["readinessGates"] = json!([{"conditionType": GATE}]);
    let pod = api_pod(pod);
    create_pod(&pods, &pod).await;

    let ready = wait_async(
        Duration::from_secs(60),
        "containers ready, pod not",
        || async {
            let p = pods.get(POD).await.ok()?;
            (condition(&p, "ContainersReady")?.status == "True").then(|| condition(&p, "Ready"))?
        },
    )
    .await;
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some(
            "corresponding condition of pod readiness gate \"example.com/feature-ready\" does not exist."
        )
    );

    set_gate(&pods, "True").await;
    wait_async(
        Duration::from_secs(30),
        "Ready once the gate is True",
        || async {
            let p = pods.get(POD).await.ok()?;
            (condition(&p, "Ready")?.status == "True").then_some(())
        },
    )
    .await;
    let p = pods.get(POD).await.unwrap();
    assert_eq!(
        condition(&p, GATE).map(|c| c.status).as_deref(),
        Some("True"),
        "the kubelet's status patch keeps the gate's condition"
    );

    set_gate(&pods, "False").await;
    let back = wait_async(Duration::from_secs(30), "not Ready again", || async {
        let p = pods.get(POD).await.ok()?;
        condition(&p, "Ready").filter(|c| c.status == "False")
    })
    .await;
    assert_eq!(
        back.message.as_deref(),
        Some(
            "the status of pod readiness gate \"example.com/feature-ready\" is not \"True\", but False"
        )
    );

    delete_now(&pods, &[POD]).await;
    wait_async(Duration::from_secs(60), "the pod to go", || async {
        pods.get_opt(POD).await.ok()?.is_none().then_some(())
    })
    .await;
    k.cleanup();
}
