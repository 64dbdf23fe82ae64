//! emptyDir volumes, and the folders of the kubelet-written volumes, which upstream builds on
//! an emptyDir too: on disk, or a tmpfs of their own for medium Memory and for anything that
//! holds secrets.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// An emptyDir is open to every user (0777, as upstream makes it, whatever the umask): a
/// container running as a non-root user must be able to write to it.
const MODE: u32 = 0o777;

pub fn is_mount_point(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = path.to_string_lossy();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mp| mp == wanted)
}

/// Creates the folder (a tmpfs when `memory`) once; later calls find it ready.
pub fn prepare(dir: &Path, memory: bool) -> Result<(), std::io::Error> {
    let existed = dir.is_dir();
    std::fs::create_dir_all(dir)?;
    if memory && !is_mount_point(dir) {
        crate::sys::mount_tmpfs(dir)?;
    } else if existed {
        return Ok(());
    }
    // After the mount: the mode that counts is the tmpfs root's, not the folder's beneath it.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(MODE))
}

/// Where an emptyDir lives on the host, as upstream lays it out.
pub fn path(pod_dir: &Path, volume: &str) -> PathBuf {
    super::volume_dir(pod_dir, super::EMPTY_DIR, volume)
}
