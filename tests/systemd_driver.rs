//! The systemd cgroup driver against a real systemd: hack/testbed/systemd-node.sh boots the
//! machine's systemd as PID 1 of its own PID and mount namespace (with D-Bus and logind), a
//! containerd runs inside it with runc's SystemdCgroup, and our kubelet runs inside it with
//! `--cgroup-driver=systemd`. The slices must be systemd units with the pod's limits, the
//! containers scopes below them, and a removed pod's slice must go.

mod common;

use std::time::Duration;

use common::systemd_node::SystemdNode;
use common::*;

#[test]
fn pods_run_in_systemd_slices() {
    let _serial = serial();
    let node = SystemdNode::start("sdt", true);
    let mut k = Kubelet::new("systemd-driver");
    k.cgroup_root = "/".into();
    node.adopt(&mut k);
    k.write_manifest(
        "burst.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: burst
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "cat /proc/self/cgroup; sleep 3600"]
    resources:
      requests: {{cpu: 100m, memory: 32Mi}}
      limits: {{memory: 64Mi}}
"#
        ),
    );
    k.start_with(&["--cgroup-driver=systemd"]);

    // The node-level slices are systemd units.
    for unit in [
        "kubepods.slice",
        "kubepods-burstable.slice",
        "kubepods-besteffort.slice",
    ] {
        assert_eq!(node.unit_prop(unit, "ActiveState"), "active", "{unit}");
    }
    assert_eq!(
        node.unit_prop("kubepods-besteffort.slice", "CPUShares"),
        "2"
    );

    let pod = k.wait_pod("burst", "running", Duration::from_secs(60), |p| {
        container_status(p, "main")["state"]["running"].is_object()
    });
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let unit = format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_"));
    let slice_path = format!("/kubepods.slice/kubepods-burstable.slice/{unit}");
    assert_eq!(node.unit_prop(&unit, "ActiveState"), "active");
    assert_eq!(
        node.unit_prop(&unit, "MemoryLimit"),
        (64u64 << 20).to_string()
    );
    assert_eq!(node.unit_prop(&unit, "CPUShares"), "102");
    // The files say the same (systemd wrote some, we wrote the rest).
    let read = |c: &str, f: &str| {
        std::fs::read_to_string(node.v1_dir(c, &slice_path).join(f))
            .unwrap_or_else(|e| panic!("{c}/{f}: {e}"))
            .trim()
            .to_string()
    };
    assert_eq!(read("memory", "memory.limit_in_bytes"), "67108864");
    assert_eq!(read("cpu", "cpu.shares"), "102");
    assert!(node.v1_dir("cpuset", &slice_path).is_dir());

    // runc put the container in a scope below the pod's slice.
    let cid = container_status(&pod, "main")["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let scope = format!("cri-containerd-{cid}.scope");
    let log = k
        .pod_logs_dir
        .join(format!("default_burst-{NODE}_{uid}/main/0.log"));
    let self_cgroup = wait_for(Duration::from_secs(20), "the container's log", || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.contains("memory:").then_some(text)
    });
    assert!(
        self_cgroup.contains(&format!("memory:/krs-sd-{}{slice_path}/{scope}", node.name)),
        "container cgroup:\n{self_cgroup}"
    );
    assert_eq!(node.unit_prop(&scope, "Slice"), unit);

    // The pod goes: its scope and slice with it, units and directories.
    k.remove_manifest("burst.yaml");
    wait_for(Duration::from_secs(60), "the pod slice to go", || {
        let state = node.unit_prop(&unit, "ActiveState");
        (state == "inactive" && !node.v1_dir("memory", &slice_path).exists()).then_some(())
    });
    assert!(!node.v1_dir("cpuset", &slice_path).exists());
    assert!(!node.v1_dir("cpu", &slice_path).exists());
    assert!(
        k.log().contains("Removed pod cgroup"),
        "{}",
        tail(&k.log(), 40)
    );
    k.stop();
}
