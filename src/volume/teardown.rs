//! Giving back what a pod's volumes hold: the mounts this kubelet made (tmpfs, local and NFS
//! mounts) undone, then the folders removed, never reaching into any other mount.

use std::path::{Path, PathBuf};

use super::{DOWNWARD_API, EMPTY_DIR, PROJECTED, SECRET, VolumeError, nfs, persistent};

/// The plugins whose folders hold mounts this kubelet made and may undo: a tmpfs, or the
/// bind mount of a local volume (undoing a bind loses nothing of its source).
const OWN_MOUNT_PLUGINS: [&str; 6] = [
    EMPTY_DIR,
    SECRET,
    DOWNWARD_API,
    PROJECTED,
    persistent::local::LOCAL_VOLUME,
    nfs::NFS,
];

/// Unmounts the tmpfs volumes this kubelet mounted and removes the pod's folder, refusing to
/// descend into any other mount (a volume still mounted there must not lose its contents).
pub fn remove_pod_dir(pod_dir: &Path) -> Result<(), VolumeError> {
    if !pod_dir.exists() {
        return Ok(());
    }
    unmount_ours(pod_dir)?;
    std::fs::remove_dir_all(pod_dir).map_err(|source| VolumeError::Io {
        path: pod_dir.to_path_buf(),
        source,
    })
}

/// Like [`remove_pod_dir`] for the pod's volumes only: a finished pod that is not deleted yet
/// keeps its folder (termination messages) but gives back the disk and memory its volumes
/// held, as upstream tears down the volumes of terminated pods. Without this an evicted pod's
/// emptyDir would keep the disk pressure that evicted it.
pub fn release_volumes(pod_dir: &Path) -> Result<(), VolumeError> {
    let volumes = pod_dir.join("volumes");
    if !volumes.exists() {
        return Ok(());
    }
    unmount_ours(pod_dir)?;
    std::fs::remove_dir_all(&volumes).map_err(|source| VolumeError::Io {
        path: volumes.clone(),
        source,
    })
}

/// The mount points below `dir` in the kubelet's mount table.
fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = format!("{}/", dir.to_string_lossy());
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|mp| mp.starts_with(&prefix))
        .map(PathBuf::from)
        .collect()
}

fn unmount_ours(pod_dir: &Path) -> Result<(), VolumeError> {
    let ours: Vec<PathBuf> = OWN_MOUNT_PLUGINS
        .iter()
        .map(|k| pod_dir.join("volumes").join(k))
        .collect();
    for mp in &mounts_below(pod_dir) {
        if !mp.parent().is_some_and(|p| ours.iter().any(|o| o == p)) {
            return Err(VolumeError::StillMounted(mp.to_string_lossy().into_owned()));
        }
        crate::sys::unmount_detach(mp).map_err(|source| VolumeError::Io {
            path: mp.clone(),
            source,
        })?;
    }
    // The folder is removed next: nothing may be mounted below it any more, or the removal
    // would reach into a volume's source.
    if let Some(mp) = mounts_below(pod_dir).first() {
        return Err(VolumeError::StillMounted(mp.to_string_lossy().into_owned()));
    }
    Ok(())
}
