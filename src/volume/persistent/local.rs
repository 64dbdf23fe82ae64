//! `local` PersistentVolumes: a folder of this node, bind-mounted into the pod's folder (so the
//! pod's mounts all live under it, and a volume used by two pods is two mounts), given to the
//! pod's fsGroup unless read-only, as upstream's local plugin does. The volume's node affinity
//! must match this node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::volume::empty_dir::is_mount_point;
use crate::volume::ownership::set_volume_ownership;

/// The plugin's folder under `<pod>/volumes/`, upstream's name.
pub const LOCAL_VOLUME: &str = "kubernetes.io~local-volume";

/// Upstream's check before any mount of a PersistentVolume: its required node affinity, if
/// any, must match the node's labels and name.
pub fn check_node_affinity(
    pv: &PersistentVolume,
    labels: &BTreeMap<String, String>,
    node_name: &str,
) -> Result<(), String> {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return Ok(());
    };
    if crate::pod::node_selector::matches(required, labels, Some(node_name)) {
        Ok(())
    } else {
        Err("no matching NodeSelectorTerms".to_string())
    }
}

/// How to set one local volume up for a pod.
#[derive(Clone, Debug)]
pub struct LocalMount {
    pub pv: String,
    pub path: String,
    pub read_only: bool,
    pub fs_group: Option<u32>,
    pub on_root_mismatch: bool,
    /// `volumeMode: Block`: the path is a device, linked for the containers, not mounted.
    pub block: bool,
}

/// Bind-mounts the volume into `pod_dir` (once: a mounted volume is left as it is) and gives
/// it to the fsGroup. Blocking.
pub fn set_up(pod_dir: &Path, m: &LocalMount) -> Result<PathBuf, String> {
    if m.path.is_empty() {
        return Err(format!("LocalVolume volume {:?} path is empty", m.pv));
    }
    if Path::new(&m.path)
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(format!("invalid path: {} must not contain '..'", m.path));
    }
    if m.block {
        return map_device(pod_dir, m);
    }
    let target = crate::volume::volume_dir(pod_dir, LOCAL_VOLUME, &m.pv);
    if is_mount_point(&target) {
        return Ok(target);
    }
    if !Path::new(&m.path).exists() {
        return Err(format!("path {:?} does not exist", m.path));
    }
    std::fs::create_dir_all(&target).map_err(|e| format!("mkdir {}: {e}", target.display()))?;
    crate::sys::bind_mount(Path::new(&m.path), &target, m.read_only).map_err(|e| {
        let _ = std::fs::remove_dir(&target);
        format!("mount of {} on {} failed: {e}", m.path, target.display())
    })?;
    if !m.read_only
        && let Some(gid) = m.fs_group
    {
        set_volume_ownership(&target, gid, false, m.on_root_mismatch)
            .map_err(|e| format!("setting ownership of {}: {e}", target.display()))?;
    }
    Ok(target)
}

/// A Block volume: its device, checked to be one, behind the link
/// `<pod>/volumeDevices/kubernetes.io~local-volume/<pv>` that the containers' device comes
/// from, as upstream's layout has it. Blocking.
fn map_device(pod_dir: &Path, m: &LocalMount) -> Result<PathBuf, String> {
    use std::os::unix::fs::FileTypeExt;
    let device = Path::new(&m.path);
    match std::fs::metadata(device) {
        Ok(meta) if meta.file_type().is_block_device() => {}
        Ok(_) => return Err(format!("{} is not a block device", m.path)),
        Err(e) => return Err(format!("path {:?} does not exist: {e}", m.path)),
    }
    let link = pod_dir
        .join(crate::volume::csi::block::POD_DEVICES_DIR)
        .join(LOCAL_VOLUME)
        .join(&m.pv);
    let fail = |e: std::io::Error| format!("failed to map the device to {}: {e}", link.display());
    if std::fs::read_link(&link).is_ok_and(|to| to == device) {
        return Ok(link);
    }
    if let Some(dir) = link.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(device, &link).map_err(fail)?;
    Ok(link)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeSpec,
        VolumeNodeAffinity,
    };

    #[test]
    fn the_volume_must_belong_to_this_node() {
        let mut pv = PersistentVolume {
            spec: Some(PersistentVolumeSpec::default()),
            ..Default::default()
        };
        let labels: BTreeMap<String, String> =
            [("kubernetes.io/hostname".to_string(), "n1".to_string())].into();
        assert!(check_node_affinity(&pv, &labels, "n1").is_ok());
        pv.spec.as_mut().unwrap().node_affinity = Some(VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: "kubernetes.io/hostname".into(),
                        operator: "In".into(),
                        values: Some(vec!["n2".into()]),
                    }]),
                    match_fields: None,
                }],
            }),
        });
        assert_eq!(
            check_node_affinity(&pv, &labels, "n1").unwrap_err(),
            "no matching NodeSelectorTerms"
        );
    }

    #[test]
    fn bad_paths_are_refused_before_any_mount() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = LocalMount {
            pv: "pv-1".into(),
            path: String::new(),
            read_only: false,
            fs_group: None,
            on_root_mismatch: false,
            block: false,
        };
        assert!(
            set_up(dir.path(), &m)
                .unwrap_err()
                .contains("path is empty")
        );
        m.path = "/srv/../etc".into();
        assert!(set_up(dir.path(), &m).unwrap_err().contains("'..'"));
        m.path = dir.path().join("missing").to_string_lossy().into_owned();
        assert!(
            set_up(dir.path(), &m)
                .unwrap_err()
                .contains("does not exist")
        );
        assert!(!dir.path().join("volumes").exists());
    }

    #[test]
    fn a_block_volume_must_be_a_device() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = LocalMount {
            pv: "pv-1".into(),
            path: "/dev/null".into(),
            read_only: false,
            fs_group: None,
            on_root_mismatch: false,
            block: true,
        };
        let err = set_up(dir.path(), &m).unwrap_err();
        assert_eq!(err, "/dev/null is not a block device");
        m.path = dir.path().join("missing").to_string_lossy().into_owned();
        assert!(
            set_up(dir.path(), &m)
                .unwrap_err()
                .contains("does not exist")
        );
        assert!(!dir.path().join("volumeDevices").exists());
    }
}
