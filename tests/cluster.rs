//! The kubelet as a member of a real control plane (hack/cluster: etcd, kube-apiserver,
//! controller-manager and scheduler v1.20.2 on loopback) and the test bed's containerd.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const CLUSTER_NODE: &str = "krs-it-node";

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// Joins like a kubeadm node: only a bootstrap token at first, a client certificate from the
/// cluster's CSR signer after TLS bootstrap.
async fn wait_ready(nodes: &Api<Node>, what: &str) -> Node {
    wait_async(Duration::from_secs(60), what, || async {
        nodes
            .get_opt(CLUSTER_NODE)
            .await
            .ok()
            .flatten()
            .filter(ready)
    })
    .await
}

fn start_in_cluster(k: &mut Kubelet) {
    let env = cluster_env();
    let kubeconfig = k.dir.path().join("kubelet.conf");
    let bootstrap = env
        .get("KRS_BOOTSTRAP_KUBECONFIG")
        .expect("KRS_BOOTSTRAP_KUBECONFIG from env.sh");
    let node_ip = env
        .get("KRS_NODE_IP")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1".into());
    k.start_with(&[
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--bootstrap-kubeconfig={bootstrap}"),
        &format!("--cert-dir={}", k.dir.path().join("pki").display()),
        &format!("--node-ip={node_ip}"),
    ]);
    assert!(kubeconfig.exists(), "TLS bootstrap wrote no kubeconfig");
    assert!(k.dir.path().join("pki/kubelet-client-current.pem").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_joins_runs_a_deployment_and_rejects_what_does_not_fit() {
    // One test per binary: test binaries run one after another, so no other kubelet shares
    // the test containerd meanwhile.
    let mut k = Kubelet::new("cluster");
    start_in_cluster(&mut k);
    let client = admin_client().await;
    let nodes: Api<Node> = Api::all(client.clone());

    let node = wait_ready(&nodes, "node Ready").await;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("kubernetes.io/hostname").map(String::as_str),
        Some(CLUSTER_NODE)
    );
    assert_eq!(
        labels.get("kubernetes.io/os").map(String::as_str),
        Some("linux")
    );
    let info = node.status.clone().unwrap().node_info.unwrap();
    assert!(
        info.container_runtime_version.starts_with("containerd://"),
        "{info:?}"
    );

    // The kubelet announced itself and the node's conditions as events, and on a cgroup v1 host
    // upstream's maintenance-mode warning.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let on_node = ListParams::default().fields(&format!("involvedObject.name={CLUSTER_NODE}"));
    let mut wanted = vec!["Starting", "NodeReady", "NodeAllocatableEnforced"];
    if !cgroup_v2_host() {
        wanted.push("CgroupV1");
    }
    let list = wait_async(Duration::from_secs(30), &wanted.join(", "), || async {
        let list = events.list(&on_node).await.ok()?;
        let reasons: Vec<_> = list.items.iter().filter_map(|e| e.reason.clone()).collect();
        wanted
            .iter()
            .all(|want| reasons.iter().any(|r| r == want))
            .then_some(list)
    })
    .await;
    let cgroup_v1 = list
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("CgroupV1"));
    assert_eq!(cgroup_v1.is_some(), !cgroup_v2_host(), "{:?}", list.items);
    if let Some(event) = cgroup_v1 {
        assert_eq!(event.type_.as_deref(), Some("Warning"), "{event:?}");
        assert_eq!(
            event.message.as_deref(),
            Some("cgroup v1 support is in maintenance mode, please migrate to cgroup v2")
        );
    }

    // The lease is renewed.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let renew = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone());
    let first = wait_async(Duration::from_secs(30), "lease", || async {
        leases.get_opt(CLUSTER_NODE).await.ok().flatten()
    })
    .await;
    assert_eq!(
        first
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref()),
        Some(CLUSTER_NODE)
    );
    wait_async(Duration::from_secs(30), "lease renewal", || async {
        let now = leases.get_opt(CLUSTER_NODE).await.ok().flatten()?;
        (renew(&now) > renew(&first)).then_some(())
    })
    .await;

    // A Deployment of three replicas runs and becomes Ready.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let deploy: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "krs-web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "krs-web"}},
            "template": {
                "metadata": {"labels": {"app": "krs-web"}},
                "spec": {
                    // Other tests' nodes stay in the cluster; one that stopped moments ago
                    // still reads Ready to the scheduler.
                    "nodeSelector": {"kubernetes.io/hostname": CLUSTER_NODE},
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{
                        "name": "web", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
                    }]
                }
            }
        }
    }))
    .unwrap();
    let _ = deployments
        .delete("krs-web", &DeleteParams::default())
        .await;
    deployments
        .create(&PostParams::default(), &deploy)
        .await
        .expect("create deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let selector = ListParams::default().labels("app=krs-web");
    wait_async(Duration::from_secs(90), "3 running, ready pods", || async {
        let list = pods.list(&selector).await.ok()?;
        let ok = list
            .items
            .iter()
            .filter(|p| {
                let st = p.status.clone().unwrap_or_default();
                st.phase.as_deref() == Some("Running")
                    && st
                        .conditions
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
            })
            .count();
        (ok == 3).then_some(())
    })
    .await;

    // Deleting it terminates the pods within their grace period and the objects disappear.
    deployments
        .delete("krs-web", &DeleteParams::foreground())
        .await
        .expect("delete deployment");
    wait_async(Duration::from_secs(60), "pods gone", || async {
        let list = pods.list(&selector).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await;

    // A pod asking for more CPU than the node has is failed with OutOfcpu.
    let greedy: Pod = api_pod(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "krs-greedy"},
        "spec": {
            "nodeName": CLUSTER_NODE,
            "containers": [{
                "name": "c", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "resources": {"requests": {"cpu": "1000"}}
            }]
        }
    }));
    let _ = pods
        .delete("krs-greedy", &DeleteParams::default().grace_period(0))
        .await;
    pods.create(&PostParams::default(), &greedy)
        .await
        .expect("create greedy pod");
    let failed = wait_async(Duration::from_secs(30), "OutOfcpu", || async {
        let p = pods.get_opt("krs-greedy").await.ok().flatten()?;
        let st = p.status.clone()?;
        (st.phase.as_deref() == Some("Failed")).then_some(st)
    })
    .await;
    assert_eq!(failed.reason.as_deref(), Some("OutOfcpu"), "{failed:?}");
    pods.delete("krs-greedy", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete greedy pod");

    // An API server outage of a minute leaves running pods alone, and the kubelet catches up.
    let steady: Pod = api_pod(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "krs-steady"},
        "spec": {
            "nodeName": CLUSTER_NODE,
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "c", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
            }]
        }
    }));
    pods.create(&PostParams::default(), &steady)
        .await
        .expect("create steady pod");
    let before = wait_async(Duration::from_secs(60), "steady pod running", || async {
        running_container_id(&pods.get_opt("krs-steady").await.ok().flatten()?)
    })
    .await;
    let tasks_before = running_tasks();
    stop_apiserver();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        running_tasks(),
        tasks_before,
        "pods changed during the API server outage"
    );
    restart_control_plane();
    let after = wait_async(
        Duration::from_secs(90),
        "steady pod reported again",
        || async { running_container_id(&pods.get_opt("krs-steady").await.ok().flatten()?) },
    )
    .await;
    assert_eq!(before, after, "the container was restarted");
    wait_ready(&nodes, "node Ready again").await;
    // A deleted pod ends terminal: the object the watch sees deleted shows how it ended (its
    // container stops on SIGTERM with 0), as upstream's status manager leaves it.
    // The list's version, not the pod's: the pod last changed before the apiserver restart
    // above, and the restarted apiserver's watch cache starts after that (410 Expired).
    let version = pods
        .list(&ListParams::default().fields("metadata.name=krs-steady"))
        .await
        .expect("list the steady pod")
        .metadata
        .resource_version
        .unwrap_or_default();
    let watch = kube::api::WatchParams::default().fields("metadata.name=krs-steady");
    let mut events = pods.watch(&watch, &version).await.expect("watch").boxed();
    pods.delete("krs-steady", &DeleteParams::default())
        .await
        .expect("delete steady pod");
    let deleted = tokio::time::timeout(Duration::from_secs(60), async {
        // A watch the apiserver ends early is opened again from the last version seen.
        let mut since = version.clone();
        loop {
            while let Some(event) = events.next().await {
                match event {
                    Ok(kube::api::WatchEvent::Deleted(pod)) => return pod,
                    Ok(kube::api::WatchEvent::Modified(pod)) => {
                        since = pod.metadata.resource_version.unwrap_or(since);
                    }
                    Ok(kube::api::WatchEvent::Error(e)) => eprintln!("watch error: {e:?}"),
                    _ => {}
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            match pods.watch(&watch, &since).await {
                Ok(s) => events = s.boxed(),
                Err(e) => eprintln!("watch again: {e}"),
            }
        }
    })
    .await
    .expect("a Deleted event for the steady pod within 60 s");
    let status = deleted.status.unwrap_or_default();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
    let c = &status.container_statuses.unwrap_or_default()[0];
    let ended = c.state.as_ref().and_then(|s| s.terminated.as_ref());
    assert_eq!(ended.map(|t| t.exit_code), Some(0), "{c:?}");

    k.cleanup();
    let _ = nodes.delete(CLUSTER_NODE, &DeleteParams::default()).await;
}

/// Kills only the test control plane's kube-apiserver, by the PID up.sh recorded.
fn stop_apiserver() {
    let env = cluster_env();
    let run_dir = env.get("KRS_CLUSTER_RUN_DIR").expect("KRS_CLUSTER_RUN_DIR");
    let pid: i32 = std::fs::read_to_string(format!("{run_dir}/kube-apiserver.pid"))
        .expect("apiserver pid file")
        .trim()
        .parse()
        .expect("apiserver pid");
    let _ = std::process::Command::new("kill")
        .args(["-s", "KILL", &pid.to_string()])
        .status();
}

fn restart_control_plane() {
    let status = std::process::Command::new("bash")
        .arg(repo_root().join("hack/cluster/up.sh"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("up.sh");
    assert!(
        status.success(),
        "up.sh failed to restart the control plane"
    );
}
