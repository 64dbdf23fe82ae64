//! Volumes whose contents come from the API server: secret and configMap, also as sources of
//! a projected volume (with downwardAPI items). The objects are fetched (the Node authorizer
//! lets a kubelet read those of its own pods) and turned into files; volumes.rs writes them.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, KeyToPath, Pod, Secret, Volume};
use kube::api::Api;

use super::volumes::{Fetched, FileEntry, VolumeError};

const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Upstream's default file mode for these volumes (0644).
const DEFAULT_MODE: i32 = 0o644;

pub fn is_api_backed(v: &Volume) -> bool {
    v.secret.is_some() || v.config_map.is_some() || v.projected.is_some()
}

fn missing(volume: &str, what: &str, name: &str) -> VolumeError {
    VolumeError::Source {
        volume: volume.to_string(),
        reason: format!("{what} \"{name}\" not found"),
    }
}

async fn get<K>(api: Api<K>, name: &str, volume: &str) -> Result<Option<K>, VolumeError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match tokio::time::timeout(FETCH_TIMEOUT, api.get_opt(name)).await {
        Ok(Ok(found)) => Ok(found),
        Ok(Err(e)) => Err(VolumeError::Source {
            volume: volume.to_string(),
            reason: e.to_string(),
        }),
        Err(_) => Err(VolumeError::Source {
            volume: volume.to_string(),
            reason: format!("fetching {name} timed out"),
        }),
    }
}

/// Applies `items` (key → path, mode) to the key/value pairs of an object, like upstream:
/// without items every key is a file; with items only those, and a missing key is an error
/// unless the source is optional.
fn project(
    volume: &str,
    data: HashMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: i32,
    optional: bool,
) -> Result<Vec<FileEntry>, VolumeError> {
    let mode = |m: Option<i32>| (m.unwrap_or(default_mode) & 0o777) as u32;
    let Some(items) = items.filter(|i| !i.is_empty()) else {
        let mut files: Vec<FileEntry> = data
            .into_iter()
            .map(|(k, v)| FileEntry {
                path: k,
                data: v,
                mode: mode(None),
            })
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        return Ok(files);
    };
    let mut files = Vec::new();
    for item in items {
        match data.get(&item.key) {
            Some(v) => files.push(FileEntry {
                path: item.path.clone(),
                data: v.clone(),
                mode: mode(item.mode),
            }),
            None if optional => {}
            None => {
                return Err(VolumeError::Source {
                    volume: volume.to_string(),
                    reason: format!("key {:?} not found", item.key),
                });
            }
        }
    }
    Ok(files)
}

/// Where a volume's files come from: which object, which keys, how.
struct SourceRef<'a> {
    volume: &'a str,
    name: &'a str,
    items: Option<&'a Vec<KeyToPath>>,
    default_mode: i32,
    optional: bool,
}

/// Fetches one object and projects its key/value pairs; a missing object is an error unless
/// the source is optional.
async fn object_files<K>(
    api: Api<K>,
    what: &str,
    src: SourceRef<'_>,
    to_data: impl FnOnce(K) -> HashMap<String, Vec<u8>>,
) -> Result<Vec<FileEntry>, VolumeError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match get(api, src.name, src.volume).await? {
        Some(obj) => project(
            src.volume,
            to_data(obj),
            src.items,
            src.default_mode,
            src.optional,
        ),
        None if src.optional => Ok(vec![]),
        None => Err(missing(src.volume, what, src.name)),
    }
}

async fn secret_files(
    client: &kube::Client,
    ns: &str,
    src: SourceRef<'_>,
) -> Result<Vec<FileEntry>, VolumeError> {
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    object_files(api, "secret", src, |secret| {
        let mut data: HashMap<String, Vec<u8>> = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        for (k, v) in secret.string_data.unwrap_or_default() {
            data.insert(k, v.into_bytes());
        }
        data
    })
    .await
}

async fn config_map_files(
    client: &kube::Client,
    ns: &str,
    src: SourceRef<'_>,
) -> Result<Vec<FileEntry>, VolumeError> {
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    object_files(api, "configmap", src, |cm| {
        let mut data: HashMap<String, Vec<u8>> = cm
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        for (k, v) in cm.binary_data.unwrap_or_default() {
            data.insert(k, v.0);
        }
        data
    })
    .await
}

/// Fetches the contents of every secret/configMap/projected volume of the pod.
pub async fn fetch(client: Option<&kube::Client>, pod: &Pod) -> Result<Fetched, VolumeError> {
    let mut out = Fetched::new();
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    for v in volumes.into_iter().flatten().filter(|v| is_api_backed(v)) {
        let Some(client) = client else {
            return Err(VolumeError::Source {
                volume: v.name.clone(),
                reason: "needs an API server (run with --kubeconfig)".into(),
            });
        };
        let files = if let Some(s) = &v.secret {
            let src = SourceRef {
                volume: &v.name,
                name: s.secret_name.as_deref().unwrap_or_default(),
                items: s.items.as_ref(),
                default_mode: s.default_mode.unwrap_or(DEFAULT_MODE),
                optional: s.optional.unwrap_or(false),
            };
            secret_files(client, ns, src).await?
        } else if let Some(c) = &v.config_map {
            let src = SourceRef {
                volume: &v.name,
                name: &c.name,
                items: c.items.as_ref(),
                default_mode: c.default_mode.unwrap_or(DEFAULT_MODE),
                optional: c.optional.unwrap_or(false),
            };
            config_map_files(client, ns, src).await?
        } else {
            projected_files(client, pod, v).await?
        };
        out.insert(v.name.clone(), files);
    }
    Ok(out)
}

async fn projected_files(
    client: &kube::Client,
    pod: &Pod,
    v: &Volume,
) -> Result<Vec<FileEntry>, VolumeError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let Some(p) = &v.projected else {
        return Ok(vec![]);
    };
    let mode = p.default_mode.unwrap_or(DEFAULT_MODE);
    let mut files = Vec::new();
    for src in p.sources.iter().flatten() {
        if let Some(s) = &src.secret {
            let source = SourceRef {
                volume: &v.name,
                name: &s.name,
                items: s.items.as_ref(),
                default_mode: mode,
                optional: s.optional.unwrap_or(false),
            };
            files.extend(secret_files(client, ns, source).await?);
        } else if let Some(c) = &src.config_map {
            let source = SourceRef {
                volume: &v.name,
                name: &c.name,
                items: c.items.as_ref(),
                default_mode: mode,
                optional: c.optional.unwrap_or(false),
            };
            files.extend(config_map_files(client, ns, source).await?);
        } else if let Some(d) = &src.downward_api {
            for item in d.items.iter().flatten() {
                let Some(f) = &item.field_ref else {
                    return Err(VolumeError::Source {
                        volume: v.name.clone(),
                        reason: "downwardAPI resourceFieldRef items are not supported yet".into(),
                    });
                };
                let value = super::env::pod_field(pod, &f.field_path).ok_or_else(|| {
                    VolumeError::Source {
                        volume: v.name.clone(),
                        reason: format!("unsupported fieldPath {:?}", f.field_path),
                    }
                })?;
                files.push(FileEntry {
                    path: item.path.clone(),
                    data: value.into_bytes(),
                    mode: (item.mode.unwrap_or(mode) & 0o777) as u32,
                });
            }
        } else {
            return Err(VolumeError::Source {
                volume: v.name.clone(),
                reason:
                    "serviceAccountToken and clusterTrustBundle projections are not supported yet"
                        .into(),
            });
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_select_and_rename_keys() {
        let data = HashMap::from([
            ("a".to_string(), b"1".to_vec()),
            ("b".to_string(), b"2".to_vec()),
        ]);
        let all = project("v", data.clone(), None, 0o644, false).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].path.as_str(), all[0].mode), ("a", 0o644));
        let items = vec![KeyToPath {
            key: "b".into(),
            path: "dir/b.txt".into(),
            mode: Some(0o400),
        }];
        let some = project("v", data.clone(), Some(&items), 0o644, false).unwrap();
        assert_eq!(
            some,
            vec![FileEntry {
                path: "dir/b.txt".into(),
                data: b"2".to_vec(),
                mode: 0o400
            }]
        );
        let bad = vec![KeyToPath {
            key: "zz".into(),
            path: "z".into(),
            mode: None,
        }];
        assert!(project("v", data.clone(), Some(&bad), 0o644, false).is_err());
        assert!(
            project("v", data, Some(&bad), 0o644, true)
                .unwrap()
                .is_empty()
        );
    }
}
