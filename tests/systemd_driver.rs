//! The systemd cgroup driver against a real systemd: hack/testbed/systemd-node.sh boots the
//! machine's systemd as PID 1 of its own PID and mount namespace (with D-Bus and logind), a
//! containerd runs inside it with runc's SystemdCgroup, and our kubelet runs inside it with
//! `--cgroup-driver=systemd`. The slices must be systemd units with the pod's limits, the
//! containers scopes below them, and a removed pod's slice must go. On cgroup v2 (the VM bed,
//! e2e/vm/run.sh test, where the node is the VM's own systemd) the same, with v2's properties
//! and files.

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
    // v2 has weights where v1 has shares: upstream's conversion gives 1 for 2 shares, 4 for
    // 102, and systemd's properties are named for what the kernel takes.
    let v2 = cgroup_v2_host();
    let (cpu_prop, memory_prop) = if v2 {
        ("CPUWeight", "MemoryMax")
    } else {
        ("CPUShares", "MemoryLimit")
    };
    assert_eq!(
        node.unit_prop("kubepods-besteffort.slice", cpu_prop),
        if v2 { "1" } else { "2" }
    );

    let pod = k.wait_pod("burst", "running", Duration::from_secs(60), |p| {
        container_status(p, "main")["state"]["running"].is_object()
    });
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let unit = format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_"));
    let slice_path = format!("/kubepods.slice/kubepods-burstable.slice/{unit}");
    assert_eq!(node.unit_prop(&unit, "ActiveState"), "active");
    assert_eq!(
        node.unit_prop(&unit, memory_prop),
        (64u64 << 20).to_string()
    );
    assert_eq!(
        node.unit_prop(&unit, cpu_prop),
        if v2 { "4" } else { "102" }
    );
    // The files say the same (systemd wrote some, we wrote the rest).
    let read = |c: &str, f: &str| {
        std::fs::read_to_string(node.cgroup_dir(c, &slice_path).join(f))
            .unwrap_or_else(|e| panic!("{c}/{f}: {e}"))
            .trim()
            .to_string()
    };
    if v2 {
        assert_eq!(read("memory", "memory.max"), "67108864");
        assert_eq!(read("cpu", "cpu.weight"), "4");
    } else {
        assert_eq!(read("memory", "memory.limit_in_bytes"), "67108864");
        assert_eq!(read("cpu", "cpu.shares"), "102");
    }
    assert!(node.cgroup_dir("cpuset", &slice_path).is_dir());

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
        text.contains(":/").then_some(text)
    });
    // On v2 the container has a cgroup namespace of its own and sees itself at "/": its scope
    // is checked from the host, as on v1.
    if !v2 {
        assert!(
            self_cgroup.contains(&format!(
                "memory:{}{slice_path}/{scope}",
                node.cgroup_prefix()
            )),
            "container cgroup:\n{self_cgroup}"
        );
    }
    let scope_dir = node.cgroup_dir("memory", &format!("{slice_path}/{scope}"));
    assert!(scope_dir.is_dir(), "{} missing", scope_dir.display());
    assert_eq!(node.unit_prop(&scope, "Slice"), unit);

    // The pod goes: its scope and slice with it, units and directories.
    k.remove_manifest("burst.yaml");
    wait_for(Duration::from_secs(60), "the pod slice to go", || {
        let state = node.unit_prop(&unit, "ActiveState");
        (state == "inactive" && !node.cgroup_dir("memory", &slice_path).exists()).then_some(())
    });
    assert!(!node.cgroup_dir("cpuset", &slice_path).exists());
    assert!(!node.cgroup_dir("cpu", &slice_path).exists());
    // The kubelet logs it once systemd's stop job is done, which may come after the
    // directories are gone.
    let said = wait_for_opt(Duration::from_secs(30), || {
        k.log().contains("Removed pod cgroup").then_some(())
    });
    assert!(said.is_some(), "{}", tail(&k.log(), 40));
    k.stop();
}
