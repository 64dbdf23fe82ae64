//! Memory-pressure eviction on the real bed, through the API (static pods are critical and
//! never evicted). The pods' cgroup is limited to 500Mi (system-reserved = the rest of the
//! machine) and `memory.available<436Mi` applies to it as `allocatableMemory.available`, so
//! the test does not depend on what else the machine runs. Three pods wait for a file on a
//! hostPath, then hold memory (a `dd` whose 100M buffer stays resident while it blocks on a
//! pipe nobody reads): BestEffort 100Mi, Burstable 100Mi (requests 10Mi), Guaranteed 20Mi
//! (40Mi). Pressure (~220Mi + base in use, ~280Mi free) evicts the BestEffort pod, then the
//! Burstable one (still ~380Mi free), and stops before the Guaranteed one (~480Mi free).

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const NODE_NAME: &str = "krs-evict-node";
const LIMIT_MIB: u64 = 500;
const THRESHOLD_MIB: u64 = 436;

fn mem_total() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("MemTotal");
    kb * 1024
}

fn pod(name: &str, go_dir: &str, fill_mib: u64, resources: serde_json::Value) -> Pod {
    let script = format!(
        "while [ ! -e /go/now ]; do sleep 0.1; done; dd if=/dev/zero bs={fill_mib}M count=1 | sleep 3600"
    );
    api_pod(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE_NAME,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "go", "hostPath": {"path": go_dir}}],
            "containers": [{
                "name": "fill",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "go", "mountPath": "/go"}],
                "resources": resources,
            }],
        },
    }))
}

fn node_condition(node: &Node, type_: &str) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

async fn wait_running(pods: &Api<Pod>, names: &[&str]) {
    for name in names {
        wait_async(Duration::from_secs(90), &format!("{name} running"), || {
            let pods = pods.clone();
            async move {
                let p = pods.get(name).await.ok()?;
                (p.status?.phase.as_deref() == Some("Running")).then_some(())
            }
        })
        .await;
    }
}

async fn wait_condition(nodes: &Api<Node>, node: &str, type_: &str, want: &str) {
    wait_async(
        Duration::from_secs(60),
        &format!("{type_} {want} on {node}"),
        || {
            let nodes = nodes.clone();
            async move {
                let n = nodes.get(node).await.ok()?;
                (node_condition(&n, type_).as_deref() == Some(want)).then_some(())
            }
        },
    )
    .await;
}

/// The pods in the order they turn Failed (at most `count` of them, within 90 s), with the
/// time since `since`, and whether the node showed the condition meanwhile.
async fn failures(
    pods: &Api<Pod>,
    nodes: &Api<Node>,
    (node, condition): (&str, &str),
    names: &[&str],
    count: usize,
    since: Instant,
) -> (Vec<(String, Duration)>, bool) {
    let mut failed: Vec<(String, Duration)> = Vec::new();
    let mut saw_pressure = false;
    let deadline = Instant::now() + Duration::from_secs(90);
    while failed.len() < count && Instant::now() < deadline {
        for name in names {
            if failed.iter().any(|(n, _)| n == name) {
                continue;
            }
            if let Ok(p) = pods.get(name).await
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
            {
                failed.push((name.to_string(), since.elapsed()));
            }
        }
        if let Ok(n) = nodes.get(node).await {
            saw_pressure |= node_condition(&n, condition).as_deref() == Some("True");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (failed, saw_pressure)
}

#[test]
fn memory_pressure_evicts_best_effort_then_burstable_and_clears() {
    run_serial(memory_pressure());
}

async fn memory_pressure() {
    let (client, pods) = default_pods(&[]).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let names = [
        "krs-evict-be",
        "krs-evict-bu",
        "krs-evict-g",
        "krs-evict-late",
    ];
    let now = DeleteParams::default().grace_period(0);
    for p in names {
        let _ = pods.delete(p, &now).await;
    }
    let mut k = Kubelet::new("eviction");
    let go = k.dir.path().join("go");
    std::fs::create_dir_all(&go).unwrap();
    let go_dir = go.to_string_lossy().to_string();
    let reserved = mem_total() - (LIMIT_MIB << 20);
    // Its own pods' cgroup: what other tests left running must not count against the limit.
    k.cgroup_root = "/krs-it-evict-memory".into();
    k.start_as_node(
        NODE_NAME,
        &[
            &format!("--system-reserved=memory={reserved}"),
            "--enforce-node-allocatable=pods",
            &format!(
                "--eviction-hard=memory.available<{THRESHOLD_MIB}Mi,nodefs.available<1%,imagefs.available<1%"
            ),
            "--eviction-pressure-transition-period=15s",
        ],
    );

    // Node allocatable enforced on the pods' cgroup: capacity less what is reserved (the
    // eviction threshold is not taken off, as upstream enforces it).
    let kubepods = cgroup::named("memory", &format!("{}/kubepods", k.cgroup_root));
    let limit = wait_for_opt(Duration::from_secs(30), || {
        Some(cgroup::memory_limit(&kubepods)).filter(|l| *l > 0)
    });
    assert_eq!(
        limit,
        Some((LIMIT_MIB << 20) as i64),
        "{}",
        kubepods.display()
    );

    // What an earlier run may have left in the runtime is stopped first (the kubelet kills pods
    // it does not know), so the node starts without pressure.
    let settled = wait_for_opt(Duration::from_secs(60), || {
        let out = kubectl(&[
            "get",
            "node",
            NODE_NAME,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"MemoryPressure\")].status}",
        ])
        .output()
        .ok()?;
        (String::from_utf8_lossy(&out.stdout) == "False").then_some(())
    });
    assert!(
        settled.is_some(),
        "node under memory pressure at start:\n{}",
        tail(&k.log(), 60)
    );
    let requests = |mem: &str| json!({"requests": {"memory": mem}});
    let guaranteed = json!({
        "requests": {"memory": "40Mi", "cpu": "100m"},
        "limits": {"memory": "40Mi", "cpu": "100m"},
    });
    for p in [
        pod("krs-evict-be", &go_dir, 100, json!({})),
        pod("krs-evict-bu", &go_dir, 100, requests("10Mi")),
        pod("krs-evict-g", &go_dir, 20, guaranteed),
    ] {
        create_pod(&pods, &p).await;
    }
    wait_running(&pods, &names[..3]).await;
    let node = nodes.get(NODE_NAME).await.unwrap();
    assert_eq!(
        node_condition(&node, "MemoryPressure").as_deref(),
        Some("False")
    );

    // Cross the threshold; record the order the pods fail in.
    let crossed = Instant::now();
    std::fs::write(go.join("now"), "").unwrap();
    let (failed, saw_pressure) = failures(
        &pods,
        &nodes,
        (NODE_NAME, "MemoryPressure"),
        &names[..3],
        2,
        crossed,
    )
    .await;
    eprintln!("failed in order: {failed:?}");
    let order: Vec<&str> = failed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        order,
        ["krs-evict-be", "krs-evict-bu"],
        "log:\n{}",
        tail(&k.log(), 80)
    );
    assert!(saw_pressure, "MemoryPressure never True");
    eprintln!(
        "threshold crossed to first eviction observed through the API: {:?}",
        failed[0].1
    );

    // The evicted pod's status, as upstream reports it.
    let be = pods.get("krs-evict-be").await.unwrap();
    let st = be.status.unwrap();
    assert_eq!(st.reason.as_deref(), Some("Evicted"));
    let msg = st.message.unwrap_or_default();
    assert!(
        msg.starts_with(&format!(
            "The node was low on resource: memory. Threshold quantity: {THRESHOLD_MIB}Mi, available: "
        )),
        "{msg}"
    );
    assert!(
        msg.contains("Container fill was using ")
            && msg.ends_with("request is 0, has larger consumption of memory. "),
        "{msg}"
    );
    let disruption = st
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("DisruptionTarget condition");
    assert_eq!(disruption.reason.as_deref(), Some("TerminationByKubelet"));

    // While the condition holds, a BestEffort pod is refused; the Guaranteed pod keeps running.
    pods.create(
        &PostParams::default(),
        &pod("krs-evict-late", &go_dir, 1, json!({})),
    )
    .await
    .unwrap();
    let late = wait_async(Duration::from_secs(30), "the late pod rejected", || {
        let pods = pods.clone();
        async move {
            let s = pods.get("krs-evict-late").await.ok()?.status?;
            (s.phase.as_deref() == Some("Failed")).then_some(s)
        }
    })
    .await;
    assert_eq!(late.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        late.message.as_deref(),
        Some("Pod was rejected: The node had condition: [MemoryPressure]. ")
    );
    let g = pods.get("krs-evict-g").await.unwrap();
    assert_eq!(g.status.unwrap().phase.as_deref(), Some("Running"));

    // The controller taints the node while the condition holds; both go after the
    // transition period.
    wait_async(Duration::from_secs(30), "the memory-pressure taint", || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get(NODE_NAME).await.ok()?;
            n.spec?
                .taints?
                .iter()
                .any(|t| t.key == "node.kubernetes.io/memory-pressure")
                .then_some(())
        }
    })
    .await;
    wait_condition(&nodes, NODE_NAME, "MemoryPressure", "False").await;
    let g = pods.get("krs-evict-g").await.unwrap();
    assert_eq!(g.status.unwrap().phase.as_deref(), Some("Running"));
    let log = k.log();
    assert!(
        log.contains("Eviction manager: pods ranked for eviction"),
        "{}",
        tail(&log, 40)
    );
    let (code, metrics) = https_get(k.port, "/metrics", &[]).expect("/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("kubelet_evictions{eviction_signal=\"allocatableMemory.available\"} 2"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("evictions"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    for p in names {
        let _ = pods.delete(p, &now).await;
    }
    k.stop();
    k.cleanup();
}

/// Disk pressure on a node whose root directory is a 128Mi tmpfs of the test's own:
/// `nodefs.available<90Mi` watches it, images stay on the machine's disk (so nodefs is not the
/// image filesystem and its pods rank by what their logs and local volumes hold). Three pods
/// write to an emptyDir once released: BestEffort 40Mi, Burstable 40Mi (requests 10Mi of
/// ephemeral-storage), Guaranteed 10Mi (requests 20Mi). The BestEffort pod goes first (most
/// above its request), then the Burstable one; then enough is free again.
#[test]
fn disk_pressure_evicts_by_usage_above_requests_and_clears() {
    run_serial(disk_pressure());
}

fn writer(name: &str, go_dir: &str, write_mib: u64, resources: serde_json::Value) -> Pod {
    let script = format!(
        "while [ ! -e /go/now ]; do sleep 0.1; done; dd if=/dev/zero of=/data/fill bs=1M count={write_mib}; sleep 3600"
    );
    api_pod(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": DISK_NODE,
            "terminationGracePeriodSeconds": 1,
            "volumes": [
                {"name": "go", "hostPath": {"path": go_dir}},
                {"name": "data", "emptyDir": {}},
            ],
            "containers": [{
                "name": "write",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "volumeMounts": [
                    {"name": "go", "mountPath": "/go"},
                    {"name": "data", "mountPath": "/data"},
                ],
                "resources": resources,
            }],
        },
    }))
}

const DISK_NODE: &str = "krs-evict-disk-node";

async fn disk_pressure() {
    let (client, pods) = default_pods(&[]).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let names = ["krs-disk-be", "krs-disk-bu", "krs-disk-g"];
    let now = DeleteParams::default().grace_period(0);
    for p in names {
        let _ = pods.delete(p, &now).await;
    }
    let mut k = Kubelet::new("eviction-disk");
    let go = k.dir.path().join("go");
    std::fs::create_dir_all(&go).unwrap();
    let go_dir = go.to_string_lossy().to_string();
    std::fs::create_dir_all(&k.root_dir).unwrap();
    let root = k.root_dir.to_string_lossy().to_string();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=128m", "krs-evict-disk", &root])
        .status()
        .unwrap();
    assert!(mounted.success());
    let _unmount = Unmount(root.clone());
    // Writes to a tmpfs are memory of the writer's cgroup: a cgroup root of its own keeps them
    // out of the memory test's.
    k.cgroup_root = "/krs-it-evict-disk".into();
    k.start_as_node(
        DISK_NODE,
        &[
            "--eviction-hard=nodefs.available<90Mi,imagefs.available<1%",
            "--eviction-pressure-transition-period=10s",
        ],
    );

    let eph = |req: &str| json!({"requests": {"ephemeral-storage": req}});
    let guaranteed = json!({
        "requests": {"memory": "20Mi", "cpu": "50m", "ephemeral-storage": "20Mi"},
        "limits": {"memory": "20Mi", "cpu": "50m"},
    });
    for p in [
        writer("krs-disk-be", &go_dir, 40, json!({})),
        writer("krs-disk-bu", &go_dir, 40, eph("10Mi")),
        writer("krs-disk-g", &go_dir, 10, guaranteed),
    ] {
        create_pod(&pods, &p).await;
    }
    wait_running(&pods, &names).await;
    let crossed = Instant::now();
    std::fs::write(go.join("now"), "").unwrap();
    let (failed, saw_pressure) = failures(
        &pods,
        &nodes,
        (DISK_NODE, "DiskPressure"),
        &names,
        2,
        crossed,
    )
    .await;
    let order: Vec<&str> = failed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        order,
        ["krs-disk-be", "krs-disk-bu"],
        "log:\n{}",
        tail(&k.log(), 80)
    );
    assert!(saw_pressure, "DiskPressure never True");
    let be = pods.get("krs-disk-be").await.unwrap().status.unwrap();
    assert_eq!(be.reason.as_deref(), Some("Evicted"));
    let msg = be.message.unwrap_or_default();
    assert!(
        msg.starts_with(
            "The node was low on resource: ephemeral-storage. Threshold quantity: 90Mi, available: "
        ),
        "{msg}"
    );
    wait_condition(&nodes, DISK_NODE, "DiskPressure", "False").await;
    let g = pods.get("krs-disk-g").await.unwrap();
    assert_eq!(g.status.unwrap().phase.as_deref(), Some("Running"));

    for p in names {
        let _ = pods.delete(p, &now).await;
    }
    k.stop();
    k.cleanup();
}

/// Unmounts the test's root directory (and whatever the kubelet mounted below it) even when
/// the test fails.
struct Unmount(String);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-R", "-l", &self.0])
            .status();
    }
}
