//! OOM kills on the real test bed: a container whose memory hog the kernel's OOM killer kills
//! reports reason OOMKilled and exit code 137. On this bed containerd itself says `Error`
//! (the pod cgroup, with the same limit and the pause process in it, is the one that runs
//! out), so the reason comes from our reading of the kernel log, which a restarted kubelet reads
//! again from what the ring buffer holds, so the reason stays. On cgroup v2 the container
//! cgroup's memory.events counter must have seen the kill as well. A node-level OOM cannot be
//! provoked safely on a shared machine: SystemOOM is covered by the parser's unit tests.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// A busybox pod whose one container doubles a shell string until its 32Mi limit stops it.
fn hog(name: &str, restart: &str) -> String {
    static_pod(
        name,
        &format!(
            r#"  restartPolicy: {restart}
  terminationGracePeriodSeconds: 1
  containers:
  - name: hog
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "x=aaaaaaaa; while true; do x=$x$x; done"]
    resources:
      limits:
        memory: 32Mi
"#
        ),
    )
}

fn terminated<'a>(pod: &'a Value, state: &str) -> &'a Value {
    &container_status(pod, "hog")[state]["terminated"]
}

/// The ID of the container attempt the last state describes, without the runtime prefix.
fn pod_container_id(pod: &Value) -> &str {
    let id = terminated(pod, "lastState")["containerID"].as_str();
    id.and_then(|id| id.split("://").nth(1)).unwrap_or_default()
}

#[test]
fn memory_hog_is_oom_killed() {
    let _serial = serial();
    let mut k = Kubelet::new("oom");
    k.start();

    k.write_manifest("hog-never.yaml", &hog("hog-never", "Never"));
    let pod = k.wait_pod(
        "hog-never",
        "the hog to be killed",
        Duration::from_secs(90),
        |p| phase(p) == "Failed",
    );
    let t = terminated(&pod, "state");
    assert_eq!(t["reason"], "OOMKilled", "status: {pod:#}");
    assert_eq!(t["exitCode"], 137, "status: {pod:#}");

    // After a crash the kernel's record is read again: the status still says why.
    k.kill();
    k.start();
    let pod = k.wait_pod(
        "hog-never",
        "its status after the restart",
        Duration::from_secs(30),
        |p| phase(p) == "Failed",
    );
    let t = terminated(&pod, "state");
    assert_eq!(t["reason"], "OOMKilled", "after a restart: {pod:#}");

    k.write_manifest("hog-always.yaml", &hog("hog-always", "Always"));
    let pod = k.wait_pod(
        "hog-always",
        "a restart after the OOM kill",
        Duration::from_secs(90),
        |p| !terminated(p, "lastState").is_null(),
    );
    let t = terminated(&pod, "lastState");
    assert_eq!(t["reason"], "OOMKilled", "status: {pod:#}");
    assert_eq!(t["exitCode"], 137, "status: {pod:#}");
    assert_eq!(phase(&pod), "Running", "status: {pod:#}");
    // The reason came from the kernel's record of this very container, not from a guess.
    let id = pod_container_id(&pod);
    let logged = |what: &str| k.log().lines().any(|l| l.contains(what) && l.contains(id));
    assert!(
        logged("OOM kill"),
        "no OOM kill of {id} in the log:\n{}",
        tail(&k.log(), 40)
    );
    // On cgroup v2 the container's own memory.events counted it too (e2e/vm/run.sh test).
    if cgroup_v2_host() {
        assert!(
            logged("counted in the container's memory.events"),
            "memory.events did not count the kill of {id}:\n{}",
            tail(&k.log(), 40)
        );
    }

    k.cleanup();
}
