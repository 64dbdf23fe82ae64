//! Where pod files live on the node. Same layout as upstream, because log shippers and
//! `kubectl logs` tooling read these paths directly.

use std::path::{Path, PathBuf};

pub const POD_LOGS_ROOT: &str = "/var/log/pods";

/// `/var/log/pods/<namespace>_<name>_<uid>`
pub fn pod_log_dir(root: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    root.join(format!("{namespace}_{name}_{uid}"))
}

/// Relative to the pod log dir, as the CRI wants it: `<container>/<restartCount>.log`.
pub fn container_log_path(container: &str, restart_count: u32) -> PathBuf {
    Path::new(container).join(format!("{restart_count}.log"))
}

/// `<root-dir>/pods/<uid>`: the pod's own folder under the kubelet root.
pub fn pod_dir(root_dir: &Path, uid: &str) -> PathBuf {
    root_dir.join("pods").join(uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_upstream() {
        let d = pod_log_dir(Path::new(POD_LOGS_ROOT), "default", "web-node1", "abc");
        assert_eq!(d, Path::new("/var/log/pods/default_web-node1_abc"));
        assert_eq!(container_log_path("app", 3), Path::new("app/3.log"));
    }
}
