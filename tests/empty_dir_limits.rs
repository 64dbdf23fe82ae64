//! emptyDir `sizeLimit` through the real API server (the field exists in v1.20): a pod whose
//! disk-backed emptyDir outgrows its limit is evicted like upstream's kubelet does it (phase
//! Failed, reason Evicted, upstream's message and a Warning event), and a memory-backed
//! emptyDir is a tmpfs of the smaller of its limit and the pod's memory limit.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

const NODE: &str = "krs-sizelimit-node";
const HOG: &str = "krs-emptydir-hog";
const TMPFS: &str = "krs-emptydir-tmpfs";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_dir_size_limits() {
    let (client, pods) = default_pods(&[]).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let gone = DeleteParams::default().grace_period(0);
    for name in [HOG, TMPFS] {
        let _ = pods.delete(name, &gone).await;
    }

    let mut k = Kubelet::started_as_node("sizelimit", NODE);

    // Writes 3 MiB into a 1 MiB disk emptyDir, then waits; a sibling volume stays small.
    let hog: Pod = api_pod(json!({
        "metadata": {"name": HOG},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "sleep 2; dd if=/dev/zero of=/data/blob bs=1024 count=3072; sleep 3600"],
                "volumeMounts": [
                    {"name": "small", "mountPath": "/small"},
                    {"name": "data", "mountPath": "/data"},
                ],
            }],
            "volumes": [
                {"name": "small", "emptyDir": {"sizeLimit": "64Mi"}},
                {"name": "data", "emptyDir": {"sizeLimit": "1Mi"}},
            ],
        },
    }));
    // A 32 MiB pod memory limit and two tmpfs emptyDirs: one limited to 8 MiB, one bounded
    // by the pod's limit only. The container reports their sizes in its termination message.
    let tmpfs: Pod = api_pod(json!({
        "metadata": {"name": TMPFS},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c",
                    "df -k /limited /bounded | tail -n 2 | awk '{print $2}' | tr '\\n' ' ' > /dev/termination-log"],
                "resources": {"limits": {"memory": "32Mi"}},
                "volumeMounts": [
                    {"name": "limited", "mountPath": "/limited"},
                    {"name": "bounded", "mountPath": "/bounded"},
                ],
            }],
            "volumes": [
                {"name": "limited", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}},
                {"name": "bounded", "emptyDir": {"medium": "Memory"}},
            ],
        },
    }));
    create_pod(&pods, &hog).await;
    create_pod(&pods, &tmpfs).await;

    let status = wait_async(Duration::from_secs(90), "the hog to be evicted", || async {
        let s = pods.get(HOG).await.ok()?.status?;
        (s.phase.as_deref() == Some("Failed")).then_some(s)
    })
    .await;
    assert_eq!(status.reason.as_deref(), Some("Evicted"), "{status:?}");
    assert_eq!(
        status.message.as_deref(),
        Some("Usage of EmptyDir volume \"data\" exceeds the limit \"1Mi\". ")
    );
    let event = wait_async(Duration::from_secs(30), "the Evicted event", || async {
        let list = events
            .list(
                &ListParams::default().fields(&format!("involvedObject.name={HOG},reason=Evicted")),
            )
            .await
            .ok()?;
        list.items.into_iter().next()
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    // Stopped at once (grace 1 s, not the pod's 30 s) and never restarted.
    wait_async(Duration::from_secs(20), "the container to stop", || async {
        let s = pods.get(HOG).await.ok()?.status?;
        let c = s.container_statuses?.into_iter().next()?;
        (c.state?.terminated.is_some() && c.restart_count == 0).then_some(())
    })
    .await;

    let sizes = wait_async(Duration::from_secs(60), "the tmpfs sizes", || async {
        let s = pods.get(TMPFS).await.ok()?.status?;
        let c = s.container_statuses?.into_iter().next()?;
        c.state?.terminated?.message
    })
    .await;
    assert_eq!(
        sizes.trim(),
        "8192 32768",
        "df -k sizes of /limited and /bounded"
    );

    for name in [HOG, TMPFS] {
        let _ = pods.delete(name, &gone).await;
    }
    wait_async(Duration::from_secs(60), "the pods to go", || async {
        for name in [HOG, TMPFS] {
            if pods.get_opt(name).await.ok()?.is_some() {
                return None;
            }
        }
        Some(())
    })
    .await;
    k.cleanup();
}
