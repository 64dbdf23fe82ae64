//! Huge pages through the API: the node reports its 2 MiB huge pages as `hugepages-2Mi`, a pod
//! that asks for them is admitted only while they last (upstream's `OutOfhugepages-2Mi`), and
//! a running pod's cgroup is limited to what it asked for (hugetlb.2MB.limit_in_bytes on v1,
//! hugetlb.2MB.max on v2), the pods' cgroup to what the node has, and the QoS cgroups not at all.
//!
//! A machine without free 2 MiB pages (this one: none are reserved) checks the refusal; the VM
//! bed (e2e/vm/run.sh test) reserves some before the tests, so there the pod runs and its
//! cgroup is checked. Which one ran is printed.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams};
use serde_json::json;

const NODE_NAME: &str = "krs-hugepages-node";
const POD: &str = "krs-huge";

/// Free 2 MiB pages on this machine.
fn free_2m_pages() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

fn huge_pod() -> Pod {
    // Guaranteed: requests equal limits, huge pages included.
    let resources = json!({"cpu": "100m", "memory": "32Mi", "hugepages-2Mi": "4Mi"});
    let mut pod = bound_sleeper(POD, NODE_NAME);
    pod["spec"]["containers"][0]["resources"] = json!({"requests": resources, "limits": resources});
    api_pod(pod)
}

/// The pod once it reached `phase`, within `timeout`.
async fn in_phase(pods: &Api<Pod>, phase: &str, timeout: Duration) -> Pod {
    wait_async(timeout, &format!("the pod {phase}"), || {
        let pods = pods.clone();
        async move {
            let p = pods.get(POD).await.ok()?;
            (p.status.as_ref()?.phase.as_deref() == Some(phase)).then_some(p)
        }
    })
    .await
}

#[test]
fn huge_pages_are_reported_admitted_and_limited() {
    run_serial(huge_pages());
}

async fn huge_pages() {
    let (client, pods) = default_pods(&[POD]).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let free = free_2m_pages();
    let mut k = Kubelet::new("hugepages");
    k.start_as_node(NODE_NAME, &[]);

    let reported = wait_async(Duration::from_secs(60), "node status", || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get(NODE_NAME).await.ok()?;
            let capacity = n.status?.capacity?;
            Some(capacity.get("hugepages-2Mi").map(|q| q.0.clone()))
        }
    })
    .await;
    let total: u64 =
        std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
    // Reported even when none are reserved, as upstream does; in Mi or in bytes.
    let mib = total * 2;
    let accepted = [format!("{mib}Mi"), (mib << 20).to_string()];
    assert!(
        reported.as_ref().is_some_and(|q| accepted.contains(q)),
        "capacity hugepages-2Mi {reported:?} with {total} pages"
    );

    // Above the pods only node allocatable holds huge pages back: the pods' cgroup may use
    // what the node has, the QoS cgroups are not limited (an earlier kubelet pinned them to 0).
    let kubepods = format!("{}/kubepods", k.cgroup_root);
    let kubepods_dir = cgroup::named("hugetlb", &kubepods);
    if kubepods_dir.exists() {
        let want = (mib << 20) as i64;
        let limit = wait_for_opt(Duration::from_secs(30), || {
            Some(cgroup::hugetlb_2m_limit(&kubepods_dir)).filter(|l| *l == want)
        });
        assert_eq!(
            limit,
            Some(want),
            "{}: {}",
            kubepods_dir.display(),
            cgroup::hugetlb_2m_limit(&kubepods_dir)
        );
        for qos in ["burstable", "besteffort"] {
            let dir = cgroup::named("hugetlb", &format!("{kubepods}/{qos}"));
            let limit = cgroup::hugetlb_2m_limit(&dir);
            assert!(
                limit == -1 || limit >= 1 << 40,
                "{}: {limit}",
                dir.display()
            );
        }
    } else {
        // This machine mounts no v1 hugetlb hierarchy.
        println!("no hugetlb controller: the cgroups above the pods are not checked");
    }

    create_pod(&pods, &huge_pod()).await;
    if free >= 2 {
        println!("{free} free 2 MiB pages: the pod must run with its limit");
        let pod = in_phase(&pods, "Running", Duration::from_secs(90)).await;
        let uid = pod.metadata.uid.unwrap();
        let dir = cgroup::find("hugetlb", &format!("pod{uid}")).expect("the pod's cgroup");
        assert_eq!(cgroup::hugetlb_2m_limit(&dir), 4 << 20, "{}", dir.display());
    } else {
        println!("no free 2 MiB pages: the pod must be refused");
        let pod = in_phase(&pods, "Failed", Duration::from_secs(60)).await;
        let status = pod.status.unwrap();
        assert_eq!(status.reason.as_deref(), Some("OutOfhugepages-2Mi"));
        let message = status.message.unwrap_or_default();
        assert!(
            message.contains("hugepages-2Mi, requested: 4194304"),
            "{message}"
        );
    }

    let _ = pods
        .delete(POD, &DeleteParams::default().grace_period(0))
        .await;
    k.stop();
    k.cleanup();
}
