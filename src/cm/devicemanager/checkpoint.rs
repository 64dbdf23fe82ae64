//! `kubelet_internal_checkpoint` in the device-plugins folder, in upstream's shape: which
//! devices each container holds (with the plugin's Allocate answer) and each resource's healthy
//! devices, under a checksum upstream verifies, so either kubelet reads what the other wrote.
//!
//! Upstream's checksum is FNV-1a (32 bit) over go-spew's `%#v` rendering of the `Data` part
//! (type names in parentheses, maps in key order, nil slices and maps as `<nil>`); `render`
//! writes those bytes for this one shape. A nil and an empty list render differently, so the
//! on-disk form keeps which one the JSON had.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cm::checkpoint_file::{FNV_OFFSET, fnv1a, read_if_present, replace_synced};

pub const FILE_NAME: &str = "kubelet_internal_checkpoint";

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a device manager checkpoint: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("checkpoint is corrupted: {path} fails its checksum")]
    Corrupt { path: PathBuf },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Go's `[]byte` in JSON: base64, or null for nil.
mod bytes_b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| {
            base64::engine::general_purpose::STANDARD
                .decode(t)
                .map_err(serde::de::Error::custom)
        })
        .transpose()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Entry {
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    pub container_name: String,
    pub resource_name: String,
    /// NUMA node → device IDs (-1 for devices without topology).
    #[serde(rename = "DeviceIDs")]
    pub device_ids: Option<BTreeMap<i64, Option<Vec<String>>>>,
    /// The plugin's ContainerAllocateResponse, protobuf-encoded.
    #[serde(with = "bytes_b64", default)]
    pub alloc_resp: Option<Vec<u8>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Data {
    pub pod_device_entries: Option<Vec<Entry>>,
    pub registered_devices: Option<BTreeMap<String, Option<Vec<String>>>>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct OnDisk {
    data: Data,
    checksum: u64,
    /// The boot the checkpoint was written in; outside the checksum, as upstream keeps it.
    #[serde(rename = "BootID", default, skip_serializing_if = "String::is_empty")]
    boot_id: String,
}

pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

fn push_list(out: &mut String, list: &Option<Vec<String>>) {
    match list {
        None => out.push_str("<nil>"),
        Some(items) => {
            out.push('[');
            out.push_str(&items.join(" "));
            out.push(']');
        }
    }
}

/// go-spew's `%#v` of upstream's `checkpointData` holding `data`.
pub fn render(data: &Data) -> String {
    let mut out = String::from("(checkpoint.checkpointData){PodDeviceEntries:");
    out.push_str("([]checkpoint.PodDevicesEntry)");
    match &data.pod_device_entries {
        None => out.push_str("<nil>"),
        Some(entries) => {
            out.push('[');
            for (i, e) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str("{PodUID:(string)");
                out.push_str(&e.pod_uid);
                out.push_str(" ContainerName:(string)");
                out.push_str(&e.container_name);
                out.push_str(" ResourceName:(string)");
                out.push_str(&e.resource_name);
                out.push_str(" DeviceIDs:(checkpoint.DevicesPerNUMA)");
                match &e.device_ids {
                    None => out.push_str("<nil>"),
                    Some(m) => {
                        out.push_str("map[");
                        for (j, (node, ids)) in m.iter().enumerate() {
                            if j > 0 {
                                out.push(' ');
                            }
                            out.push_str(&node.to_string());
                            out.push(':');
                            push_list(&mut out, ids);
                        }
                        out.push(']');
                    }
                }
                out.push_str(" AllocResp:([]uint8)");
                match &e.alloc_resp {
                    None => out.push_str("<nil>"),
                    Some(b) => {
                        out.push('[');
                        let bytes: Vec<String> = b.iter().map(u8::to_string).collect();
                        out.push_str(&bytes.join(" "));
                        out.push(']');
                    }
                }
                out.push('}');
            }
            out.push(']');
        }
    }
    out.push_str(" RegisteredDevices:(map[string][]string)");
    match &data.registered_devices {
        None => out.push_str("<nil>"),
        Some(m) => {
            out.push_str("map[");
            for (j, (name, ids)) in m.iter().enumerate() {
                if j > 0 {
                    out.push(' ');
                }
                out.push_str(name);
                out.push(':');
                push_list(&mut out, ids);
            }
            out.push(']');
        }
    }
    out.push('}');
    out
}

pub fn checksum(data: &Data) -> u64 {
    let rendered = render(data);
    u64::from(fnv1a(FNV_OFFSET, rendered.as_bytes()))
}

/// The checkpoint's data and the boot it was written in; None when there is no file.
pub fn load(path: &Path) -> Result<Option<(Data, String)>, CheckpointError> {
    let read = read_if_present(path).map_err(|source| CheckpointError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let Some(text) = read else {
        return Ok(None);
    };
    let on_disk: OnDisk =
        serde_json::from_slice(&text).map_err(|source| CheckpointError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
    if checksum(&on_disk.data) != on_disk.checksum {
        return Err(CheckpointError::Corrupt {
            path: path.to_path_buf(),
        });
    }
    Ok(Some((on_disk.data, on_disk.boot_id)))
}

/// Replaces the checkpoint: written beside it and renamed over it.
pub fn save(path: &Path, data: Data, boot_id: &str) -> Result<(), CheckpointError> {
    let err = |source| CheckpointError::Write {
        path: path.to_path_buf(),
        source,
    };
    let on_disk = OnDisk {
        checksum: checksum(&data),
        data,
        boot_id: boot_id.to_string(),
    };
    let body = serde_json::to_vec(&on_disk).map_err(|e| err(std::io::Error::other(e)))?;
    replace_synced(path, &body).map_err(err)
}

/// Encodes an Allocate answer as the checkpoint keeps it.
pub fn encode_response(r: &super::api::ContainerAllocateResponse) -> Vec<u8> {
    prost::Message::encode_to_vec(r)
}

pub fn decode_response(bytes: &[u8]) -> Option<super::api::ContainerAllocateResponse> {
    prost::Message::decode(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Data {
        Data {
            pod_device_entries: Some(vec![Entry {
                pod_uid: "uid-1".into(),
                container_name: "c".into(),
                resource_name: "example.com/dev".into(),
                device_ids: Some(BTreeMap::from([(
                    -1,
                    Some(vec!["d1".to_string(), "d2".to_string()]),
                )])),
                alloc_resp: Some(vec![10, 3]),
            }]),
            registered_devices: Some(BTreeMap::from([(
                "example.com/dev".to_string(),
                Some(vec!["d1".to_string(), "d2".to_string()]),
            )])),
        }
    }

    #[test]
    fn rendering_is_go_spews() {
        assert_eq!(
            render(&sample()),
            "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)uid-1 \
             ContainerName:(string)c ResourceName:(string)example.com/dev DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:[d1 d2]] \
             AllocResp:([]uint8)[10 3]}] RegisteredDevices:(map[string][]string)map[example.com/dev:[d1 d2]]}"
        );
        assert_eq!(
            render(&Data::default()),
            "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)<nil> \
             RegisteredDevices:(map[string][]string)<nil>}"
        );
    }

    #[test]
    fn saved_data_loads_again_and_a_changed_byte_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        assert!(load(&path).unwrap().is_none());
        save(&path, sample(), "boot-1").unwrap();
        let (data, boot) = load(&path).unwrap().unwrap();
        assert_eq!((data, boot.as_str()), (sample(), "boot-1"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"PodUID\":\"uid-1\""), "{text}");
        assert!(
            text.contains("\"DeviceIDs\":{\"-1\":[\"d1\",\"d2\"]}"),
            "{text}"
        );
        assert!(text.contains("\"AllocResp\":\"CgM=\""), "{text}");
        std::fs::write(&path, text.replace("d2", "d3")).unwrap();
        assert!(matches!(load(&path), Err(CheckpointError::Corrupt { .. })));
        std::fs::write(&path, "{\"Data\": [").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains(FILE_NAME), "{e}");
    }

    #[test]
    fn null_and_empty_lists_keep_their_own_checksums() {
        let empty = Data {
            pod_device_entries: Some(Vec::new()),
            ..Default::default()
        };
        assert_ne!(checksum(&empty), checksum(&Data::default()));
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        save(&path, empty.clone(), "").unwrap();
        assert_eq!(load(&path).unwrap().unwrap().0, empty);
    }
}
