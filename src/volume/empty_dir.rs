//! emptyDir volumes, and the folders of the kubelet-written volumes, which upstream builds on
//! an emptyDir too: on disk, or a tmpfs of their own for medium Memory and for anything that
//! holds secrets.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// An emptyDir is open to every user (0777, as upstream makes it, whatever the umask): a
/// container running as a non-root user must be able to write to it.
const MODE: u32 = 0o777;
/// A tmpfs root keeps the mode a fresh tmpfs has, sticky included, as upstream leaves it (its
/// permission bits already match, so it never changes them): `drwxrwxrwt`.
const TMPFS_MODE: u32 = 0o1777;

pub fn is_mount_point(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = path.to_string_lossy();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mp| mp == wanted)
}

/// Where a volume's folder lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Medium {
    Disk,
    /// A tmpfs, of this many bytes when set.
    Memory {
        size: Option<u64>,
    },
}

/// Creates the folder (a tmpfs for memory) once; later calls find it ready. A tmpfs keeps the
/// size it was mounted with: a pod's volumes do not change while it runs. A new folder goes to
/// the pod's `fsGroup` as upstream's volume ownership does: that group, and setgid (so what
/// the containers create inherits it). Only a new folder: it is empty, so there is nothing
/// beneath it to walk, whatever `fsGroupChangePolicy` says.
pub fn prepare(dir: &Path, medium: Medium, fs_group: Option<u32>) -> Result<(), std::io::Error> {
    let existed = dir.is_dir();
    std::fs::create_dir_all(dir)?;
    match medium {
        Medium::Memory { size } if !is_mount_point(dir) => crate::sys::mount_tmpfs(dir, size)?,
        _ if existed => return Ok(()),
        _ => {}
    }
    let mut mode = match medium {
        Medium::Disk => MODE,
        Medium::Memory { .. } => TMPFS_MODE,
    };
    if let Some(gid) = fs_group {
        std::os::unix::fs::lchown(dir, None, Some(gid))?;
        mode |= 0o2000;
    }
    // After the mount and the chown: the mode that counts is the tmpfs root's, and a change of
    // group clears setgid on some filesystems.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

/// The size of a memory-backed volume, as upstream sizes it: the node's allocatable memory,
/// lowered to the pod's memory limit (when it has one) and then to the volume's own
/// `sizeLimit` (when positive and lower). `None` (the kernel's default) when nothing is known.
pub fn memory_size(
    node_allocatable: i64,
    pod_limit: Option<i64>,
    size_limit: Option<i64>,
) -> Option<u64> {
    let mut size = node_allocatable;
    for lower in [pod_limit, size_limit].into_iter().flatten() {
        if lower > 0 && (size <= 0 || lower <= size) {
            size = lower;
        }
    }
    u64::try_from(size).ok().filter(|s| *s > 0)
}

/// Where an emptyDir lives on the host, as upstream lays it out.
pub fn path(pod_dir: &Path, volume: &str) -> PathBuf {
    super::volume_dir(pod_dir, super::EMPTY_DIR, volume)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_new_folder_goes_to_the_fs_group_with_setgid() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        prepare(&dir, Medium::Disk, Some(4321)).unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!(meta.gid(), 4321);
        assert_eq!(meta.mode() & 0o7777, 0o2777);
        let plain = tmp.path().join("plain");
        prepare(&plain, Medium::Disk, None).unwrap();
        assert_eq!(std::fs::metadata(&plain).unwrap().mode() & 0o7777, 0o777);
    }

    #[test]
    fn memory_size_is_the_smallest_known_bound() {
        let gi = 1 << 30;
        assert_eq!(memory_size(8 * gi, None, None), Some(8 << 30));
        assert_eq!(memory_size(8 * gi, Some(gi), None), Some(1 << 30));
        assert_eq!(
            memory_size(8 * gi, Some(gi), Some(64 << 20)),
            Some(64 << 20)
        );
        // A sizeLimit above what the pod may use does not raise it.
        assert_eq!(memory_size(8 * gi, Some(gi), Some(2 * gi)), Some(1 << 30));
        assert_eq!(memory_size(8 * gi, None, Some(16 * gi)), Some(8 << 30));
        // Zero limits are no limits; nothing known is the kernel's default.
        assert_eq!(memory_size(8 * gi, Some(0), Some(0)), Some(8 << 30));
        assert_eq!(memory_size(0, None, None), None);
        assert_eq!(memory_size(0, None, Some(gi)), Some(1 << 30));
    }
}
