//! What the kubelet knew before a crash, it takes from the API server after it, through the
//! real API server with a SIGKILL in the middle:
//! - the restarted kubelet reports a pod's `startTime` and its conditions' `lastTransitionTime`
//!   as they were (as upstream's status manager does), and the active deadline still counts
//!   from that start, not from the restart;
//! - a running pod that selects a label someone added to the node is admitted again by the
//!   labels the API server has, not only the flags': it keeps running, its container untouched.
//! - a pod that finished before the start gives back the volumes it still holds.
//! - a static pod changed while the kubelet was down never runs beside its old self.
//! - an API pod deleted while the kubelet was down is cleaned up after the start, and one whose
//!   container ended meanwhile is reported as it ended.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
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
#[allow(clippy::await_holding_lock)]
async fn start_time_condition_times_and_deadline_survive_a_crash() {
    let _guard = serial();
    let (_, pods) = default_pods(&[POD]).await;

    let mut k = Kubelet::started_as_node("restart-state", NODE);
    let mut pod = bound_sleeper(POD, NODE);
    pod["spec"]["activeDeadlineSeconds"] = json!(DEADLINE_S);
    let pod = api_pod(pod);
    create_pod(&pods, &pod).await;
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

    delete_now(&pods, &[POD]).await;
    k.cleanup();
}

const LABEL_NODE: &str = "krs-restart-labels";
const LABEL_POD: &str = "krs-restart-selector";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn a_pod_selecting_an_added_node_label_survives_a_crash() {
    let _guard = serial();
    let (client, pods) = default_pods(&[LABEL_POD]).await;
    let nodes: Api<Node> = Api::all(client.clone());

    let mut k = Kubelet::started_as_node("restart-labels", LABEL_NODE);
    wait_async(Duration::from_secs(60), "the node registered", || async {
        nodes.get_opt(LABEL_NODE).await.ok().flatten()
    })
    .await;
    nodes
        .patch(
            LABEL_NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"krs-test/disk": "ssd"}}})),
        )
        .await
        .unwrap();
    let mut pod = bound_sleeper(LABEL_POD, LABEL_NODE);
    pod["spec"]["nodeSelector"] = json!({"krs-test/disk": "ssd"});
    let pod = api_pod(pod);
    // The kubelet's node watch takes a moment to see the label; a pod that came first would be
    // rejected, with upstream's kubelet too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    create_pod(&pods, &pod).await;
    let container_id = |p: &Pod| first_status(p)?.container_id.clone();
    let before = wait_async(Duration::from_secs(60), "the pod running", || async {
        let p = pods.get(LABEL_POD).await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(())?;
        container_id(&p)
    })
    .await;

    k.kill();
    k.start_as_node(LABEL_NODE, &[]);
    // Through the status syncer's first pass and more.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let after = pods.get(LABEL_POD).await.unwrap();
    let status = after.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"), "{status:?}");
    assert_eq!(container_id(&after), Some(before), "{status:?}");
    assert_eq!(
        status.container_statuses.as_ref().unwrap()[0].restart_count,
        0,
        "{status:?}"
    );
    let log = k.log();
    assert!(!log.contains("Pod rejected"), "{}", tail(&log, 40));

    delete_now(&pods, &[LABEL_POD]).await;
    k.cleanup();
    let _ = nodes.delete(LABEL_NODE, &DeleteParams::default()).await;
}

const FINISHED_NODE: &str = "krs-restart-finished";
const FINISHED_POD: &str = "krs-restart-finished";

/// A pod that finished before the start and still holds a volume (the kubelet was killed
/// between the pod's end and the release of its volumes, say) gives it back once the kubelet
/// is up again, as a worker does when its pod finishes: found from the API server (the pod is
/// Succeeded) and the disk, not from memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn a_finished_pods_volumes_left_held_are_released_after_a_restart() {
    let _guard = serial();
    let (client, pods) = default_pods(&[FINISHED_POD]).await;
    let nodes: Api<Node> = Api::all(client.clone());

    let mut k = Kubelet::started_as_node("restart-finished", FINISHED_NODE);
    let pod: Pod = api_pod(json!({
        "metadata": {"name": FINISHED_POD},
        "spec": {
            "nodeName": FINISHED_NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "echo kept > /scratch/f"],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }],
        },
    }));
    let uid = create_pod(&pods, &pod).await;
    wait_phase(&pods, FINISHED_POD, "Succeeded", Duration::from_secs(60)).await;
    let volumes = k.root_dir.join("pods").join(&uid).join("volumes");
    wait_for(Duration::from_secs(30), "the volumes released", || {
        (!volumes.exists()).then_some(())
    });
    k.stop();

    // What the release would have given back, as the pod left it: its emptyDir's tmpfs.
    let scratch = volumes.join("kubernetes.io~empty-dir/scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&scratch)
        .status()
        .unwrap();
    assert!(mounted.success());
    std::fs::write(scratch.join("f"), "kept").unwrap();

    k.start_as_node(FINISHED_NODE, &[]);
    let released = wait_for_opt(Duration::from_secs(20), || {
        (!volumes.exists()).then_some(())
    });
    let still = common::storage::mounts_under(&k.root_dir);
    for mp in &still {
        let _ = std::process::Command::new("umount")
            .args(["-l", mp])
            .status();
    }
    assert!(
        released.is_some() && still.is_empty(),
        "the finished pod's volume is still held (mounts {still:?}); log:\n{}",
        tail(&k.log(), 40)
    );
    // The pod itself stays, with its status, until it is deleted.
    let p = pods.get(FINISHED_POD).await.unwrap();
    assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Succeeded"));

    delete_now(&pods, &[FINISHED_POD]).await;
    k.cleanup();
    let _ = nodes.delete(FINISHED_NODE, &DeleteParams::default()).await;
}

/// A static pod holding a lock (a folder on the host: `mkdir` fails if it exists) for its
/// whole life, tagged `tag`; it fails at once when the lock is taken.
fn lock_holder(tag: &str, shared: &std::path::Path) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: lock-holder
spec:
  terminationGracePeriodSeconds: 2
  volumes:
  - name: shared
    hostPath: {{path: "{}"}}
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    volumeMounts: [{{name: shared, mountPath: /shared}}]
    command: ["sh", "-c", "mkdir /shared/lock || exit 1; trap 'rmdir /shared/lock; exit 0' TERM; echo {tag} holds the lock; while true; do sleep 1; done"]
"#,
        shared.display()
    )
}

/// A static pod whose manifest changed while the kubelet was down (same name, so a new UID)
/// starts only once what the runtime still runs of the old one has stopped: the two never run
/// side by side (here they would fight over one lock, and the new one would fail and restart).
#[test]
fn a_static_pod_changed_while_down_never_runs_beside_its_old_self() {
    let _guard = serial();
    let mut k = Kubelet::new("restart-static-replaced");
    let shared = k.dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    k.write_manifest("lock.yaml", &lock_holder("v1", &shared));
    k.start();
    let running =
        |p: &serde_json::Value| container_status(p, "main")["state"]["running"].is_object();
    let v1 = k.wait_pod(
        "lock-holder",
        "v1 running",
        Duration::from_secs(60),
        running,
    );
    k.kill();
    k.write_manifest("lock.yaml", &lock_holder("v2", &shared));
    k.start();
    let v2 = k.wait_pod("lock-holder", "v2 running", Duration::from_secs(60), |p| {
        p["metadata"]["uid"] != v1["metadata"]["uid"] && running(p)
    });
    // Past a failed first attempt's restart, had there been one.
    std::thread::sleep(Duration::from_secs(3));
    let v2 = k.pod("lock-holder").unwrap_or(v2);
    assert_eq!(
        container_status(&v2, "main")["restartCount"],
        0,
        "v2 ran beside v1: {v2:#}\n{}",
        tail(&k.log(), 40)
    );
    assert!(running(&v2), "{v2:#}");
    k.cleanup();
}

const DOWN_NODE: &str = "krs-restart-down";

fn sleeper_pod(name: &str, restart: &str, script: &str) -> Pod {
    let mut pod = bound_sleeper(name, DOWN_NODE);
    pod["spec"]["restartPolicy"] = json!(restart);
    pod["spec"]["containers"][0]["command"] = json!(["sh", "-c", script]);
    api_pod(pod)
}

/// While the kubelet is down (killed), one API pod is deleted and another one's container
/// ends: after the start, what the deleted pod left (containers, folder, logs) goes, and the
/// other's end is reported (Succeeded, its exit code), both found from the API server and
/// the runtime rather than from memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn pods_deleted_or_ended_while_down_are_cleaned_up_and_reported() {
    let _guard = serial();
    let (deleted, ended) = ("krs-down-deleted", "krs-down-ended");
    let (client, pods) = default_pods(&[deleted, ended]).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let gone = DeleteParams::default().grace_period(0);
    let mut k = Kubelet::started_as_node("restart-down", DOWN_NODE);
    let mut uids = Vec::new();
    for pod in [
        sleeper_pod(deleted, "Always", "sleep 3600"),
        sleeper_pod(ended, "Never", "sleep 6; exit 0"),
    ] {
        uids.push(create_pod(&pods, &pod).await);
    }
    for name in [deleted, ended] {
        wait_phase(&pods, name, "Running", Duration::from_secs(60)).await;
    }
    let deleted_dir = k.root_dir.join("pods").join(&uids[0]);
    let deleted_logs = k
        .pod_logs_dir
        .join(format!("default_{deleted}_{}", uids[0]));
    assert!(deleted_dir.exists() && deleted_logs.exists());

    k.kill();
    pods.delete(deleted, &gone).await.unwrap();
    // The other pod's container ends meanwhile.
    tokio::time::sleep(Duration::from_secs(8)).await;
    k.start_as_node(DOWN_NODE, &[]);

    let status = wait_phase(&pods, ended, "Succeeded", Duration::from_secs(60)).await;
    let terminated = status.container_statuses.as_ref().unwrap()[0]
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!(terminated.exit_code, 0, "{status:?}");
    wait_for(
        Duration::from_secs(60),
        "what the deleted pod left gone",
        || (!deleted_dir.exists() && !deleted_logs.exists()).then_some(()),
    );
    let tasks = running_tasks();
    let still: Vec<_> = k
        .pods()
        .into_iter()
        .filter(|p| p["metadata"]["uid"] == uids[0].as_str())
        .collect();
    assert!(still.is_empty(), "{still:?} (running tasks {tasks:?})");

    let _ = pods.delete(ended, &gone).await;
    k.cleanup();
    let _ = nodes.delete(DOWN_NODE, &DeleteParams::default()).await;
}
