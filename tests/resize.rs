//! In-place pod resize on the real bed (containerd + runc; cgroup v1 here, v2 in the VM bed's
//! e2e/vm/run.sh test), through a static pod:
//! the v1.20 API server has neither `resizePolicy` nor mutable resources, so the manifest is
//! edited in place. It keeps an explicit `metadata.uid`, as upstream keeps a manifest's own
//! UID, so the edit is an update of the same pod rather than a new pod.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// Unique per run, so a failed run's pod (left running) is not adopted by the next one.
fn uid() -> &'static str {
    static UID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    UID.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("resize-{}-{nanos}", std::process::id())
    })
}

fn manifest(a_cpu: &str, a_mem: &str, b_mem: &str) -> String {
    let uid = uid();
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: resize
  uid: {uid}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: a
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resizePolicy:
    - resourceName: cpu
      restartPolicy: NotRequired
    - resourceName: memory
      restartPolicy: NotRequired
    resources:
      requests: {{cpu: "{a_cpu}", memory: "{a_mem}"}}
      limits: {{cpu: "{a_cpu}", memory: "{a_mem}"}}
  - name: b
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resizePolicy:
    - resourceName: memory
      restartPolicy: RestartContainer
    resources:
      requests: {{cpu: "50m", memory: "{b_mem}"}}
      limits: {{cpu: "50m", memory: "{b_mem}"}}
"#
    )
}

fn container_id(pod: &Value, name: &str) -> String {
    container_status(pod, name)["containerID"]
        .as_str()
        .unwrap_or_default()
        .trim_start_matches("containerd://")
        .to_string()
}

fn has_condition(pod: &Value, type_: &str) -> Option<Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

fn running(pod: &Value, name: &str) -> bool {
    container_status(pod, name)["state"]["running"].is_object()
}

#[test]
fn resources_change_in_place_or_by_restart_as_the_policy_says() {
    let _guard = serial();
    let mut k = Kubelet::new("resize");
    k.start();
    k.write_manifest("resize.yaml", &manifest("100m", "64Mi", "32Mi"));
    let pod = k.wait_pod(
        "resize",
        "both containers running",
        Duration::from_secs(60),
        |p| running(p, "a") && running(p, "b"),
    );
    let (a_id, b_id) = (container_id(&pod, "a"), container_id(&pod, "b"));
    let a_mem = cgroup::find("memory", &a_id).expect("container a's memory cgroup");
    let a_cpu = cgroup::find("cpu", &a_id).expect("container a's cpu cgroup");
    let pod_mem = cgroup::find("memory", &format!("pod{}", uid())).expect("pod memory cgroup");
    assert_eq!(cgroup::memory_limit(&a_mem), 64 << 20);
    assert_eq!(cgroup::cpu_quota(&a_cpu), 10_000);
    assert_eq!(cgroup::memory_limit(&pod_mem), 96 << 20);
    let a = container_status(&pod, "a");
    assert_eq!(a["allocatedResources"]["memory"], "64Mi", "{a}");
    assert_eq!(a["resources"]["limits"]["memory"], "64Mi", "{a}");

    // Up: a's cpu and memory in place; b's memory by a restart, as its policy asks.
    k.write_manifest("resize.yaml", &manifest("200m", "96Mi", "48Mi"));
    let pod = k.wait_pod(
        "resize",
        "the resize applied",
        Duration::from_secs(60),
        |p| {
            let a = container_status(p, "a");
            a["resources"]["limits"]["memory"] == "96Mi"
                && container_status(p, "b")["restartCount"] == 1
                && running(p, "b")
                && has_condition(p, "PodResizeInProgress").is_none()
        },
    );
    assert_eq!(container_id(&pod, "a"), a_id, "a was resized in place");
    assert_eq!(container_status(&pod, "a")["restartCount"], 0);
    assert_ne!(container_id(&pod, "b"), b_id, "b was restarted");
    assert_eq!(cgroup::memory_limit(&a_mem), 96 << 20);
    assert_eq!(cgroup::cpu_quota(&a_cpu), 20_000);
    assert_eq!(cgroup::memory_limit(&pod_mem), 144 << 20);
    let b_mem = cgroup::find("memory", &container_id(&pod, "b")).expect("b's new cgroup");
    assert_eq!(cgroup::memory_limit(&b_mem), 48 << 20);
    let a = container_status(&pod, "a");
    assert_eq!(a["allocatedResources"]["cpu"], "200m", "{a}");
    assert_eq!(a["resources"]["limits"]["cpu"], "200m", "{a}");
    assert!(
        k.log().contains("resize requires restart"),
        "the restart is logged as the resize's"
    );

    // More memory than the node has: never allocated, the pod keeps what it has.
    k.write_manifest("resize.yaml", &manifest("200m", "100000Gi", "48Mi"));
    let pod = k.wait_pod("resize", "PodResizePending", Duration::from_secs(30), |p| {
        has_condition(p, "PodResizePending").is_some()
    });
    let pending = has_condition(&pod, "PodResizePending").unwrap();
    assert_eq!(pending["reason"], "Infeasible", "{pending}");
    let message = pending["message"].as_str().unwrap_or_default();
    // The pod's total: a's 100000Gi and b's 48Mi.
    let requested = (100_000u64 << 30) + (48 << 20);
    assert!(
        message.starts_with(&format!(
            "Node didn't have enough capacity: memory, requested: {requested}, capacity: "
        )),
        "{message}"
    );
    assert_eq!(
        container_status(&pod, "a")["allocatedResources"]["memory"],
        "96Mi"
    );
    assert_eq!(cgroup::memory_limit(&a_mem), 96 << 20);

    // Down again: cuts are applied in place too, and the pending condition goes.
    k.write_manifest("resize.yaml", &manifest("100m", "48Mi", "48Mi"));
    let pod = k.wait_pod("resize", "the cut applied", Duration::from_secs(30), |p| {
        container_status(p, "a")["resources"]["limits"]["memory"] == "48Mi"
            && has_condition(p, "PodResizePending").is_none()
            && has_condition(p, "PodResizeInProgress").is_none()
    });
    assert_eq!(container_id(&pod, "a"), a_id);
    assert_eq!(cgroup::memory_limit(&a_mem), 48 << 20);
    assert_eq!(cgroup::cpu_quota(&a_cpu), 10_000);
    assert_eq!(cgroup::memory_limit(&pod_mem), 96 << 20);
    k.cleanup();
}

// 100m, not less: runc starts the sandbox inside the pod's cgroup, and at 10m (1 ms of CPU per
// 100 ms) that start alone took 7 to 60 s on a busy machine.
fn sleeper(name: &str, uid: &str, mem: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  uid: {uid}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resources:
      requests: {{cpu: "100m", memory: "{mem}"}}
      limits: {{cpu: "100m", memory: "{mem}"}}
"#
    )
}

/// A resize that does not fit next to the other pods waits (`Deferred`) and is applied once
/// a pod has gone. The node is made small with `--system-reserved`: 1Gi of memory is left for
/// pods, less the bed's 100Mi hard eviction threshold.
#[test]
fn a_resize_that_does_not_fit_waits_for_room() {
    let _guard = serial();
    let total_kib: i64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemTotal");
    let reserved = format!("--system-reserved=memory={}Ki", total_kib - (1 << 20));
    let mut k = Kubelet::new("resize-deferred");
    k.start_with(&[&reserved]);
    let grow_uid = format!("{}-grow", uid());
    k.write_manifest(
        "big.yaml",
        &sleeper("big", &format!("{}-big", uid()), "600Mi"),
    );
    k.write_manifest("grow.yaml", &sleeper("grow", &grow_uid, "100Mi"));
    for name in ["big", "grow"] {
        k.wait_pod(name, "running", Duration::from_secs(60), |p| {
            running(p, "main")
        });
    }
    k.write_manifest("grow.yaml", &sleeper("grow", &grow_uid, "400Mi"));
    let pod = k.wait_pod("grow", "PodResizePending", Duration::from_secs(30), |p| {
        has_condition(p, "PodResizePending").is_some()
    });
    let pending = has_condition(&pod, "PodResizePending").unwrap();
    assert_eq!(pending["reason"], "Deferred", "{pending}");
    let message = pending["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "Node didn't have enough resource: memory, requested: {}, used: {}, capacity: ",
            400 << 20,
            600 << 20
        )),
        "{message}"
    );
    let id = container_id(&pod, "main");
    let mem = cgroup::find("memory", &id).expect("grow's memory cgroup");
    assert_eq!(cgroup::memory_limit(&mem), 100 << 20);

    // A crash does not grant it: the restarted kubelet knows what grow was allocated (from its
    // checkpoint) and decides the resize again, next to big, whatever order they come back in.
    k.kill();
    k.start_with(&[&reserved]);
    let pod = k.wait_pod(
        "grow",
        "PodResizePending after the restart",
        Duration::from_secs(30),
        |p| has_condition(p, "PodResizePending").is_some() && running(p, "main"),
    );
    let pending = has_condition(&pod, "PodResizePending").unwrap();
    assert_eq!(pending["reason"], "Deferred", "{pending}");
    assert_eq!(container_id(&pod, "main"), id, "the same container runs on");
    assert_eq!(
        container_status(&pod, "main")["allocatedResources"]["memory"],
        "100Mi"
    );
    // Given some time to go wrong: the limit stays what was allocated.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(cgroup::memory_limit(&mem), 100 << 20);

    k.remove_manifest("big.yaml");
    let pod = k.wait_pod("grow", "the resize applied", Duration::from_secs(60), |p| {
        container_status(p, "main")["resources"]["limits"]["memory"] == "400Mi"
            && has_condition(p, "PodResizePending").is_none()
    });
    assert_eq!(container_id(&pod, "main"), id, "resized in place");
    assert_eq!(cgroup::memory_limit(&mem), 400 << 20);
    k.cleanup();
}
