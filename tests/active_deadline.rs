//! `activeDeadlineSeconds` through the real API server: a running pod whose deadline is
//! shortened fails with reason DeadlineExceeded, its container stopped and not restarted, as
//! with upstream's kubelet.

mod common;

use std::time::Duration;

use common::*;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const NODE: &str = "krs-deadline-node";
const POD: &str = "krs-active-deadline";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shortened_deadline_fails_the_pod() {
    let (_, pods) = default_pods(&[POD]).await;

    let mut k = Kubelet::started_as_node("active-deadline", NODE);
    let mut pod = bound_sleeper(POD, NODE);
    pod["spec"]["activeDeadlineSeconds"] = json!(3000);
    let pod = api_pod(pod);
    create_pod(&pods, &pod).await;
    wait_async(Duration::from_secs(60), "the pod to run", || async {
        let p = pods.get(POD).await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;

    pods.patch(
        POD,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"activeDeadlineSeconds": 2}})),
    )
    .await
    .unwrap();
    let status = wait_async(Duration::from_secs(60), "the pod to fail", || async {
        let s = pods.get(POD).await.ok()?.status?;
        (s.phase.as_deref() == Some("Failed")).then_some(s)
    })
    .await;
    assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
    // The container is stopped, and stays stopped.
    let stopped = wait_async(Duration::from_secs(30), "the container to stop", || async {
        let s = pods.get(POD).await.ok()?.status?;
        let c = s.container_statuses?.into_iter().next()?;
        c.state?.terminated.map(|_| c.restart_count)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = pods.get(POD).await.unwrap().status.unwrap();
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    let c = &s.container_statuses.unwrap()[0];
    assert_eq!(c.restart_count, stopped, "a failed pod is not restarted");
    assert!(c.state.as_ref().unwrap().terminated.is_some());

    delete_now(&pods, &[POD]).await;
    wait_async(Duration::from_secs(60), "the pod to go", || async {
        pods.get_opt(POD).await.ok()?.is_none().then_some(())
    })
    .await;
    k.cleanup();
}
