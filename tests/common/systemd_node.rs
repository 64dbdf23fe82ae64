//! A real systemd to test against: hack/testbed/systemd-node.sh boots the machine's systemd as
//! PID 1 of its own PID and mount namespace (with D-Bus and logind), and a containerd of its
//! own runs inside. Both go when the value is dropped.

use std::path::PathBuf;
use std::process::Command;

use super::{Kubelet, repo_root};

pub struct SystemdNode {
    pub name: &'static str,
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
        let node = SystemdNode { name };
        node.stop();
        run(
            "boot the systemd node",
            Command::new("bash")
                .arg(script("systemd-node.sh"))
                .args(["start", name]),
        );
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

    /// Where systemd keeps the node's cgroup `path` in a v1 hierarchy.
    pub fn v1_dir(&self, controller: &str, path: &str) -> PathBuf {
        PathBuf::from(format!(
            "/sys/fs/cgroup/{controller}/krs-sd-{}{path}",
            self.name
        ))
    }

    /// Makes `k` run inside the node, on the node's containerd.
    pub fn adopt(&self, k: &mut Kubelet) {
        k.wrapper = vec![
            "bash".into(),
            script("systemd-node.sh"),
            "exec".into(),
            self.name.into(),
        ];
        k.runtime_sock = Some(format!("/run/kubelet-rs/{}/containerd.sock", self.name));
    }

    fn stop(&self) {
        let _ = self
            .exec(&["bash", &script("containerd.sh"), "purge", self.name])
            .status();
        let _ = Command::new("bash")
            .arg(script("systemd-node.sh"))
            .args(["stop", self.name])
            .status();
    }
}

impl Drop for SystemdNode {
    fn drop(&mut self) {
        self.stop();
    }
}
