//! Graceful node shutdown against a real systemd-logind (hack/testbed/systemd-node.sh: the
//! machine's systemd as PID 1 of its own namespaces). The kubelet runs inside that node as a
//! node of the test control plane with shutdownGracePeriod 10s and
//! shutdownGracePeriodCriticalPods 5s. It must raise logind's InhibitDelayMaxSec, hold a delay
//! lock, and when logind announces a shutdown (PrepareForShutdown) terminate the ordinary
//! static pod before the critical one, mark them Failed with upstream's reason and message,
//! report the Node NotReady, refuse a new API pod (NodeShutdown) and release the lock; a
//! cancelled shutdown takes the lock again.

mod common;

use std::time::Duration;

use common::systemd_node::{SystemdNode, run};
use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams};

const NODE: &str = "krs-shutdown-node";
const LATE: &str = "krs-shutdown-late";

/// A static pod that exits `delay` seconds after SIGTERM.
fn manifest(name: &str, critical: bool, delay: u32) -> String {
    let priority = if critical {
        "  priorityClassName: system-node-critical\n  priority: 2000001000\n"
    } else {
        ""
    };
    static_pod(
        name,
        &format!(
            r#"{priority}  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "trap 'sleep {delay}; exit 0' TERM; while true; do sleep 0.2; done"]
"#
        ),
    )
}

fn inhibitors(node: &SystemdNode) -> String {
    run(
        "list inhibitors",
        &mut node.exec(&[
            "busctl",
            "call",
            "org.freedesktop.login1",
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager",
            "ListInhibitors",
        ]),
    )
}

/// The static pod `name` as the kubelet reports it, once `ok` holds.
fn wait_static(
    k: &Kubelet,
    name: &str,
    what: &str,
    timeout: Duration,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let full = format!("{name}-{NODE}");
    wait_for_opt(timeout, || {
        k.pods()
            .into_iter()
            .find(|p| p["metadata"]["name"] == full.as_str())
            .filter(|p| ok(p))
    })
    .unwrap_or_else(|| panic!("pod {name}: {what}; kubelet log:\n{}", tail(&k.log(), 60)))
}

/// logind's PrepareForShutdown signal, `active` true for a shutdown starting.
fn announce(node: &SystemdNode, active: bool) {
    run(
        "PrepareForShutdown",
        &mut node.exec(&[
            "dbus-send",
            "--system",
            "--type=signal",
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager.PrepareForShutdown",
            &format!("boolean:{active}"),
        ]),
    );
}

fn finished_at(pod: &serde_json::Value) -> String {
    container_status(pod, "main")["state"]["terminated"]["finishedAt"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_terminates_pods_by_priority() {
    let client = admin_client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node = SystemdNode::start("sdn", false);

    let mut k = Kubelet::new("shutdown");
    k.cgroup_root = "/krs-it-shutdown".into();
    node.adopt(&mut k);
    let config = k.dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 5s\n",
    )
    .unwrap();
    k.write_manifest("low.yaml", &manifest("low", false, 0));
    k.write_manifest("crit.yaml", &manifest("crit", true, 2));
    let config_flag = format!("--config={}", config.display());
    k.start_as_node(NODE, &[&config_flag]);

    for name in ["low", "crit"] {
        wait_static(&k, name, "running", Duration::from_secs(60), |p| {
            container_status(p, "main")["state"]["running"].is_object()
        });
    }
    // The lock is held, and logind grants it the whole period.
    wait_for(
        Duration::from_secs(20),
        "the kubelet's inhibitor lock",
        || inhibitors(&node).contains("\"kubelet\"").then_some(()),
    );
    let locks = inhibitors(&node);
    assert!(
        locks.contains(
            "\"shutdown\" \"kubelet\" \"Kubelet needs time to handle node shutdown\" \"delay\""
        ),
        "{locks}"
    );
    assert_eq!(
        node.unit_prop("systemd-logind.service", "ActiveState"),
        "active"
    );
    let delay = run(
        "InhibitDelayMaxUSec",
        &mut node.exec(&[
            "busctl",
            "get-property",
            "org.freedesktop.login1",
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager",
            "InhibitDelayMaxUSec",
        ]),
    );
    assert_eq!(delay.trim(), "t 10000000");
    wait_async(Duration::from_secs(60), "node Ready", || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get(NODE).await.ok()?;
            ready(&n).filter(|(s, _)| s == "True").map(drop)
        }
    })
    .await;

    // logind announces a shutdown. Asking logind itself to power off (PowerOff) is refused
    // here ("Access denied": no polkit in this node), so the signal is sent the way
    // upstream's node e2e test sends it.
    announce(&node, true);
    let message = wait_async(Duration::from_secs(15), "node NotReady", || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get(NODE).await.ok()?;
            ready(&n).filter(|(s, _)| s == "False").map(|(_, m)| m)
        }
    })
    .await;
    assert!(message.contains("node is shutting down"), "{message}");

    // No new pod is admitted meanwhile.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let _ = pods
        .delete(LATE, &DeleteParams::default().grace_period(0))
        .await;
    let late: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": LATE},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "3600"]}],
        },
    }))
    .unwrap();
    create_pod(&pods, &late).await;
    let rejected = wait_async(Duration::from_secs(30), "the late pod's rejection", || {
        let pods = pods.clone();
        async move {
            let p = pods.get(LATE).await.ok()?;
            let s = p.status?;
            (s.phase.as_deref() == Some("Failed")).then_some(s)
        }
    })
    .await;
    assert_eq!(rejected.reason.as_deref(), Some("NodeShutdown"));
    assert_eq!(
        rejected.message.as_deref(),
        Some("Pod was rejected: Pod was rejected as the node is shutting down.")
    );
    let _ = pods
        .delete(LATE, &DeleteParams::default().grace_period(0))
        .await;

    let mut done = Vec::new();
    for name in ["low", "crit"] {
        let pod = wait_static(
            &k,
            name,
            "failed by the shutdown",
            Duration::from_secs(30),
            |p| phase(p) == "Failed" && !finished_at(p).is_empty(),
        );
        assert_eq!(pod["status"]["reason"], "Terminated", "{name}");
        assert_eq!(
            pod["status"]["message"],
            "Pod was terminated in response to imminent node shutdown."
        );
        // Both exited on SIGTERM by themselves, inside their grace periods.
        assert_eq!(
            container_status(&pod, "main")["state"]["terminated"]["exitCode"],
            0,
            "{name}"
        );
        done.push(finished_at(&pod));
    }
    // The critical pod was told only after the ordinary one had stopped, and took 2 s more.
    assert!(
        done[0] < done[1],
        "low finished {}, crit {}",
        done[0],
        done[1]
    );
    wait_for(Duration::from_secs(15), "the lock's release", || {
        (!inhibitors(&node).contains("\"kubelet\"")).then_some(())
    });
    let log = k.log();
    assert!(log.contains("shutdown announced"), "{}", tail(&log, 40));

    // A cancelled shutdown: the lock comes back and the node is Ready again.
    announce(&node, false);
    wait_for(Duration::from_secs(15), "the lock again", || {
        inhibitors(&node).contains("\"kubelet\"").then_some(())
    });
    wait_async(Duration::from_secs(15), "node Ready again", || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get(NODE).await.ok()?;
            ready(&n).filter(|(s, _)| s == "True").map(drop)
        }
    })
    .await;
    k.stop();
}

fn ready(n: &Node) -> Option<(String, String)> {
    let c = n
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.message.clone().unwrap_or_default()))
}
