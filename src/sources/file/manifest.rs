//! One manifest file's bytes to a static pod: decoding, the defaults that make it a static
//! pod of this node (name, UID, toleration, annotations), and validation. Pure, so the scanner
//! can call it on the blocking pool and tests need no folder.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};
use md5::{Digest, Md5};

use super::super::defaults::apply_api_defaults;
use super::super::validation::{FieldError, FieldErrorKind, FieldErrors, validate_pod};
use super::super::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, FILE_SOURCE};
use crate::pod::pod_uid;

/// Manifests are small; refuse to load anything that is clearly not one.
pub(super) const MAX_MANIFEST_BYTES: u64 = 10 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("could not read file: {0}")]
    Read(#[from] std::io::Error),
    #[error("file is larger than {MAX_MANIFEST_BYTES} bytes")]
    TooLarge,
    #[error("couldn't parse as pod: {0}")]
    Parse(String),
    #[error("{0}")]
    Invalid(#[from] FieldErrors),
}

fn required(field: &str) -> ManifestError {
    ManifestError::Invalid(FieldErrors(vec![FieldError {
        field: field.to_string(),
        kind: FieldErrorKind::Required,
    }]))
}

fn unsupported(field: &str, value: &str, supported: &'static [&'static str]) -> ManifestError {
    ManifestError::Invalid(FieldErrors(vec![FieldError {
        field: field.to_string(),
        kind: FieldErrorKind::NotSupported {
            value: value.to_string(),
            supported,
        },
    }]))
}

/// JSON is passed through as JSON (like upstream); everything else is read as YAML, first
/// document only (`Null` when there is none).
fn parse_document(data: &[u8]) -> Result<serde_json::Value, ManifestError> {
    let trimmed = data.trim_ascii_start();
    if trimmed.first() == Some(&b'{') {
        return serde_json::from_slice(trimmed).map_err(|e| ManifestError::Parse(e.to_string()));
    }
    crate::yaml::to_json(data).map_err(|e| ManifestError::Parse(e.to_string()))
}

/// Decodes one manifest into a Pod, insisting on `apiVersion: v1` and `kind: Pod`.
pub fn decode_pod(data: &[u8]) -> Result<Pod, ManifestError> {
    let value = parse_document(data)?;
    if value.is_null() {
        return Err(ManifestError::Parse("empty manifest".to_string()));
    }
    let Some(obj) = value.as_object() else {
        return Err(ManifestError::Parse(
            "manifest is not an object".to_string(),
        ));
    };
    match obj.get("apiVersion").and_then(|v| v.as_str()) {
        None | Some("") => return Err(required("apiVersion")),
        Some("v1") => {}
        Some(other) => return Err(unsupported("apiVersion", other, &["v1"])),
    }
    match obj.get("kind").and_then(|v| v.as_str()) {
        None | Some("") => return Err(required("kind")),
        Some("Pod") => {}
        Some(other) => return Err(unsupported("kind", other, &["Pod"])),
    }
    serde_json::from_value(value).map_err(|e| ManifestError::Parse(e.to_string()))
}

/// Decodes, defaults and validates a static pod manifest read from `file` on `node_name`.
/// The config.seen annotation is left to the caller, which knows when the pod was first seen.
pub fn static_pod_from_manifest(
    data: &[u8],
    file: &Path,
    node_name: &str,
) -> Result<Pod, ManifestError> {
    let mut pod = decode_pod(data)?;
    if pod.metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err(required("metadata.name"));
    }
    apply_api_defaults(&mut pod);
    apply_static_pod_defaults(&mut pod, file, node_name)?;
    validate_pod(&pod)?;
    Ok(pod)
}

/// The UID of a static pod without one: md5 over the defaulted pod, then host and file, so
/// the same manifest on the same node and path always yields the same pod.
fn static_pod_uid(pod: &Pod, file: &Path, node_name: &str) -> Result<String, ManifestError> {
    let canonical = serde_json::to_vec(pod).map_err(|e| ManifestError::Parse(e.to_string()))?;
    let mut hasher = Md5::new();
    hasher.update(&canonical);
    hasher.update(format!("host:{node_name}").as_bytes());
    hasher.update(format!("file:{}", file.display()).as_bytes());
    Ok(hex::encode(hasher.finalize()))
}

fn apply_static_pod_defaults(
    pod: &mut Pod,
    file: &Path,
    node_name: &str,
) -> Result<(), ManifestError> {
    if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
        pod.metadata.uid = Some(static_pod_uid(pod, file, node_name)?);
    }
    let uid = pod_uid(pod).to_string();
    let name = pod.metadata.name.take().unwrap_or_default();
    pod.metadata.name = Some(format!("{name}-{}", node_name.to_lowercase()));
    if pod.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        pod.metadata.namespace = Some("default".to_string());
    }
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node_name.to_string());
    // Static pods must survive node problems: tolerate every NoExecute taint.
    add_or_update_toleration(
        spec.tolerations.get_or_insert_with(Vec::new),
        Toleration {
            operator: Some("Exists".to_string()),
            effect: Some("NoExecute".to_string()),
            ..Default::default()
        },
    );
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_HASH_ANNOTATION.to_string(), uid);
    annotations.insert(
        CONFIG_SOURCE_ANNOTATION.to_string(),
        FILE_SOURCE.to_string(),
    );
    pod.status.get_or_insert_with(PodStatus::default).phase = Some("Pending".to_string());
    Ok(())
}

fn add_or_update_toleration(list: &mut Vec<Toleration>, t: Toleration) {
    let same = |o: &Toleration| {
        o.key == t.key && o.effect == t.effect && o.operator == t.operator && o.value == t.value
    };
    match list.iter_mut().find(|o| same(o)) {
        Some(existing) => *existing = t,
        None => list.push(t),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{NODE, manifest};
    use super::*;

    fn decode(data: &str) -> Result<Pod, ManifestError> {
        static_pod_from_manifest(
            data.as_bytes(),
            Path::new("/etc/kubernetes/manifests/x.yaml"),
            NODE,
        )
    }

    use crate::sources::annotation;

    #[test]
    fn static_defaults() {
        let pod = decode(&manifest("etcd", "registry.k8s.io/etcd:3.5.9-0")).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("etcd-node-a"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("kube-system"));
        let uid = pod_uid(&pod);
        assert_eq!(uid.len(), 32);
        assert!(uid.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(annotation(&pod, CONFIG_HASH_ANNOTATION), Some(uid));
        assert_eq!(annotation(&pod, CONFIG_SOURCE_ANNOTATION), Some("file"));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some(NODE));
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(
            spec.containers[0].image_pull_policy.as_deref(),
            Some("IfNotPresent")
        );
        let tol = spec.tolerations.as_ref().unwrap();
        assert_eq!(tol.len(), 1);
        assert_eq!(tol[0].operator.as_deref(), Some("Exists"));
        assert_eq!(tol[0].effect.as_deref(), Some("NoExecute"));
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Pending")
        );
    }

    #[test]
    fn namespace_defaults_and_explicit_uid_kept() {
        let data = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  uid: fixed-uid\n\
                    spec:\n  containers:\n  - name: web\n    image: nginx\n";
        let pod = decode(data).unwrap();
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(pod_uid(&pod), "fixed-uid");
        assert_eq!(annotation(&pod, CONFIG_HASH_ANNOTATION), Some("fixed-uid"));
    }

    #[test]
    fn json_manifest() {
        let data = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},
            "spec":{"containers":[{"name":"c","image":"busybox:1","resources":{"limits":{"cpu":1}}}]}}"#;
        let pod = decode(data).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("j-node-a"));
        let requests = pod.spec.unwrap().containers[0]
            .resources
            .clone()
            .unwrap()
            .requests
            .unwrap();
        assert_eq!(requests["cpu"].0, "1");
    }

    #[test]
    fn uid_is_deterministic_and_content_sensitive() {
        let a = decode(&manifest("etcd", "etcd:1")).unwrap();
        let b = decode(&manifest("etcd", "etcd:1")).unwrap();
        let c = decode(&manifest("etcd", "etcd:2")).unwrap();
        assert_eq!(pod_uid(&a), pod_uid(&b));
        assert_ne!(pod_uid(&a), pod_uid(&c));
        let other_file = static_pod_from_manifest(
            manifest("etcd", "etcd:1").as_bytes(),
            Path::new("/elsewhere/x.yaml"),
            NODE,
        )
        .unwrap();
        assert_ne!(pod_uid(&a), pod_uid(&other_file));
        let other_node = static_pod_from_manifest(
            manifest("etcd", "etcd:1").as_bytes(),
            Path::new("/etc/kubernetes/manifests/x.yaml"),
            "node-b",
        )
        .unwrap();
        assert_ne!(pod_uid(&a), pod_uid(&other_node));
    }

    #[test]
    fn malformed_manifests_name_the_problem() {
        let cases = [
            (
                "apiVersion: v1\nkind: Pod\nmetadata: [",
                "couldn't parse as pod",
            ),
            (
                "apiVersion: apps/v1\nkind: Pod\nmetadata:\n  name: a\n",
                "apiVersion: Unsupported value: \"apps/v1\"",
            ),
            (
                "apiVersion: v1\nkind: Deployment\nmetadata:\n  name: a\n",
                "kind: Unsupported value: \"Deployment\"",
            ),
            ("metadata:\n  name: a\n", "apiVersion: Required value"),
            (
                "apiVersion: v1\nkind: Pod\nspec:\n  containers: []\n",
                "metadata.name: Required value",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: c\n",
                "spec.containers[0].image: Required value",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  restartPolicy: Sometimes\n  containers:\n  - name: c\n    image: x\n",
                "spec.restartPolicy: Unsupported value",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: c\n    image: x\n  - name: c\n    image: y\n",
                "spec.containers[1].name: Duplicate value: \"c\"",
            ),
            ("", "empty manifest"),
        ];
        for (data, want) in cases {
            let err = decode(data).unwrap_err().to_string();
            assert!(err.contains(want), "{data:?}: got {err:?}, want {want:?}");
        }
    }
}
