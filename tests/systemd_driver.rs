//! The systemd cgroup driver against a real systemd: hack/testbed/systemd-node.sh boots the
//! machine's systemd as PID 1 of its own PID and mount namespace (with D-Bus and logind), a
//! containerd runs inside it with runc's SystemdCgroup, and our kubelet runs inside it with
//! `--cgroup-driver=systemd`. The slices must be systemd units with the pod's limits, the
//! containers scopes below them, and a removed pod's slice must go.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;

const NODE_NAME: &str = "sdt";

fn script(name: &str) -> PathBuf {
    repo_root().join("hack/testbed").join(name)
}

fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command inside the systemd node.
fn in_node(args: &[&str]) -> Command {
    let mut c = Command::new("bash");
    c.arg(script("systemd-node.sh"))
        .args(["exec", NODE_NAME])
        .args(args);
    c
}

/// `systemctl show -p <prop> --value <unit>` inside the node.
fn unit_prop(unit: &str, prop: &str) -> String {
    run(
        "systemctl show",
        &mut in_node(&["systemctl", "show", "-p", prop, "--value", unit]),
    )
    .trim()
    .to_string()
}

/// Stops containerd and the systemd node even when the test fails.
struct NodeGuard;

impl Drop for NodeGuard {
    fn drop(&mut self) {
        let _ = in_node(&[
            "bash",
            &script("containerd.sh").to_string_lossy(),
            "purge",
            NODE_NAME,
        ])
        .status();
        let _ = Command::new("bash")
            .arg(script("systemd-node.sh"))
            .args(["stop", NODE_NAME])
            .status();
    }
}

/// Where systemd keeps the node's cgroups in a v1 hierarchy.
fn v1_dir(controller: &str, path: &str) -> PathBuf {
    PathBuf::from(format!(
        "/sys/fs/cgroup/{controller}/krs-sd-{NODE_NAME}{path}"
    ))
}

#[test]
fn pods_run_in_systemd_slices() {
    let _serial = serial();
    let _ = Command::new("bash")
        .arg(script("systemd-node.sh"))
        .args(["stop", NODE_NAME])
        .status();
    let _guard = NodeGuard;
    run(
        "boot the systemd node",
        Command::new("bash")
            .arg(script("systemd-node.sh"))
            .args(["start", NODE_NAME]),
    );
    assert_eq!(
        run("PID 1", &mut in_node(&["cat", "/proc/1/comm"])).trim(),
        "systemd"
    );
    run(
        "containerd in the node",
        in_node(&[
            "env",
            "KRS_CONTAINERD_SYSTEMD_CGROUP=1",
            "bash",
            &script("containerd.sh").to_string_lossy(),
            "start",
            NODE_NAME,
        ])
        .env("KRS_CONTAINERD_SYSTEMD_CGROUP", "1"),
    );
    run(
        "images in the node's containerd",
        &mut in_node(&["bash", &script("images.sh").to_string_lossy(), NODE_NAME]),
    );

    let mut k = Kubelet::new("systemd-driver");
    k.cgroup_root = "/".into();
    k.wrapper = vec![
        "bash".into(),
        script("systemd-node.sh").to_string_lossy().into_owned(),
        "exec".into(),
        NODE_NAME.into(),
    ];
    k.runtime_sock = Some(format!("/run/kubelet-rs/{NODE_NAME}/containerd.sock"));
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
        assert_eq!(unit_prop(unit, "ActiveState"), "active", "{unit}");
    }
    assert_eq!(unit_prop("kubepods-besteffort.slice", "CPUShares"), "2");

    let pod = k.wait_pod("burst", "running", Duration::from_secs(60), |p| {
        container_status(p, "main")["state"]["running"].is_object()
    });
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let unit = format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_"));
    let slice_path = format!("/kubepods.slice/kubepods-burstable.slice/{unit}");
    assert_eq!(unit_prop(&unit, "ActiveState"), "active");
    assert_eq!(unit_prop(&unit, "MemoryLimit"), (64u64 << 20).to_string());
    assert_eq!(unit_prop(&unit, "CPUShares"), "102");
    // The files say the same (systemd wrote some, we wrote the rest).
    let read = |c: &str, f: &str| {
        std::fs::read_to_string(v1_dir(c, &slice_path).join(f))
            .unwrap_or_else(|e| panic!("{c}/{f}: {e}"))
            .trim()
            .to_string()
    };
    assert_eq!(read("memory", "memory.limit_in_bytes"), "67108864");
    assert_eq!(read("cpu", "cpu.shares"), "102");
    assert!(v1_dir("cpuset", &slice_path).is_dir());

    // runc put the container in a scope below the pod's slice.
    let cid = container_status(&pod, "main")["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let scope = format!("cri-containerd-{cid}.scope");
    let log_dir = format!("/var/log/pods/default_burst-{NODE}_{uid}/main");
    let self_cgroup = wait_for(Duration::from_secs(20), "the container's log", || {
        let text = std::fs::read_to_string(format!("{log_dir}/0.log")).ok()?;
        text.contains("memory:").then_some(text)
    });
    assert!(
        self_cgroup.contains(&format!("memory:/krs-sd-{NODE_NAME}{slice_path}/{scope}")),
        "container cgroup:\n{self_cgroup}"
    );
    assert_eq!(unit_prop(&scope, "Slice"), unit);

    // The pod goes: its scope and slice with it, units and directories.
    k.remove_manifest("burst.yaml");
    wait_for(Duration::from_secs(60), "the pod slice to go", || {
        let state = unit_prop(&unit, "ActiveState");
        (state == "inactive" && !v1_dir("memory", &slice_path).exists()).then_some(())
    });
    assert!(!v1_dir("cpuset", &slice_path).exists());
    assert!(!v1_dir("cpu", &slice_path).exists());
    assert!(
        k.log().contains("Removed pod cgroup"),
        "{}",
        tail(&k.log(), 40)
    );
    k.stop();
}
