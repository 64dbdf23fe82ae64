//! `cpu_manager_state` in the kubelet's root dir, in upstream's v2 shape: the policy that wrote
//! it, the shared pool (`defaultCpuSet`) and each container's exclusive CPUs, under upstream's
//! checksum, so either kubelet reads what the other wrote.
//!
//! The checksum is FNV-1a (32 bit) over go-spew's `%#v` rendering of the checkpoint struct
//! with its checksum at 0 (type names in parentheses, none inside maps, map keys sorted).
//! `render` writes those bytes for this one shape; upstream's own file for the `none` policy,
//! `{"policyName":"none","defaultCpuSet":"","checksum":1353318690}`, is a test below.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::cm::checkpoint_file::CheckpointError;
use crate::cm::checkpoint_file::{FNV_OFFSET, fnv1a, read_checked, write_json};

pub const FILE_NAME: &str = "cpu_manager_state";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    #[serde(rename = "policyName")]
    pub policy_name: String,
    #[serde(rename = "defaultCpuSet")]
    pub default_cpu_set: String,
    /// Pod uid → container name → CPU list. None only when the file said `null`, which
    /// renders differently from an empty map.
    #[serde(default = "empty_entries", skip_serializing_if = "entries_empty")]
    pub entries: Option<BTreeMap<String, BTreeMap<String, String>>>,
    #[serde(default)]
    pub checksum: u64,
}

fn empty_entries() -> Option<BTreeMap<String, BTreeMap<String, String>>> {
    Some(BTreeMap::new())
}

fn entries_empty(e: &Option<BTreeMap<String, BTreeMap<String, String>>>) -> bool {
    e.as_ref().is_none_or(BTreeMap::is_empty)
}

pub fn path_in(root_dir: &Path) -> PathBuf {
    root_dir.join(FILE_NAME)
}

/// go-spew's `%#v` of upstream's `*state.CPUManagerCheckpoint` with checksum 0.
pub fn render(cp: &Checkpoint) -> String {
    let mut out = String::from("(*state.CPUManagerCheckpoint){PolicyName:(string)");
    out.push_str(&cp.policy_name);
    out.push_str(" DefaultCPUSet:(string)");
    out.push_str(&cp.default_cpu_set);
    out.push_str(" Entries:(map[string]map[string]string)");
    match &cp.entries {
        None => out.push_str("<nil>"),
        Some(pods) => {
            out.push_str("map[");
            for (i, (pod, containers)) in pods.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(pod);
                out.push_str(":map[");
                for (j, (name, cpus)) in containers.iter().enumerate() {
                    if j > 0 {
                        out.push(' ');
                    }
                    out.push_str(name);
                    out.push(':');
                    out.push_str(cpus);
                }
                out.push(']');
            }
            out.push(']');
        }
    }
    out.push_str(" Checksum:(checksum.Checksum)0}");
    out
}

pub fn checksum(cp: &Checkpoint) -> u64 {
    u64::from(fnv1a(FNV_OFFSET, render(cp).as_bytes()))
}

/// The checkpoint on disk; None when there is none. A checksum of 0 is accepted, as upstream
/// does for files of its old backend.
pub fn read(path: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    read_checked(path, |cp: &Checkpoint| (cp.checksum, checksum(cp)))
}

/// Writes through a temporary file and a rename, so a crash leaves the old file or the new.
pub fn write(path: &Path, cp: &Checkpoint) -> Result<(), CheckpointError> {
    let mut cp = cp.clone();
    // Upstream writes from a made map, and an empty one is left out of the JSON: what is
    // read back renders as `map[]`, so the checksum is taken over that.
    cp.entries.get_or_insert_with(BTreeMap::new);
    cp.checksum = checksum(&cp);
    write_json(path, &cp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_none_policy_file_verifies_and_ours_is_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        let upstream = r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#;
        std::fs::write(&path, upstream).unwrap();
        let cp = read(&path).unwrap().unwrap();
        assert_eq!(cp.policy_name, "none");
        write(&path, &cp).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), upstream);
    }

    #[test]
    fn entries_round_trip_and_a_changed_byte_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        let mut entries = BTreeMap::new();
        entries.insert(
            "uid-1".to_string(),
            BTreeMap::from([("app".to_string(), "1".to_string())]),
        );
        let cp = Checkpoint {
            policy_name: "static".into(),
            default_cpu_set: "0".into(),
            entries: Some(entries),
            checksum: 0,
        };
        write(&path, &cp).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with(
                r#"{"policyName":"static","defaultCpuSet":"0","entries":{"uid-1":{"app":"1"}},"checksum":"#
            ),
            "{text}"
        );
        let back = read(&path).unwrap().unwrap();
        assert_eq!(back.entries, cp.entries);
        std::fs::write(&path, text.replace("\"app\":\"1\"", "\"app\":\"0\"")).unwrap();
        assert!(matches!(read(&path), Err(CheckpointError::Corrupt)));
        assert!(read(&dir.path().join("missing")).unwrap().is_none());
    }

    #[test]
    fn the_rendering_is_go_spews() {
        let cp = Checkpoint {
            policy_name: "static".into(),
            default_cpu_set: "0,3".into(),
            entries: Some(BTreeMap::from([
                (
                    "b".to_string(),
                    BTreeMap::from([("c".to_string(), "2".to_string())]),
                ),
                (
                    "a".to_string(),
                    BTreeMap::from([
                        ("y".to_string(), "1".to_string()),
                        ("x".to_string(), "4-5".to_string()),
                    ]),
                ),
            ])),
            checksum: 99,
        };
        assert_eq!(
            render(&cp),
            "(*state.CPUManagerCheckpoint){PolicyName:(string)static DefaultCPUSet:(string)0,3 Entries:(map[string]map[string]string)map[a:map[x:4-5 y:1] b:map[c:2]] Checksum:(checksum.Checksum)0}"
        );
    }
}
