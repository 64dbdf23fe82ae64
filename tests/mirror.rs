//! Static pods in API server mode: their mirror pods in the API server (kept, recreated,
//! removed) and the events the kubelet posts about them; mirror pods of static pods removed or
//! changed while the kubelet was down (stopped, or killed) go or are replaced after its start,
//! found in the API server rather than in the kubelet's memory, also when the upstream kubelet
//! made them (a node switched to ours).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};

const MIRROR_NODE: &str = "krs-mirror-node";
const STATIC: &str = "krs-static";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The API a mirror test works with, and the name of static pod `static_name`'s mirror pod on
/// `node`, which a run before may have left and is deleted first.
async fn without_mirror(
    static_name: &str,
    node: &str,
) -> (kube::Client, Api<Pod>, Api<Node>, String) {
    let (client, pods) = default_pods(&[]).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let name = format!("{static_name}-{node}");
    let _ = pods
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await;
    (client, pods, nodes, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn static_pods_have_mirror_pods_and_events() {
    let _guard = serial();
    let (client, pods, nodes, name) = without_mirror(STATIC, MIRROR_NODE).await;

    let mut k = Kubelet::new("mirror");
    k.write_manifest("static.yaml", &looper(STATIC));
    k.start_as_node(MIRROR_NODE, &[]);

    let log = k.log_path.clone();
    let first = wait_async(Duration::from_secs(90), "a running mirror pod", || async {
        let p = pods.get_opt(&name).await.ok().flatten()?;
        running(&p).then_some(p)
    })
    .await;
    let annotations = first.metadata.annotations.clone().unwrap_or_default();
    let hash = annotations
        .get(MIRROR_ANNOTATION)
        .unwrap_or_else(|| panic!("no mirror annotation: {annotations:?}"));
    assert_eq!(
        annotations.get("kubernetes.io/config.hash"),
        Some(hash),
        "{annotations:?}"
    );
    let owners = first.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].name.as_str()),
        ("Node", MIRROR_NODE)
    );
    let node = nodes.get(MIRROR_NODE).await.expect("node registered");
    assert_eq!(Some(&owners[0].uid), node.metadata.uid.as_ref());
    assert_eq!(
        first.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(MIRROR_NODE)
    );

    // Deleted by someone else, it comes back (with the status of the same static pod).
    let first_uid = first.metadata.uid.clone().unwrap();
    pods.delete(&name, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete mirror pod");
    let second = wait_async(
        Duration::from_secs(60),
        "the mirror pod recreated",
        || async {
            let p = pods.get_opt(&name).await.ok().flatten()?;
            (p.metadata.uid.as_ref() != Some(&first_uid) && running(&p)).then_some(p)
        },
    )
    .await;
    assert!(
        second
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(MIRROR_ANNOTATION)
    );

    // The kubelet posted a Started event about the static pod.
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let selector =
        ListParams::default().fields(&format!("involvedObject.name={name},reason=Started"));
    let started = wait_async(Duration::from_secs(30), "a Started event", || async {
        let list = events.list(&selector).await.ok()?;
        list.items.into_iter().next()
    })
    .await;
    let source = started.source.clone().unwrap_or_default();
    assert_eq!(source.component.as_deref(), Some("kubelet"));
    assert_eq!(source.host.as_deref(), Some(MIRROR_NODE));
    assert_eq!(started.type_.as_deref(), Some("Normal"));
    assert_eq!(started.involved_object.kind.as_deref(), Some("Pod"));
    assert!(started.count.unwrap_or(0) >= 1);

    // Without its manifest the static pod stops and the mirror pod goes away.
    k.remove_manifest("static.yaml");
    mirror_deleted(&pods, &name).await;

    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("Mirror pod created"), "{}", tail(&text, 40));
    assert!(
        !text.contains("Failed to write event"),
        "{}",
        tail(&text, 40)
    );
    assert!(
        !text.contains("Failed to patch pod status"),
        "{}",
        tail(&text, 40)
    );
    k.cleanup();
    let _ = nodes.delete(MIRROR_NODE, &DeleteParams::default()).await;
}

const RESTART_NODE: &str = "krs-mirror-restart";
const RESTART_STATIC: &str = "krs-st";

fn mirror_hash(p: &Pod) -> Option<String> {
    p.metadata
        .annotations
        .as_ref()?
        .get(MIRROR_ANNOTATION)
        .cloned()
}

/// The orphaned mirror pod `name` (of uid `uid`) is deleted within 15 s of `started`, the
/// kubelet's start, by its stale mirror pod cleanup.
async fn orphan_deleted_soon(
    k: &Kubelet,
    pods: &Api<Pod>,
    name: &str,
    uid: &str,
    started: Instant,
    what: &str,
) {
    wait_async(
        Duration::from_secs(60),
        &format!("the orphaned mirror pod {what} deleted"),
        || async {
            let p = pods.get_opt(name).await.ok()?;
            p.is_none_or(|p| p.metadata.uid.as_deref() != Some(uid))
                .then_some(())
        },
    )
    .await;
    let took = started.elapsed();
    eprintln!("orphaned mirror pod {what} deleted {took:?} after the start");
    assert!(
        took < Duration::from_secs(15),
        "the orphaned mirror pod {what} went {took:?} after the start"
    );
    let log = k.log();
    assert!(
        log.contains("Stale mirror pod deleted"),
        "{}",
        tail(&log, 40)
    );
}

async fn mirror_deleted(pods: &Api<Pod>, name: &str) {
    wait_async(
        Duration::from_secs(60),
        "the mirror pod deleted",
        || async {
            pods.get_opt(name)
                .await
                .ok()
                .and_then(|p| p.is_none().then_some(()))
        },
    )
    .await;
}

/// A static pod that runs until it is stopped, and stops at once.
fn looper(name: &str) -> String {
    pod_yaml(
        name,
        "Always",
        2,
        "trap 'exit 0' TERM; while true; do sleep 1; done",
    )
}

/// Waits for the running mirror pod `name` other than `not_uid`; returns it.
async fn running_mirror(pods: &Api<Pod>, name: &str, not_uid: Option<&str>) -> Pod {
    wait_async(Duration::from_secs(90), "a running mirror pod", || async {
        let p = pods.get_opt(name).await.ok().flatten()?;
        (running(&p) && p.metadata.uid.as_deref() != not_uid).then_some(p)
    })
    .await
}

/// The upstream kubelet's pod cleanup deletes every mirror pod of its node whose static pod is
/// gone, and replaces one whose static pod changed, also right after a start; so must ours,
/// after a SIGTERM and after a SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn mirror_pods_of_static_pods_removed_while_down_go_after_a_restart() {
    let _guard = serial();
    let (_, pods, nodes, name) = without_mirror(RESTART_STATIC, RESTART_NODE).await;
    let script =
        |tag: &str| format!("trap 'exit 0' TERM; echo {tag}; while true; do sleep 1; done");

    let mut k = Kubelet::new("mirror-restart");
    for crash in [false, true] {
        let how = if crash { "SIGKILL" } else { "SIGTERM" };
        k.write_manifest(
            "st.yaml",
            &pod_yaml(RESTART_STATIC, "Always", 2, &script("v1")),
        );
        k.start_as_node(RESTART_NODE, &[]);
        let mirror = running_mirror(&pods, &name, None).await;
        let uid = mirror.metadata.uid.clone().unwrap();
        if crash {
            k.kill()
        } else {
            k.stop()
        }
        k.remove_manifest("st.yaml");

        let started = Instant::now();
        k.start_as_node(RESTART_NODE, &[]);
        orphan_deleted_soon(&k, &pods, &name, &uid, started, &format!("after a {how}")).await;
        k.stop();
    }

    // Changed while the kubelet was down: the old mirror pod is replaced by one for the new
    // version of the static pod.
    k.write_manifest(
        "st.yaml",
        &pod_yaml(RESTART_STATIC, "Always", 2, &script("v1")),
    );
    k.start_as_node(RESTART_NODE, &[]);
    let old = running_mirror(&pods, &name, None).await;
    k.stop();
    k.write_manifest(
        "st.yaml",
        &pod_yaml(RESTART_STATIC, "Always", 2, &script("v2")),
    );
    k.start_as_node(RESTART_NODE, &[]);
    let new = running_mirror(&pods, &name, old.metadata.uid.as_deref()).await;
    assert_ne!(mirror_hash(&new), mirror_hash(&old), "{new:?}");
    assert_eq!(
        mirror_hash(&new).as_deref(),
        new.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubernetes.io/config.hash"))
            .map(String::as_str)
    );

    k.remove_manifest("st.yaml");
    mirror_deleted(&pods, &name).await;
    k.cleanup();
    let _ = nodes.delete(RESTART_NODE, &DeleteParams::default()).await;
}

const SWAP_NODE: &str = "krs-mirror-swap";
const SWAP_STATIC: &str = "krs-sw";

/// The kernel settings the upstream kubelet sets at start (it does, unless told to fail
/// instead); each gets a private copy in its mount namespace so the machine keeps its own.
const UPSTREAM_SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// The upstream kubelet v1.20.2 as `node`, on `k`'s root dir, manifests, cgroup root and cert
/// dir (the node a user switches to ours, as the chart's installer does), in a mount namespace
/// of its own where the kernel settings it writes are copies. Returns the process (the
/// kubelet itself: unshare and bash exec into it).
fn start_upstream_kubelet(k: &Kubelet, node: &str) -> std::process::Child {
    let env = cluster_env();
    let kubelet = common::upstream::bin("kubelet");
    let kubeconfig = k.dir.path().join("upstream-kubelet.conf");
    node_kubeconfig(node, &kubeconfig);
    let node_ip = env
        .get("KRS_NODE_IP")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1".into());
    let private = k.dir.path().join("upstream-sysctl");
    std::fs::create_dir_all(&private).unwrap();
    let script = r#"set -e
for key in $KRS_SYSCTLS; do
	[ -e "/proc/sys/$key" ] || continue
	copy="$KRS_PRIVATE/$(echo "$key" | tr / .)"
	cat "/proc/sys/$key" >"$copy"
	mount --bind "$copy" "/proc/sys/$key"
done
exec "$@""#;
    let root = k.root_dir.display().to_string();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(k.dir.path().join("upstream-kubelet.log"))
        .unwrap();
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "bash", "-c", script])
        .arg("bash")
        .arg(&kubelet)
        .args([
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--pod-manifest-path={}", k.manifests.display()),
            format!("--root-dir={root}"),
            format!("--cert-dir={}", k.dir.path().join("pki").display()),
            format!("--volume-plugin-dir={root}/volume-plugins"),
            "--container-runtime=remote".into(),
            format!(
                "--container-runtime-endpoint=unix://{}",
                containerd_socket()
            ),
            format!("--cgroup-root={}", k.cgroup_root),
            "--cgroup-driver=cgroupfs".into(),
            format!("--hostname-override={node}"),
            format!("--node-ip={node_ip}"),
            format!("--healthz-port={}", k.healthz_port),
            "--read-only-port=0".into(),
            format!("--port={}", k.port),
            "--file-check-frequency=2s".into(),
            "--fail-swap-on=false".into(),
            "--make-iptables-util-chains=false".into(),
            // As the harness's drop-in for ours: no image collection, the bed's disk thresholds.
            "--image-gc-high-threshold=100".into(),
            "--eviction-hard=memory.available<100Mi,nodefs.available<1%,imagefs.available<1%"
                .into(),
            "--v=2".into(),
        ])
        .env("KRS_SYSCTLS", UPSTREAM_SYSCTLS.join(" "))
        .env("KRS_PRIVATE", &private)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn the upstream kubelet")
}

/// The swap the chart's installer makes: the upstream kubelet ran a static pod and made its
/// mirror pod; it is stopped, the manifest removed, ours started on the same node and root dir.
/// Ours finds the mirror pod in the API server (its memory never held it) and deletes it within
/// seconds, and stops the pod the upstream kubelet left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn mirror_pod_of_the_upstream_kubelet_goes_when_ours_takes_over_without_its_manifest() {
    let _guard = serial();
    let (_, pods, nodes, name) = without_mirror(SWAP_STATIC, SWAP_NODE).await;

    let mut k = Kubelet::new("mirror-swap");
    k.write_manifest("sw.yaml", &looper(SWAP_STATIC));
    let log_dirs_before: Vec<bool> = UPSTREAM_LOG_DIRS
        .iter()
        .map(|d| std::path::Path::new(d).exists())
        .collect();
    let mut upstream = start_upstream_kubelet(&k, SWAP_NODE);
    let upstream_log = k.dir.path().join("upstream-kubelet.log");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mirror = loop {
        if let Ok(Some(status)) = upstream.try_wait() {
            let log = std::fs::read_to_string(&upstream_log).unwrap_or_default();
            panic!(
                "the upstream kubelet exited with {status}:\n{}",
                tail(&log, 40)
            );
        }
        if let Some(p) = pods.get_opt(&name).await.ok().flatten()
            && running(&p)
        {
            break p;
        }
        let log = std::fs::read_to_string(&upstream_log).unwrap_or_default();
        assert!(
            Instant::now() < deadline,
            "no running mirror pod from the upstream kubelet:\n{}",
            tail(&log, 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let uid = mirror.metadata.uid.clone().unwrap();
    // The static pod's own UID (the runtime's) is the mirror's config.mirror annotation's pod.
    let static_uid = mirror
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/config.hash"))
        .cloned()
        .expect("config.hash");
    assert!(runtime_pod_count() > 0, "the upstream kubelet's pod runs");
    // systemd's stop: SIGTERM, and the upstream kubelet leaves its pods running.
    let _ = Command::new("kill")
        .args(["-s", "TERM", &upstream.id().to_string()])
        .status();
    let _ = upstream.wait();
    k.remove_manifest("sw.yaml");

    let started = Instant::now();
    k.start_as_node(SWAP_NODE, &[]);
    orphan_deleted_soon(&k, &pods, &name, &uid, started, "of the upstream kubelet").await;
    wait_for(
        Duration::from_secs(60),
        "the upstream kubelet's pod stopped and removed",
        || (runtime_pod_count() == 0).then_some(()),
    );
    k.cleanup();
    let _ = nodes.delete(SWAP_NODE, &DeleteParams::default()).await;
    // The upstream kubelet (v1.20 has no podLogsDir) logged under /var/log/pods, which ours,
    // with the harness's own folder, does not tend.
    remove_upstream_logs(&format!("default_{name}_{static_uid}"), &name);
    for (dir, existed) in UPSTREAM_LOG_DIRS.iter().zip(log_dirs_before) {
        if !existed {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Where the upstream kubelet v1.20 puts container logs, whatever its flags say.
const UPSTREAM_LOG_DIRS: &[&str] = &["/var/log/pods", "/var/log/containers"];

/// Removes the pod log folder and /var/log/containers links the upstream kubelet made for
/// pod `name`.
fn remove_upstream_logs(pod_dir: &str, name: &str) {
    let _ = std::fs::remove_dir_all(std::path::Path::new("/var/log/pods").join(pod_dir));
    if let Ok(entries) = std::fs::read_dir("/var/log/containers") {
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(&format!("{name}_default_"))
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}
