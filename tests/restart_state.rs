//! What a pod's status says about its past survives a kubelet crash, through the real API
//! server: after a SIGKILL and a start, the restarted kubelet reports the pod's `startTime` and
//! its conditions' `lastTransitionTime` as they were (it has nothing of them in memory any more,
//! so it takes them from the API server, as upstream's status manager does), and the active
//! deadline still counts from that start, not from the restart.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const NODE: &str = "krs-restart-node";
const POD: &str = "krs-restart-times";
const DEADLINE_S: u64 = 40;

fn condition_time(s: &PodStatus, type_: &str) -> Option<Time> {
    s.conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)?
        .last_transition_time
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_time_condition_times_and_deadline_survive_a_crash() {
    let client = admin_client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let gone = DeleteParams::default().grace_period(0);
    let _ = pods.delete(POD, &gone).await;

    let mut k = Kubelet::new("restart-state");
    k.start_as_node(NODE, &[]);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": POD},
        "spec": {
            "nodeName": NODE,
            "activeDeadlineSeconds": DEADLINE_S,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
            }],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let before = wait_async(Duration::from_secs(60), "the pod ready", || async {
        let s = pods.get(POD).await.ok()?.status?;
        let ready = s
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(s)
    })
    .await;
    let started = before.start_time.clone().expect("startTime");
    let started_at = SystemTime::from(started.0);

    // Times have whole seconds on the wire: a restarted kubelet that took `now` would show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    k.kill();
    k.start_as_node(NODE, &[]);
    // The status syncer's first pass patches every pod it runs.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let after = pods.get(POD).await.unwrap().status.unwrap();
    assert_eq!(after.start_time, Some(started.clone()), "{after:?}");
    for type_ in ["Initialized", "Ready", "ContainersReady"] {
        assert_eq!(
            condition_time(&after, type_),
            condition_time(&before, type_),
            "{type_}: {after:?}"
        );
    }

    // The deadline counts from the first start: the pod fails about DEADLINE_S after it, not
    // DEADLINE_S after the restart.
    let failed = wait_async(
        Duration::from_secs(DEADLINE_S + 30),
        "the pod failed by its deadline",
        || async {
            let s = pods.get(POD).await.ok()?.status?;
            (s.phase.as_deref() == Some("Failed")).then_some(s)
        },
    )
    .await;
    assert_eq!(failed.reason.as_deref(), Some("DeadlineExceeded"));
    let late = SystemTime::now()
        .duration_since(started_at)
        .unwrap_or_default();
    assert!(
        late < Duration::from_secs(DEADLINE_S + 10),
        "failed {late:?} after its start (deadline {DEADLINE_S} s)"
    );
    assert_eq!(failed.start_time, Some(started));

    let _ = pods.delete(POD, &gone).await;
    k.cleanup();
}
