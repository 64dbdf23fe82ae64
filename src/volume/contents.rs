//! The files of the volumes whose contents the kubelet writes: configMap and secret (read from
//! the API server: the Node authorizer lets a kubelet read those of its own pods),
//! downwardAPI (from the pod itself), and projected volumes made of those sources and of
//! service account tokens (the TokenRequest API, through the token cache).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Pod, Volume};

use super::atomic_writer::FileEntry;
use crate::fieldpath::{self, NodeAllocatable};
use crate::podinputs::{InputError, ObjectKind as Kind, PodInputSource};
/// Upstream's default file mode for these volumes (0644).
const DEFAULT_MODE: i32 = 0o644;

#[derive(Debug, thiserror::Error)]
pub enum ContentsError {
    #[error("{what} \"{name}\" not found")]
    NotFound { what: &'static str, name: String },
    #[error("configmap references non-existent config key: {0}")]
    ConfigMapKey(String),
    #[error("references non-existent secret key: {0}")]
    SecretKey(String),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{0}")]
    DownwardApi(String),
    #[error("{0} projections are not supported yet")]
    Unsupported(&'static str),
    /// A refresh gave up; the copy in place stays in use.
    #[error("refreshing the contents took longer than {0:?}")]
    RefreshTimedOut(std::time::Duration),
}

/// Whether this kind of volume is written by the kubelet (and so refreshed while the pod runs).
pub fn is_written(v: &Volume) -> bool {
    v.secret.is_some()
        || v.config_map.is_some()
        || v.projected.is_some()
        || v.downward_api.is_some()
}

/// Where files come from: which object, which keys, how.
struct SourceRef<'a> {
    kind: Kind,
    name: &'a str,
    items: Option<&'a Vec<KeyToPath>>,
    default_mode: i32,
    optional: bool,
}

fn mode_bits(mode: i32) -> u32 {
    (mode & 0o777) as u32
}

/// Applies `items` (key → path, mode) to the key/value pairs of an object, like upstream:
/// without items every key is a file; with items only those, and a missing key is an error
/// unless the source is optional.
fn project(
    data: HashMap<String, Vec<u8>>,
    src: &SourceRef<'_>,
) -> Result<Vec<FileEntry>, ContentsError> {
    let Some(items) = src.items.filter(|i| !i.is_empty()) else {
        let mut files: Vec<FileEntry> = data
            .into_iter()
            .map(|(k, v)| FileEntry {
                path: k,
                data: v,
                mode: mode_bits(src.default_mode),
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
                mode: mode_bits(item.mode.unwrap_or(src.default_mode)),
            }),
            None if src.optional => {}
            None => {
                return Err(match src.kind {
                    Kind::ConfigMap => ContentsError::ConfigMapKey(item.key.clone()),
                    Kind::Secret => ContentsError::SecretKey(item.key.clone()),
                });
            }
        }
    }
    Ok(files)
}

/// Fetches one object and projects its key/value pairs; a missing object is an error unless
/// the source is optional.
async fn object_files(
    inputs: &PodInputSource,
    pod: &Pod,
    src: SourceRef<'_>,
) -> Result<Vec<FileEntry>, ContentsError> {
    let data = inputs.object_data(src.kind, pod, src.name).await?;
    match data {
        Some(data) => project(data, &src),
        None if src.optional => Ok(vec![]),
        None => Err(ContentsError::NotFound {
            what: match src.kind {
                Kind::ConfigMap => "configmap",
                Kind::Secret => "secret",
            },
            name: src.name.to_string(),
        }),
    }
}

/// downwardAPI items: pod metadata by `fieldRef`, container resources by `resourceFieldRef`.
fn downward_files(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: i32,
    node: NodeAllocatable,
) -> Result<Vec<FileEntry>, ContentsError> {
    let mut files = Vec::new();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            fieldpath::volume_field(pod, &f.field_path).ok_or_else(|| {
                ContentsError::DownwardApi(format!(
                    "unsupported fieldPath {:?} in item {:?}",
                    f.field_path, item.path
                ))
            })?
        } else if let Some(r) = &item.resource_field_ref {
            fieldpath::resource_field(pod, None, r, node)
                .map_err(|e| ContentsError::DownwardApi(format!("item {:?}: {e}", item.path)))?
        } else {
            return Err(ContentsError::DownwardApi(format!(
                "item {:?} has neither fieldRef nor resourceFieldRef",
                item.path
            )));
        };
        files.push(FileEntry {
            path: item.path.clone(),
            data: value.into_bytes(),
            mode: mode_bits(item.mode.unwrap_or(default_mode)),
        });
    }
    Ok(files)
}

/// The files of one kubelet-written volume, as they should be now.
pub async fn files(
    inputs: &PodInputSource,
    pod: &Pod,
    v: &Volume,
    node: NodeAllocatable,
) -> Result<Vec<FileEntry>, ContentsError> {
    if let Some(s) = &v.secret {
        let src = SourceRef {
            kind: Kind::Secret,
            name: s.secret_name.as_deref().unwrap_or_default(),
            items: s.items.as_ref(),
            default_mode: s.default_mode.unwrap_or(DEFAULT_MODE),
            optional: s.optional.unwrap_or(false),
        };
        return object_files(inputs, pod, src).await;
    }
    if let Some(c) = &v.config_map {
        let src = SourceRef {
            kind: Kind::ConfigMap,
            name: &c.name,
            items: c.items.as_ref(),
            default_mode: c.default_mode.unwrap_or(DEFAULT_MODE),
            optional: c.optional.unwrap_or(false),
        };
        return object_files(inputs, pod, src).await;
    }
    if let Some(d) = &v.downward_api {
        let mode = d.default_mode.unwrap_or(DEFAULT_MODE);
        return downward_files(pod, d.items.as_deref().unwrap_or(&[]), mode, node);
    }
    let Some(p) = &v.projected else {
        return Ok(vec![]);
    };
    let mode = p.default_mode.unwrap_or(DEFAULT_MODE);
    let mut files = Vec::new();
    for src in p.sources.iter().flatten() {
        if let Some(s) = &src.secret {
            let source = SourceRef {
                kind: Kind::Secret,
                name: &s.name,
                items: s.items.as_ref(),
                default_mode: mode,
                optional: s.optional.unwrap_or(false),
            };
            files.extend(object_files(inputs, pod, source).await?);
        } else if let Some(c) = &src.config_map {
            let source = SourceRef {
                kind: Kind::ConfigMap,
                name: &c.name,
                items: c.items.as_ref(),
                default_mode: mode,
                optional: c.optional.unwrap_or(false),
            };
            files.extend(object_files(inputs, pod, source).await?);
        } else if let Some(d) = &src.downward_api {
            files.extend(downward_files(
                pod,
                d.items.as_deref().unwrap_or(&[]),
                mode,
                node,
            )?);
        } else if let Some(t) = &src.service_account_token {
            let expiration = t
                .expiration_seconds
                .unwrap_or(crate::podinputs::tokens::DEFAULT_EXPIRATION_SECONDS);
            let audience = t.audience.as_deref().unwrap_or_default();
            let token = inputs.token(pod, audience, expiration).await?;
            files.push(FileEntry {
                path: t.path.clone(),
                data: token.into_bytes(),
                mode: mode_bits(mode),
            });
        } else if src.cluster_trust_bundle.is_some() {
            return Err(ContentsError::Unsupported("clusterTrustBundle"));
        } else {
            return Err(ContentsError::Unsupported("this kind of"));
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        DownwardAPIVolumeSource, ObjectFieldSelector, PodSpec, ResourceFieldSelector,
    };

    fn src(items: Option<&Vec<KeyToPath>>, optional: bool) -> SourceRef<'_> {
        SourceRef {
            kind: Kind::ConfigMap,
            name: "cm",
            items,
            default_mode: 0o644,
            optional,
        }
    }

    #[test]
    fn items_select_and_rename_keys() {
        let data = HashMap::from([
            ("a".to_string(), b"1".to_vec()),
            ("b".to_string(), b"2".to_vec()),
        ]);
        let all = project(data.clone(), &src(None, false)).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].path.as_str(), all[0].mode), ("a", 0o644));
        let items = vec![KeyToPath {
            key: "b".into(),
            path: "dir/b.txt".into(),
            mode: Some(0o400),
        }];
        let some = project(data.clone(), &src(Some(&items), false)).unwrap();
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
        let err = project(data.clone(), &src(Some(&bad), false)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "configmap references non-existent config key: zz"
        );
        assert!(project(data, &src(Some(&bad), true)).unwrap().is_empty());
    }

    #[tokio::test]
    async fn downward_api_volume_items() {
        use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.labels = Some([("b".to_string(), "2".to_string())].into());
        pod.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    limits: Some([("memory".to_string(), Quantity("64Mi".into()))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        let field = |path: &str, field: &str, mode: Option<i32>| DownwardAPIVolumeFile {
            path: path.into(),
            field_ref: Some(ObjectFieldSelector {
                field_path: field.into(),
                ..Default::default()
            }),
            mode,
            ..Default::default()
        };
        let resource = |path: &str, res: &str| DownwardAPIVolumeFile {
            path: path.into(),
            resource_field_ref: Some(ResourceFieldSelector {
                container_name: Some("c".into()),
                resource: res.into(),
                divisor: Some(Quantity("1Mi".into())),
            }),
            ..Default::default()
        };
        let v = Volume {
            name: "podinfo".into(),
            downward_api: Some(DownwardAPIVolumeSource {
                default_mode: Some(0o600),
                items: Some(vec![
                    field("podname", "metadata.name", Some(0o400)),
                    field("labels", "metadata.labels", None),
                    resource("mem_limit", "limits.memory"),
                    resource("cpu_limit", "limits.cpu"),
                ]),
            }),
            ..Default::default()
        };
        let node = NodeAllocatable {
            cpu_millis: 2000,
            memory_bytes: 1 << 30,
        };
        let got = files(&PodInputSource::default(), &pod, &v, node)
            .await
            .unwrap();
        let view: Vec<(&str, &str, u32)> = got
            .iter()
            .map(|f| {
                (
                    f.path.as_str(),
                    std::str::from_utf8(&f.data).unwrap(),
                    f.mode,
                )
            })
            .collect();
        assert_eq!(
            view,
            vec![
                ("podname", "web", 0o400),
                ("labels", "b=\"2\"", 0o600),
                ("mem_limit", "64", 0o600),
                // No CPU limit: the node's allocatable, 2 cores, divided by 1Mi and rounded up.
                ("cpu_limit", "1", 0o600),
            ]
        );
        let bad = Volume {
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![field("ip", "status.podIP", None)]),
                ..Default::default()
            }),
            ..v
        };
        let err = files(&PodInputSource::default(), &pod, &bad, node)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("status.podIP"), "{err}");
    }
}
