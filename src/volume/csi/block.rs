//! CSI volumes of `volumeMode: Block`, in upstream's layout: the driver stages the volume at
//! `<root>/plugins/kubernetes.io/csi/volumeDevices/staging/<pv>` (a folder, when it offers
//! STAGE_UNSTAGE_VOLUME) and publishes it for each pod on the file
//! `.../volumeDevices/publish/<pv>/<pod uid>` (a device node, or a device bind-mounted on a
//! file the driver makes). `vol_data.json` is kept once per volume in
//! `.../volumeDevices/<pv>/data/`, and the pod's folder holds
//! `volumeDevices/kubernetes.io~csi/<pv>`, a link to its published device, which the runtime
//! gives the containers. Teardown reads all of it from disk, so a restarted kubelet still
//! unpublishes a deleted pod's device.
//!
//! Upstream also bind-mounts each pod's device into `.../volumeDevices/<pv>/dev/<pod uid>` and
//! holds it open through a loop device, so that the device cannot be detached while in use;
//! that guard is not made here.

use std::path::{Path, PathBuf};

use super::CsiError;
use super::drivers::Drivers;
use super::mount::{
    CSI_PLUGIN_DIR, CsiVolume, SetUpError, VolData, publish_request, read_vol_data, set_up_client,
    stage_request, tear_down_client, write_vol_data,
};
use crate::volume::empty_dir::is_mount_point;

/// The pod's folder of block volumes, upstream's name.
pub const POD_DEVICES_DIR: &str = "volumeDevices";

fn plugin_dir(root_dir: &Path) -> PathBuf {
    root_dir.join("plugins/kubernetes.io/csi/volumeDevices")
}

pub fn staging_path(root_dir: &Path, pv: &str) -> PathBuf {
    plugin_dir(root_dir).join("staging").join(pv)
}

pub fn publish_path(root_dir: &Path, pv: &str, pod_uid: &str) -> PathBuf {
    plugin_dir(root_dir).join("publish").join(pv).join(pod_uid)
}

fn data_dir(root_dir: &Path, pv: &str) -> PathBuf {
    plugin_dir(root_dir).join(pv).join("data")
}

/// The link in the pod's folder that the containers' device comes from.
pub fn pod_device_path(pod_dir: &Path, pv: &str) -> PathBuf {
    pod_dir.join(POD_DEVICES_DIR).join(CSI_PLUGIN_DIR).join(pv)
}

fn pod_uid(pod_dir: &Path) -> String {
    pod_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Stages (when the driver stages) and publishes `vol` for the pod in `pod_dir`, and returns
/// the link to its device. A device already published for the pod is left as it is, unless
/// the driver asks to be published to on each sync.
pub async fn set_up(
    drivers: &Drivers,
    root_dir: &Path,
    pod_dir: &Path,
    data: &VolData,
    vol: &CsiVolume,
) -> Result<PathBuf, SetUpError> {
    let link = pod_device_path(pod_dir, &vol.name);
    let publish = publish_path(root_dir, &vol.name, &pod_uid(pod_dir));
    let published = is_mount_point(&publish) && link.symlink_metadata().is_ok();
    if published && !vol.requires_republish {
        return Ok(link);
    }
    let (mut client, caps) = set_up_client(drivers, &vol.driver, "blockMapper.SetUpDevice").await?;
    let call = |e: CsiError| e.to_string();
    write_vol_data(&data_dir(root_dir, &vol.name), data).map_err(SetUpError::MountDevice)?;
    let capability = super::mount::capability(vol, false);
    // Staged again for each pod, as upstream does: CSI makes staging idempotent.
    let staging = if caps.stage_unstage {
        let staging = staging_path(root_dir, &vol.name);
        make_dir(&staging).map_err(SetUpError::MountDevice)?;
        client
            .node_stage_volume(stage_request(vol, &staging, &capability))
            .await
            .map_err(|e| SetUpError::MountDevice(call(e)))?;
        staging.to_string_lossy().into_owned()
    } else {
        String::new()
    };
    // The driver makes the file itself; the kubelet makes its folder.
    let publish_dir = publish.parent().unwrap_or(&publish);
    make_dir(publish_dir).map_err(SetUpError::SetUp)?;
    let req = publish_request(vol, staging, &publish, capability);
    if let Err(e) = client.node_publish_volume(req).await {
        if !is_mount_point(&publish) {
            let _ = std::fs::remove_file(&publish);
            let _ = std::fs::remove_dir(publish_dir);
        }
        return Err(SetUpError::SetUp(call(e)));
    }
    link_device(&link, &publish).map_err(SetUpError::SetUp)?;
    Ok(link)
}

fn make_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
        .map_err(|e| format!("failed to create dir {}: {e}", dir.display()))
}

fn link_device(link: &Path, device: &Path) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("failed to map the device to {}: {e}", link.display());
    if let Some(dir) = link.parent() {
        make_dir(dir)?;
    }
    match std::fs::read_link(link) {
        Ok(to) if to == device => return Ok(()),
        Ok(_) => std::fs::remove_file(link).map_err(fail)?,
        Err(_) => {}
    }
    std::os::unix::fs::symlink(device, link).map_err(fail)
}

/// Unpublishes every block volume of the pod in `pod_dir` and unstages each one no other pod
/// still has published. The first failure is returned (its link stays for another try); the
/// others are still attempted.
pub async fn tear_down_pod(
    drivers: &Drivers,
    root_dir: &Path,
    pod_dir: &Path,
) -> Result<(), String> {
    let dir = pod_dir.join(POD_DEVICES_DIR).join(CSI_PLUGIN_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    let uid = pod_uid(pod_dir);
    let mut first_error = None;
    for entry in entries.flatten() {
        let pv = entry.file_name().to_string_lossy().into_owned();
        if let Err(e) = tear_down(drivers, root_dir, &pv, &uid, &entry.path()).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

async fn tear_down(
    drivers: &Drivers,
    root_dir: &Path,
    pv: &str,
    uid: &str,
    link: &Path,
) -> Result<(), String> {
    let publish = publish_path(root_dir, pv, uid);
    let Some(data) = read_vol_data(&data_dir(root_dir, pv)) else {
        // Nothing says which driver: nothing can be asked of it.
        if !is_mount_point(&publish) {
            let _ = std::fs::remove_file(link);
        }
        return Err(format!(
            "UnmapVolume.TearDownDevice failed for volume {pv:?}: no volume data in {}",
            data_dir(root_dir, pv).display()
        ));
    };
    let fail = |e: String| {
        format!(
            "UnmapVolume.UnmapBlockVolume failed for volume {pv:?} (volume handle {:?}): {e}",
            data.volume_handle
        )
    };
    let mut client = tear_down_client(drivers, &data.driver_name)
        .await
        .map_err(fail)?;
    if publish.symlink_metadata().is_ok() {
        client
            .node_unpublish_volume(&data.volume_handle, &publish.to_string_lossy())
            .await
            .map_err(|e| fail(e.to_string()))?;
        if is_mount_point(&publish) {
            return Err(fail(format!(
                "{} is still mounted after NodeUnpublishVolume",
                publish.display()
            )));
        }
        let _ = std::fs::remove_file(&publish);
    }
    let _ = std::fs::remove_file(link);
    let publish_dir = plugin_dir(root_dir).join("publish").join(pv);
    // Another pod's device of the same volume keeps it staged.
    if std::fs::remove_dir(&publish_dir).is_err() && publish_dir.exists() {
        return Ok(());
    }
    let staging = staging_path(root_dir, pv);
    if staging.exists() {
        let caps = client
            .node_get_capabilities()
            .await
            .map_err(|e| fail(e.to_string()))?;
        if caps.stage_unstage {
            client
                .node_unstage_volume(&data.volume_handle, &staging.to_string_lossy())
                .await
                .map_err(|e| format!("UnmapDevice failed for volume {pv:?}: {e}"))?;
        }
        if is_mount_point(&staging) {
            return Err(format!(
                "UnmapDevice failed for volume {pv:?}: {} is still mounted after NodeUnstageVolume",
                staging.display()
            ));
        }
        let _ = std::fs::remove_dir_all(&staging);
    }
    let _ = std::fs::remove_dir_all(plugin_dir(root_dir).join(pv));
    Ok(())
}

/// The block volumes staged or published on this node, from their vol_data.json files.
pub fn in_use(root_dir: &Path) -> impl Iterator<Item = VolData> {
    std::fs::read_dir(plugin_dir(root_dir))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| read_vol_data(&e.path().join("data")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_upstream() {
        let root = Path::new("/var/lib/kubelet");
        assert_eq!(
            staging_path(root, "pv-1"),
            Path::new("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-1")
        );
        assert_eq!(
            publish_path(root, "pv-1", "u1"),
            Path::new("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/u1")
        );
        assert_eq!(
            data_dir(root, "pv-1"),
            Path::new("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv-1/data")
        );
        assert_eq!(
            pod_device_path(Path::new("/var/lib/kubelet/pods/u1"), "pv-1"),
            Path::new("/var/lib/kubelet/pods/u1/volumeDevices/kubernetes.io~csi/pv-1")
        );
    }

    #[test]
    fn a_device_link_is_made_once_and_moved_when_it_points_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("pod/volumeDevices/kubernetes.io~csi/pv");
        link_device(&link, Path::new("/dev/a")).unwrap();
        link_device(&link, Path::new("/dev/a")).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("/dev/a"));
        link_device(&link, Path::new("/dev/b")).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("/dev/b"));
    }

    #[test]
    fn block_volumes_in_use_come_from_their_data_folders() {
        let root = tempfile::tempdir().unwrap();
        let data = VolData {
            spec_volume_id: "pv-1".into(),
            volume_handle: "h-1".into(),
            driver_name: "d.csi".into(),
            ..Default::default()
        };
        write_vol_data(&data_dir(root.path(), "pv-1"), &data).unwrap();
        std::fs::create_dir_all(staging_path(root.path(), "pv-1")).unwrap();
        let found: Vec<VolData> = in_use(root.path()).collect();
        assert_eq!(found, [data]);
    }
}
