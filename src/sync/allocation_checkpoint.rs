//! The pods' allocated resources on disk, so that a kubelet restart does not take a resize
//! that was Deferred or Infeasible for granted: without it a restarted kubelet would admit the
//! pod with whatever its spec asks for then, and apply it over the room other pods hold.
//! Upstream keeps the same fact in `<root-dir>/allocated_pods_state`; ours has its own file and
//! format (`kubelet-rs_allocated_pods.json`), so a node switched back to upstream's kubelet
//! finds no checkpoint of a foreign shape under its name.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ResourceRequirements;
use serde::{Deserialize, Serialize};

pub const FILE_NAME: &str = "kubelet-rs_allocated_pods.json";

/// Resources by container name, as `allocation` keeps them per pod.
pub type PodResources = BTreeMap<String, Option<ResourceRequirements>>;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a checkpoint of allocated resources: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    /// Pod UID → container → resources.
    pods: BTreeMap<String, PodResources>,
}

pub fn path_in(root_dir: &Path) -> PathBuf {
    root_dir.join(FILE_NAME)
}

/// The checkpoint's pods; none when there is no file yet.
pub fn load(path: &Path) -> Result<BTreeMap<String, PodResources>, CheckpointError> {
    let read = crate::cm::checkpoint_file::read_if_present(path).map_err(|source| {
        CheckpointError::Read {
            path: path.to_path_buf(),
            source,
        }
    })?;
    let Some(text) = read else {
        return Ok(BTreeMap::new());
    };
    serde_json::from_slice::<OnDisk>(&text)
        .map(|d| d.pods)
        .map_err(|source| CheckpointError::Parse {
            path: path.to_path_buf(),
            source,
        })
}

/// Replaces the checkpoint with `pods`: written beside it and renamed over it, so a crash in
/// the middle leaves the old one whole. Not synced to the disk: it is written from the sync
/// loop, and a power loss that damages it only costs what a missing file costs (see `load`'s
/// callers).
pub fn save(path: &Path, pods: &BTreeMap<&str, &PodResources>) -> Result<(), CheckpointError> {
    let err = |source| CheckpointError::Write {
        path: path.to_path_buf(),
        source,
    };
    let on_disk: BTreeMap<String, PodResources> = pods
        .iter()
        .map(|(uid, r)| (uid.to_string(), (*r).clone()))
        .collect();
    let body =
        serde_json::to_vec(&OnDisk { pods: on_disk }).map_err(|e| err(std::io::Error::other(e)))?;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.write_all(&body).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn saved_pods_load_again_and_no_file_is_no_pods() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        assert!(load(&path).unwrap().is_empty());
        let limits = BTreeMap::from([("memory".to_string(), Quantity("100Mi".into()))]);
        let resources: PodResources = BTreeMap::from([
            (
                "main".to_string(),
                Some(ResourceRequirements {
                    limits: Some(limits),
                    ..Default::default()
                }),
            ),
            ("side".to_string(), None),
        ]);
        save(&path, &BTreeMap::from([("u1", &resources)])).unwrap();
        let back = load(&path).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back["u1"], resources);
        assert!(!path.with_extension("json.tmp").exists());
    }

    #[test]
    fn a_damaged_file_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        std::fs::write(&path, b"{\"pods\": [").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains(FILE_NAME), "{e}");
    }
}
