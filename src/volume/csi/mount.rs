//! A CSI volume set up for a pod and torn down again, in upstream's layout so that either
//! kubelet finds the other's mounts: the driver stages the volume once per node at
//! `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount` (when it offers
//! STAGE_UNSTAGE_VOLUME) and publishes it per pod at
//! `<pod>/volumes/kubernetes.io~csi/<volume>/mount`; beside each, `vol_data.json` records
//! what teardown needs (driver, handle), so that a restarted kubelet can still unpublish a
//! deleted pod's volume and unstage it when no pod uses it any more.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::CsiError;
use super::api;
use super::client::{Client, NodeCapabilities};
use super::drivers::Drivers;
use crate::volume::empty_dir::is_mount_point;

/// The plugin's folder under `<pod>/volumes/`, upstream's name.
pub const CSI_PLUGIN_DIR: &str = "kubernetes.io~csi";
const VOL_DATA: &str = "vol_data.json";

/// What teardown needs, with upstream's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolData {
    #[serde(rename = "specVolumeID")]
    pub spec_volume_id: String,
    #[serde(rename = "volumeHandle")]
    pub volume_handle: String,
    #[serde(rename = "driverName")]
    pub driver_name: String,
    #[serde(rename = "nodeName")]
    pub node_name: String,
    #[serde(rename = "attachmentID", default)]
    pub attachment_id: String,
    #[serde(rename = "volumeLifecycleMode", default)]
    pub volume_lifecycle_mode: String,
}

/// How a volume lives: upstream's `volumeLifecycleMode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lifecycle {
    /// A PersistentVolume's: staged once per node, outlives the pod.
    #[default]
    Persistent,
    /// A pod's inline volume: published for that pod only, never staged.
    Ephemeral,
}

impl Lifecycle {
    fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Persistent => "Persistent",
            Lifecycle::Ephemeral => "Ephemeral",
        }
    }
}

/// One CSI volume of a pod, as its PersistentVolume or the pod's inline source describes it.
#[derive(Clone, Debug, Default)]
pub struct CsiVolume {
    /// The PersistentVolume's name, or the pod's volume for an inline one (the folder under
    /// the pod's volumes).
    pub name: String,
    pub driver: String,
    pub handle: String,
    pub read_only: bool,
    pub fs_type: String,
    pub mount_flags: Vec<String>,
    pub access_mode: api::volume_capability::access_mode::Mode,
    pub volume_context: HashMap<String, String>,
    pub publish_context: HashMap<String, String>,
    pub stage_secrets: HashMap<String, String>,
    pub publish_secrets: HashMap<String, String>,
    /// Passed to a driver that offers VOLUME_MOUNT_GROUP.
    pub mount_group: Option<u32>,
    pub lifecycle: Lifecycle,
    /// The driver's CSIDriver object asks for NodePublishVolume on every sync of the pod
    /// (`requiresRepublish`), to hand it fresh tokens.
    pub requires_republish: bool,
    /// (audience, expirationSeconds) of the service account tokens the driver is given in
    /// the volume context (`tokenRequests`).
    pub token_requests: Vec<(String, i64)>,
    /// `volumeMode: Block`: published as a device (`super::block`), not mounted.
    pub block: bool,
}

/// `csi-<sha256(handle, driver, node)>`, the VolumeAttachment's name upstream derives.
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{handle}{driver}{node}")))
}

/// `csi-<sha256(pod UID + volume name)>`, the handle upstream gives a pod's inline volume.
pub fn inline_handle(pod_uid: &str, volume: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{pod_uid}{volume}")))
}

fn sha256_hex(s: &str) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, s.as_bytes()))
}

/// Where a driver stages a volume for the whole node.
pub fn staging_path(root_dir: &Path, driver: &str, handle: &str) -> PathBuf {
    root_dir
        .join("plugins/kubernetes.io/csi")
        .join(driver)
        .join(sha256_hex(handle))
        .join("globalmount")
}

/// Where a driver publishes a volume for one pod.
pub fn target_path(pod_dir: &Path, volume: &str) -> PathBuf {
    crate::volume::volume_dir(pod_dir, CSI_PLUGIN_DIR, volume).join("mount")
}

pub(super) fn write_vol_data(dir: &Path, data: &VolData) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("failed to create dir {}: {e}", dir.display()))?;
    let json = serde_json::to_vec(data).map_err(|e| e.to_string())?;
    let file = dir.join(VOL_DATA);
    std::fs::write(&file, json).map_err(|e| format!("failed to save volume info data: {e}"))
}

pub fn read_vol_data(dir: &Path) -> Option<VolData> {
    let raw = std::fs::read(dir.join(VOL_DATA)).ok()?;
    serde_json::from_slice(&raw).ok()
}

/// Why a step failed, for upstream's event wording.
#[derive(Debug)]
pub enum SetUpError {
    /// NodeStageVolume (upstream's MountDevice).
    MountDevice(String),
    SetUp(String),
}

/// A published volume.
#[derive(Debug)]
pub struct Published {
    pub target: PathBuf,
    /// The driver gave the volume to the fsGroup itself (VOLUME_MOUNT_GROUP), or it was
    /// published before: the kubelet need not walk it.
    pub group_done: bool,
}

/// Stages (once per node) and publishes (once per pod) `vol`. A volume already published is
/// left as it is. `node` names this node in vol_data.json.
pub async fn set_up(
    drivers: &Drivers,
    root_dir: &Path,
    pod_dir: &Path,
    node: &str,
    vol: &CsiVolume,
) -> Result<Published, SetUpError> {
    let data = VolData {
        spec_volume_id: vol.name.clone(),
        volume_handle: vol.handle.clone(),
        driver_name: vol.driver.clone(),
        node_name: node.to_string(),
        attachment_id: attachment_name(&vol.handle, &vol.driver, node),
        volume_lifecycle_mode: vol.lifecycle.as_str().to_string(),
    };
    if vol.block {
        // A device is no file system to give to a group.
        let link = super::block::set_up(drivers, root_dir, pod_dir, &data, vol).await?;
        return Ok(Published {
            target: link,
            group_done: true,
        });
    }
    let target = target_path(pod_dir, &vol.name);
    let republish = is_mount_point(&target);
    if republish && !vol.requires_republish {
        return Ok(Published {
            target,
            group_done: true,
        });
    }
    let (mut client, caps) = set_up_client(drivers, &vol.driver, "mounter.SetUpAt").await?;
    let call = |e: CsiError| e.to_string();
    let capability = capability(vol, caps.volume_mount_group);
    let staging = if caps.stage_unstage && vol.lifecycle == Lifecycle::Persistent {
        let staging = staging_path(root_dir, &vol.driver, &vol.handle);
        if !is_mount_point(&staging) {
            let parent = staging.parent().unwrap_or(&staging);
            write_vol_data(parent, &data).map_err(SetUpError::MountDevice)?;
            std::fs::create_dir_all(&staging).map_err(|e| {
                SetUpError::MountDevice(format!("mkdir {}: {e}", staging.display()))
            })?;
            client
                .node_stage_volume(stage_request(vol, &staging, &capability))
                .await
                .map_err(|e| SetUpError::MountDevice(call(e)))?;
        }
        staging.to_string_lossy().into_owned()
    } else {
        String::new()
    };
    let parent = target.parent().unwrap_or(&target);
    write_vol_data(parent, &data).map_err(SetUpError::SetUp)?;
    let req = publish_request(vol, staging, &target, capability);
    if let Err(e) = client.node_publish_volume(req).await {
        // Nothing of a failed publish may stay, unless the driver mounted after all.
        if !is_mount_point(&target) {
            let _ = std::fs::remove_dir(&target);
            let _ = std::fs::remove_file(parent.join(VOL_DATA));
            let _ = std::fs::remove_dir(parent);
        }
        return Err(SetUpError::SetUp(call(e)));
    }
    Ok(Published {
        target,
        group_done: republish || (caps.volume_mount_group && vol.mount_group.is_some()),
    })
}

/// A client of the registered driver `name` and what its Node service offers, for setting a
/// volume up; a failure reads as upstream's `step` words it.
pub(super) async fn set_up_client(
    drivers: &Drivers,
    name: &str,
    step: &str,
) -> Result<(Client, NodeCapabilities), SetUpError> {
    let Some(driver) = drivers.get(name) else {
        return Err(SetUpError::SetUp(format!(
            "kubernetes.io/csi: {step} failed to get CSI client: driver name {name} not found in the list of registered CSI drivers"
        )));
    };
    let set_up = |e: CsiError| SetUpError::SetUp(e.to_string());
    let mut client = Client::connect(&driver.endpoint).await.map_err(set_up)?;
    let caps = client.node_get_capabilities().await.map_err(set_up)?;
    Ok((client, caps))
}

/// A client of the registered driver `name`, for tearing a volume down.
pub(super) async fn tear_down_client(drivers: &Drivers, name: &str) -> Result<Client, String> {
    let Some(driver) = drivers.get(name) else {
        return Err(format!(
            "driver name {name} not found in the list of registered CSI drivers"
        ));
    };
    Client::connect(&driver.endpoint)
        .await
        .map_err(|e| e.to_string())
}

pub(super) fn stage_request(
    vol: &CsiVolume,
    staging: &Path,
    capability: &api::VolumeCapability,
) -> api::NodeStageVolumeRequest {
    api::NodeStageVolumeRequest {
        volume_id: vol.handle.clone(),
        publish_context: vol.publish_context.clone(),
        staging_target_path: staging.to_string_lossy().into_owned(),
        volume_capability: Some(capability.clone()),
        secrets: vol.stage_secrets.clone(),
        volume_context: vol.volume_context.clone(),
    }
}

/// `staging` is empty for a driver that does not stage.
pub(super) fn publish_request(
    vol: &CsiVolume,
    staging: String,
    target: &Path,
    capability: api::VolumeCapability,
) -> api::NodePublishVolumeRequest {
    api::NodePublishVolumeRequest {
        volume_id: vol.handle.clone(),
        publish_context: vol.publish_context.clone(),
        staging_target_path: staging,
        target_path: target.to_string_lossy().into_owned(),
        volume_capability: Some(capability),
        readonly: vol.read_only,
        secrets: vol.publish_secrets.clone(),
        volume_context: vol.volume_context.clone(),
    }
}

pub(super) fn capability(vol: &CsiVolume, mount_group: bool) -> api::VolumeCapability {
    use api::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
    let access_type = if vol.block {
        AccessType::Block(BlockVolume {})
    } else {
        AccessType::Mount(MountVolume {
            fs_type: vol.fs_type.clone(),
            mount_flags: vol.mount_flags.clone(),
            volume_mount_group: vol
                .mount_group
                .filter(|_| mount_group)
                .map(|g| g.to_string())
                .unwrap_or_default(),
        })
    };
    api::VolumeCapability {
        access_type: Some(access_type),
        access_mode: Some(AccessMode {
            mode: vol.access_mode as i32,
        }),
    }
}

/// The CSI volumes published in a pod's folder, by folder, as vol_data.json records them.
pub fn published(pod_dir: &Path) -> BTreeMap<PathBuf, VolData> {
    let dir = pod_dir.join("volumes").join(CSI_PLUGIN_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            read_vol_data(&path).map(|d| (path, d))
        })
        .collect()
}

/// Unpublishes every CSI volume of the pod in `pod_dir`, then unstages each one no other
/// pod under `pods_dir` still has published. The first failure is returned (and the pod's
/// folder stays for another try); the others are still attempted.
pub async fn tear_down_pod(
    drivers: &Drivers,
    root_dir: &Path,
    pods_dir: &Path,
    pod_dir: &Path,
) -> Result<(), String> {
    let mut first_error = None;
    for (dir, data) in published(pod_dir) {
        if let Err(e) = unpublish(drivers, root_dir, pods_dir, &dir, &data).await {
            first_error.get_or_insert(e);
        }
    }
    if let Err(e) = super::block::tear_down_pod(drivers, root_dir, pod_dir).await {
        first_error.get_or_insert(e);
    }
    first_error.map_or(Ok(()), Err)
}

async fn unpublish(
    drivers: &Drivers,
    root_dir: &Path,
    pods_dir: &Path,
    dir: &Path,
    data: &VolData,
) -> Result<(), String> {
    let target = dir.join("mount");
    let fail = |e: String| {
        format!(
            "UnmountVolume.TearDown failed for volume {:?} (volume handle {:?}): {e}",
            data.spec_volume_id, data.volume_handle
        )
    };
    let mut client = tear_down_client(drivers, &data.driver_name)
        .await
        .map_err(fail)?;
    client
        .node_unpublish_volume(&data.volume_handle, &target.to_string_lossy())
        .await
        .map_err(|e| fail(e.to_string()))?;
    if is_mount_point(&target) {
        return Err(fail(format!(
            "{} is still mounted after NodeUnpublishVolume",
            target.display()
        )));
    }
    let _ = std::fs::remove_dir(&target);
    let _ = std::fs::remove_file(dir.join(VOL_DATA));
    let _ = std::fs::remove_dir(dir);
    let staging = staging_path(root_dir, &data.driver_name, &data.volume_handle);
    let parent = staging.parent().map(Path::to_path_buf).unwrap_or_default();
    if !parent.join(VOL_DATA).exists() || still_published(pods_dir, data) {
        return Ok(());
    }
    client
        .node_unstage_volume(&data.volume_handle, &staging.to_string_lossy())
        .await
        .map_err(|e| {
            format!(
                "UnmountDevice failed for volume {:?}: {e}",
                data.spec_volume_id
            )
        })?;
    if !is_mount_point(&staging) {
        let _ = std::fs::remove_dir(&staging);
        let _ = std::fs::remove_file(parent.join(VOL_DATA));
        let _ = std::fs::remove_dir(&parent);
    }
    Ok(())
}

/// The CSI volumes staged or published on this node, as the Node's `volumesInUse` names them
/// (`kubernetes.io/csi/<driver>^<handle>`), sorted: the attach/detach controller does not
/// detach a volume the node reports in use. Read from the vol_data.json files, which are
/// written before a volume is staged or published and removed after it is undone. Inline
/// volumes are never attached, so upstream leaves them out.
pub fn in_use(root_dir: &Path) -> Vec<String> {
    let mut found = std::collections::BTreeSet::new();
    let mut add = |d: VolData| {
        if d.volume_lifecycle_mode == Lifecycle::Ephemeral.as_str() {
            return;
        }
        found.insert(format!(
            "kubernetes.io/csi/{}^{}",
            d.driver_name, d.volume_handle
        ));
    };
    let staged = root_dir.join("plugins/kubernetes.io/csi");
    for driver in read_dirs(&staged) {
        read_dirs(&driver)
            .filter_map(|v| read_vol_data(&v))
            .for_each(&mut add);
    }
    for pod in read_dirs(&root_dir.join("pods")) {
        published(&pod).into_values().for_each(&mut add);
    }
    super::block::in_use(root_dir).for_each(&mut add);
    found.into_iter().collect()
}

fn read_dirs(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
}

/// Whether any pod still has the same driver's same volume published.
fn still_published(pods_dir: &Path, data: &VolData) -> bool {
    let Ok(pods) = std::fs::read_dir(pods_dir) else {
        return false;
    };
    pods.flatten().any(|pod| {
        published(&pod.path())
            .values()
            .any(|d| d.driver_name == data.driver_name && d.volume_handle == data.volume_handle)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_follow_upstream() {
        // sha256("vol-1" + "hostpath.csi.k8s.io" + "node-1")
        let name = attachment_name("vol-1", "hostpath.csi.k8s.io", "node-1");
        assert!(name.starts_with("csi-") && name.len() == 4 + 64, "{name}");
        let staging = staging_path(Path::new("/var/lib/kubelet"), "d.csi", "h");
        assert_eq!(
            staging,
            Path::new(
                "/var/lib/kubelet/plugins/kubernetes.io/csi/d.csi/aaa9402664f1a41f40ebbc52c9993eb66aeb366602958fdfaa283b71e64db123/globalmount"
            )
        );
        assert_eq!(
            target_path(Path::new("/p"), "pv-1"),
            Path::new("/p/volumes/kubernetes.io~csi/pv-1/mount")
        );
    }

    #[test]
    fn volumes_in_use_are_the_staged_and_published_ones() {
        let root = tempfile::tempdir().unwrap();
        let data = |handle: &str| VolData {
            volume_handle: handle.into(),
            driver_name: "d.csi".into(),
            ..Default::default()
        };
        let staging = staging_path(root.path(), "d.csi", "h-1");
        write_vol_data(staging.parent().unwrap(), &data("h-1")).unwrap();
        let target = target_path(&root.path().join("pods/u1"), "pv-2");
        write_vol_data(target.parent().unwrap(), &data("h-2")).unwrap();
        let again = target_path(&root.path().join("pods/u2"), "pv-2");
        write_vol_data(again.parent().unwrap(), &data("h-2")).unwrap();
        let inline = target_path(&root.path().join("pods/u2"), "scratch");
        let ephemeral = VolData {
            volume_lifecycle_mode: "Ephemeral".into(),
            ..data("csi-abc")
        };
        write_vol_data(inline.parent().unwrap(), &ephemeral).unwrap();
        assert_eq!(
            in_use(root.path()),
            ["kubernetes.io/csi/d.csi^h-1", "kubernetes.io/csi/d.csi^h-2"]
        );
        assert!(in_use(&root.path().join("missing")).is_empty());
    }

    #[test]
    fn vol_data_round_trips_with_upstreams_keys() {
        let dir = tempfile::tempdir().unwrap();
        let data = VolData {
            spec_volume_id: "pv-1".into(),
            volume_handle: "h-1".into(),
            driver_name: "d.csi".into(),
            node_name: "n1".into(),
            attachment_id: "csi-x".into(),
            volume_lifecycle_mode: "Persistent".into(),
        };
        write_vol_data(dir.path(), &data).unwrap();
        let raw = std::fs::read_to_string(dir.path().join(VOL_DATA)).unwrap();
        assert!(
            raw.contains(r#""specVolumeID":"pv-1""#) && raw.contains(r#""volumeHandle":"h-1""#),
            "{raw}"
        );
        assert_eq!(read_vol_data(dir.path()), Some(data));
        // What upstream's kubelet wrote (fewer keys) reads too.
        std::fs::write(
            dir.path().join(VOL_DATA),
            r#"{"specVolumeID":"pv-2","volumeHandle":"h","driverName":"d","nodeName":"n"}"#,
        )
        .unwrap();
        assert_eq!(read_vol_data(dir.path()).unwrap().spec_volume_id, "pv-2");
    }
}
