//! Downward API references: pod fields (`fieldRef`) and container resources
//! (`resourceFieldRef`), rendered as upstream renders them. Env vars and downwardAPI volumes
//! both use these.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};

use crate::quantity::Amount;

/// What stands in for a limit a container does not set: the node's allocatable.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NodeAllocatable {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
}

/// The pod's addresses, for the `status.*` fields only env vars may use.
#[derive(Debug, Default, Clone, Copy)]
pub struct Addresses<'a> {
    pub host_ip: &'a str,
    pub pod_ips: &'a [String],
}

/// One `fieldRef` path as an env var sees it; `None` for a path this kubelet does not know.
pub fn field_ref(pod: &Pod, path: &str, addresses: Addresses<'_>) -> Option<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let keyed = |prefix: &str, map: Option<&BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.and_then(|m| m.get(key).cloned()).unwrap_or_default())
    };
    Some(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => addresses.host_ip.to_string(),
        "status.podIP" => addresses.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => addresses.pod_ips.join(","),
        _ => {
            return keyed("metadata.labels['", meta.labels.as_ref())
                .or_else(|| keyed("metadata.annotations['", meta.annotations.as_ref()));
        }
    })
}

/// One `fieldRef` path as a downwardAPI volume file: whole label and annotation maps are
/// allowed there, as sorted `key="value"` lines; the `status.*` addresses are not.
pub fn volume_field(pod: &Pod, path: &str) -> Option<String> {
    match path {
        "metadata.labels" => Some(format_map(pod.metadata.labels.as_ref())),
        "metadata.annotations" => Some(format_map(pod.metadata.annotations.as_ref())),
        p if p.starts_with("status.") => None,
        _ => field_ref(pod, path, Addresses::default()),
    }
}

/// Upstream's rendering of a label or annotation map: one `key="value"` line per entry, keys
/// sorted, values quoted like Go's `%q`, no newline after the last.
pub fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Go's `strconv.Quote` for valid UTF-8: printable characters as they are, the usual
/// backslash escapes, other control characters as `\xNN` (ASCII) or `\uNNNN`.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Why a `resourceFieldRef` has no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceFieldError {
    #[error("resourceFieldRef needs a containerName")]
    NoContainer,
    #[error("resourceFieldRef names unknown container {0:?}")]
    UnknownContainer(String),
    #[error("unsupported resource {0:?}")]
    Unsupported(String),
    #[error("{0}")]
    Quantity(#[from] crate::quantity::QuantityError),
}

/// `resourceFieldRef`: a container's request or limit (a missing limit means the node's
/// allocatable), divided by the divisor and rounded up, as upstream renders it. `own` is the
/// container an env var belongs to; a volume item must name its container.
pub fn resource_field(
    pod: &Pod,
    own: Option<&Container>,
    r: &ResourceFieldSelector,
    node: NodeAllocatable,
) -> Result<String, ResourceFieldError> {
    let unsupported = || ResourceFieldError::Unsupported(r.resource.clone());
    let target = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
        None => own.ok_or(ResourceFieldError::NoContainer)?,
        Some(name) => pod
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .find(|c| c.name == name)
            .ok_or_else(|| ResourceFieldError::UnknownContainer(name.to_string()))?,
    };
    let (which, resource) = r.resource.split_once('.').ok_or_else(unsupported)?;
    let res = target.resources.as_ref();
    let map = match which {
        "limits" => res.and_then(|x| x.limits.as_ref()),
        "requests" => res.and_then(|x| x.requests.as_ref()),
        _ => return Err(unsupported()),
    };
    let set = map
        .and_then(|m| m.get(resource))
        .map(Amount::of)
        .transpose()?;
    let node = match resource {
        "cpu" => Amount::from_millis(node.cpu_millis),
        "memory" => Amount::from_units(node.memory_bytes),
        "ephemeral-storage" => Amount::ZERO,
        _ => return Err(unsupported()),
    };
    let value = set.unwrap_or(if which == "limits" {
        node
    } else {
        Amount::ZERO
    });
    let divisor = r
        .divisor
        .as_ref()
        .map(Amount::of)
        .transpose()?
        .filter(|d| *d > Amount::ZERO)
        .unwrap_or(Amount::from_units(1));
    // Ceiling division on non-negative values.
    let out = (value.nano() + divisor.nano() - 1) / divisor.nano();
    Ok(out.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn resource_field_refs_follow_upstream_rounding() {
        let c = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), Quantity("250m".into()))].into()),
                limits: Some([("memory".to_string(), Quantity("64Mi".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let node = NodeAllocatable {
            cpu_millis: 2000,
            memory_bytes: 1 << 30,
        };
        let get = |res: &str, divisor: Option<&str>| {
            let sel = ResourceFieldSelector {
                resource: res.into(),
                divisor: divisor.map(|d| Quantity(d.into())),
                container_name: None,
            };
            resource_field(&Pod::default(), Some(&c), &sel, node).unwrap()
        };
        assert_eq!(get("requests.cpu", None), "1");
        assert_eq!(get("requests.cpu", Some("1m")), "250");
        assert_eq!(get("limits.cpu", None), "2");
        assert_eq!(get("limits.memory", Some("1Mi")), "64");
        assert_eq!(get("limits.memory", None), "67108864");
        assert_eq!(get("requests.memory", None), "0");
        let unnamed = ResourceFieldSelector {
            resource: "limits.cpu".into(),
            ..Default::default()
        };
        let err = resource_field(&Pod::default(), None, &unnamed, node)
            .unwrap_err()
            .to_string();
        assert!(err.contains("containerName"), "{err}");
    }

    #[test]
    fn maps_render_sorted_and_go_quoted() {
        let m = BTreeMap::from([
            ("b".to_string(), "two\tx\"y\"".to_string()),
            ("a".to_string(), "é\u{1}".to_string()),
        ]);
        assert_eq!(format_map(Some(&m)), "a=\"é\\x01\"\nb=\"two\\tx\\\"y\\\"\"");
        assert_eq!(format_map(None), "");
    }

    #[test]
    fn volumes_see_metadata_but_not_addresses() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.labels = Some(BTreeMap::from([("k".into(), "v".into())]));
        assert_eq!(volume_field(&pod, "metadata.name").as_deref(), Some("p"));
        assert_eq!(
            volume_field(&pod, "metadata.labels").as_deref(),
            Some("k=\"v\"")
        );
        assert_eq!(
            volume_field(&pod, "metadata.labels['k']").as_deref(),
            Some("v")
        );
        assert_eq!(volume_field(&pod, "status.podIP"), None);
    }
}
