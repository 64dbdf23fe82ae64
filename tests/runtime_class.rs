//! `runtimeClassName` through the real API server (node.k8s.io/v1 RuntimeClass, served by the
//! v1.20 API server, whose RuntimeClass admission copies the class's overhead into the pod):
//! the class's handler is the one the sandbox runs with (the bed's containerd has a second
//! handler, `krs-test`), the overhead sizes the pod cgroup, a class that is gone fails the
//! sandbox with upstream's event until it comes back, and a handler the runtime does not know
//! surfaces the runtime's refusal in the event. The last test is a static pod on a kubelet
//! without an API server.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

const NODE: &str = "rtc-node";
const CLASS: &str = "rtc-krs-test";
const GONE_CLASS: &str = "rtc-gone";
const BAD_CLASS: &str = "rtc-bad-handler";

fn apply_class(name: &str, handler: &str) {
    let body = json!({
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": handler,
        "overhead": {"podFixed": {"cpu": "100m", "memory": "32Mi"}},
    });
    let mut child = kubectl(&["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl apply");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.to_string().as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "kubectl apply {name}");
}

fn delete_class(name: &str) {
    let _ = kubectl(&[
        "delete",
        "runtimeclass",
        name,
        "--ignore-not-found",
        "--wait",
    ])
    .status();
}

fn pod(name: &str, class: &str) -> Pod {
    let mut pod = bound_sleeper(name, NODE);
    pod["spec"]["runtimeClassName"] = json!(class);
    pod["spec"]["containers"][0]["resources"] =
        json!({"limits": {"cpu": "200m", "memory": "64Mi"}});
    api_pod(pod)
}

async fn events_of(client: &kube::Client, pod: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields(&format!("involvedObject.name={pod}"));
    events.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

async fn wait_event(client: &kube::Client, pod: &str, reason: &str, text: &str) -> Event {
    wait_async(
        Duration::from_secs(60),
        &format!("event {reason} with {text:?} on {pod}"),
        || async {
            events_of(client, pod).await.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.message.as_deref().is_some_and(|m| m.contains(text))
            })
        },
    )
    .await
}

/// The handler containerd recorded for the pod's sandbox (its CRI metadata extension).
fn sandbox_handler(uid: &str) -> String {
    let sock = containerd_socket();
    let ctr = |args: &[&str]| {
        let out = Command::new("ctr")
            .args(["--address", &sock, "-n", "k8s.io"])
            .args(args)
            .output()
            .expect("ctr");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let label = format!("labels.\"io.kubernetes.pod.uid\"=={uid}");
    let ids = ctr(&["containers", "ls", "-q", &label]);
    for id in ids.lines().filter(|l| !l.is_empty()) {
        let info: Value = serde_json::from_str(&ctr(&["containers", "info", id])).unwrap();
        if info["Labels"]["io.cri-containerd.kind"] != "sandbox" {
            continue;
        }
        let value = info["Extensions"]["io.cri-containerd.sandbox.metadata"]["value"]
            .as_str()
            .unwrap_or_default();
        use base64::Engine;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(value)
            .unwrap_or_default();
        let meta: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        return meta["Metadata"]["RuntimeHandler"]
            .as_str()
            .or(meta["RuntimeHandler"].as_str())
            .unwrap_or_default()
            .to_string();
    }
    panic!("no sandbox for pod {uid}:\n{ids}");
}

/// A cgroup v1 (or v2) file of a Guaranteed pod.
fn pod_cgroup_file(root: &str, uid: &str, v1: (&str, &str), v2: &str) -> String {
    let v1_path = format!("/sys/fs/cgroup/{}{root}/kubepods/pod{uid}/{}", v1.0, v1.1);
    let v2_path = format!(
        "/sys/fs/cgroup/{}/kubepods/pod{uid}/{v2}",
        root.trim_start_matches('/')
    );
    std::fs::read_to_string(&v1_path)
        .or_else(|_| std::fs::read_to_string(&v2_path))
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|e| panic!("{v1_path} / {v2_path}: {e}"))
}

#[test]
fn runtime_class_handler_overhead_and_missing_class() {
    run_serial(runtime_class_handler_overhead_and_missing_class_async());
}

async fn runtime_class_handler_overhead_and_missing_class_async() {
    let (client, pods) = default_pods(&[]).await;
    let gone = DeleteParams::default().grace_period(0);
    for p in ["rtc-handler", "rtc-missing", "rtc-bad"] {
        let _ = pods.delete(p, &gone).await;
    }
    for c in [CLASS, GONE_CLASS, BAD_CLASS] {
        delete_class(c);
    }
    apply_class(CLASS, "krs-test");
    apply_class(BAD_CLASS, "rtc-no-such-handler");

    // A pod whose class is deleted before the kubelet sees it: the API server admitted it
    // (its RuntimeClass admission refuses pods naming a class that does not exist).
    apply_class(GONE_CLASS, "krs-test");
    pods.create(&PostParams::default(), &pod("rtc-missing", GONE_CLASS))
        .await
        .unwrap();
    delete_class(GONE_CLASS);

    let mut k = Kubelet::started_as_node("runtime-class", NODE);

    let created = pods
        .create(&PostParams::default(), &pod("rtc-handler", CLASS))
        .await
        .unwrap();
    let overhead = created.spec.as_ref().and_then(|s| s.overhead.clone());
    assert_eq!(
        overhead.as_ref().map(|o| o["memory"].0.as_str()),
        Some("32Mi"),
        "the API server's RuntimeClass admission sets the overhead"
    );
    let p = wait_async(Duration::from_secs(90), "rtc-handler running", || async {
        pods.get("rtc-handler").await.ok().filter(first_running)
    })
    .await;
    let uid = p.metadata.uid.clone().unwrap();
    assert_eq!(sandbox_handler(&uid), "krs-test");
    // 64Mi of limit plus 32Mi of overhead; 200m plus 100m of CPU.
    let root = k.cgroup_root.clone();
    assert_eq!(
        pod_cgroup_file(
            &root,
            &uid,
            ("memory", "memory.limit_in_bytes"),
            "memory.max"
        ),
        (96u64 << 20).to_string()
    );
    let quota = pod_cgroup_file(&root, &uid, ("cpu", "cpu.cfs_quota_us"), "cpu.max");
    assert_eq!(quota.split_whitespace().next(), Some("30000"));

    // The missing class: upstream's error in the event, the pod waits, and runs once the
    // class exists again.
    let ev = wait_event(
        &client,
        "rtc-missing",
        "FailedCreatePodSandBox",
        "not found",
    )
    .await;
    assert_eq!(
        ev.message.as_deref(),
        Some("Failed to create pod sandbox: runtimeclass.node.k8s.io \"rtc-gone\" not found")
    );
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let waiting = pods.get("rtc-missing").await.unwrap();
    let status = waiting.status.clone().unwrap_or_default();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    apply_class(GONE_CLASS, "krs-test");
    let p = wait_async(
        Duration::from_secs(60),
        "rtc-missing running once its class is back",
        || async { pods.get("rtc-missing").await.ok().filter(first_running) },
    )
    .await;
    assert_eq!(
        sandbox_handler(p.metadata.uid.as_deref().unwrap()),
        "krs-test"
    );

    // A handler the runtime does not have: containerd's refusal reaches the event.
    pods.create(&PostParams::default(), &pod("rtc-bad", BAD_CLASS))
        .await
        .unwrap();
    let ev = wait_event(
        &client,
        "rtc-bad",
        "FailedCreatePodSandBox",
        "rtc-no-such-handler",
    )
    .await;
    let msg = ev.message.unwrap_or_default();
    assert!(
        msg.starts_with("Failed to create pod sandbox: ")
            && msg.contains("no runtime for \"rtc-no-such-handler\" is configured"),
        "{msg}"
    );
    let bad = pods.get("rtc-bad").await.unwrap();
    assert_eq!(bad.status.and_then(|s| s.phase).as_deref(), Some("Pending"));

    for p in ["rtc-handler", "rtc-missing", "rtc-bad"] {
        let _ = pods.delete(p, &gone).await;
    }
    for p in ["rtc-handler", "rtc-missing", "rtc-bad"] {
        wait_async(Duration::from_secs(60), "the pods to go", || async {
            pods.get_opt(p).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    for c in [CLASS, GONE_CLASS, BAD_CLASS] {
        delete_class(c);
    }
    k.cleanup();
}

/// Static pod, no API server: the class cannot be looked up, so the sandbox is not created
/// (upstream would run it with the default handler; see README) and the log says why.
#[test]
fn standalone_kubelet_refuses_a_runtime_class() {
    let _serial = serial();
    let mut k = Kubelet::new("runtime-class-standalone");
    k.start();
    k.write_manifest(
        "classy.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: rtc-classy
spec:
  runtimeClassName: rtc-krs-test
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
"#
        ),
    );
    wait_for(Duration::from_secs(30), "the refusal in the log", || {
        k.log()
            .contains("RuntimeClass \\\"rtc-krs-test\\\" cannot be looked up")
            .then_some(())
            .or_else(|| {
                k.log()
                    .contains("RuntimeClass \"rtc-krs-test\" cannot be looked up")
                    .then_some(())
            })
    });
    let p = k.pod("rtc-classy").expect("the static pod is listed");
    assert_eq!(phase(&p), "Pending");
    assert_eq!(runtime_pod_count(), 0, "no sandbox was created");
    k.cleanup();
}
