//! A real systemd to test against: hack/testbed/systemd-node.sh boots the machine's systemd as
//! PID 1 of its own PID and mount namespace (with D-Bus and logind), and a containerd of its
//! own runs inside. Both go when the value is dropped.
//!
//! On a machine whose PID 1 is systemd and that is there to be tested on (a VM of
//! e2e/vm/run.sh test, which sets `KRS_IT_MACHINE_SYSTEMD=1`), the node is the machine itself:
//! its systemd, its logind, a containerd of the node's name beside the others. Opt-in, because
//! the tests raise logind's delay and announce a shutdown on the system bus.

use std::path::PathBuf;
use std::process::Command;

use super::{Kubelet, repo_root};

pub struct SystemdNode {
    pub name: &'static str,
    /// The machine's own systemd rather than one booted in namespaces.
    machine: bool,
}

/// Whether the tests may use the machine's systemd (see the module's comment).
fn machine_systemd() -> bool {
    std::env::var("KRS_IT_MACHINE_SYSTEMD").as_deref() == Ok("1")
        && std::fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd")
}

fn script(name: &str) -> String {
    repo_root()
        .join("hack/testbed")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

pub fn run(what: &str, cmd: &mut Command) -> String {
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

impl SystemdNode {
    /// Boots the node (after stopping a leftover one of the same name) and starts its
    /// containerd, with runc's SystemdCgroup when `systemd_cgroup`, and the test images.
    pub fn start(name: &'static str, systemd_cgroup: bool) -> SystemdNode {
        let node = SystemdNode {
            name,
            machine: machine_systemd(),
        };
        node.stop();
        if !node.machine {
            run(
                "boot the systemd node",
                Command::new("bash")
                    .arg(script("systemd-node.sh"))
                    .args(["start", name]),
            );
        }
        assert_eq!(
            run("PID 1", &mut node.exec(&["cat", "/proc/1/comm"])).trim(),
            "systemd"
        );
        let flag = if systemd_cgroup { "1" } else { "0" };
        run(
            "containerd in the node",
            &mut node.exec(&[
                "env",
                &format!("KRS_CONTAINERD_SYSTEMD_CGROUP={flag}"),
                "bash",
                &script("containerd.sh"),
                "start",
                name,
            ]),
        );
        run(
            "images in the node's containerd",
            &mut node.exec(&["bash", &script("images.sh"), name]),
        );
        node
    }

    /// A command that runs inside the node.
    pub fn exec(&self, args: &[&str]) -> Command {
        if self.machine {
            let mut c = Command::new(args[0]);
            c.args(&args[1..]);
            return c;
        }
        let mut c = Command::new("bash");
        c.arg(script("systemd-node.sh"))
            .args(["exec", self.name])
            .args(args);
        c
    }

    /// `systemctl show -p <prop> --value <unit>` inside the node.
    pub fn unit_prop(&self, unit: &str, prop: &str) -> String {
        run(
            "systemctl show",
            &mut self.exec(&["systemctl", "show", "-p", prop, "--value", unit]),
        )
        .trim()
        .to_string()
    }

    /// Where the node's cgroup `path` is: in the `controller` hierarchy on cgroup v1, where a
    /// booted node lives in a subtree of its own; in the one hierarchy on v2.
    pub fn cgroup_dir(&self, controller: &str, path: &str) -> PathBuf {
        let root = self.cgroup_prefix();
        if super::cgroup_v2_host() {
            PathBuf::from(format!("/sys/fs/cgroup{root}{path}"))
        } else {
            PathBuf::from(format!("/sys/fs/cgroup/{controller}{root}{path}"))
        }
    }

    /// The cgroup path of the node's root as its processes see it in /proc/PID/cgroup.
    pub fn cgroup_prefix(&self) -> String {
        if self.machine {
            String::new()
        } else {
            format!("/krs-sd-{}", self.name)
        }
    }

    /// Makes `k` run inside the node, on the node's containerd.
    pub fn adopt(&self, k: &mut Kubelet) {
        k.runtime_sock = Some(format!("/run/kubelet-rs/{}/containerd.sock", self.name));
        if self.machine {
            return;
        }
        k.wrapper = vec![
            "bash".into(),
            script("systemd-node.sh"),
            "exec".into(),
            self.name.into(),
        ];
    }

    fn stop(&self) {
        let _ = self
            .exec(&["bash", &script("containerd.sh"), "purge", self.name])
            .status();
        if !self.machine {
            let _ = Command::new("bash")
                .arg(script("systemd-node.sh"))
                .args(["stop", self.name])
                .status();
        }
    }
}

impl Drop for SystemdNode {
    fn drop(&mut self) {
        self.stop();
    }
}
