//! Container environment: the pod's env list resolved in order, and `$(VAR)` expansion in
//! env values, command and args, with upstream's rules.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    #[error("env {name}: {reason}")]
    Unsupported { name: String, reason: String },
}

/// Facts about the running pod that downward-API env vars can reference.
#[derive(Debug, Default, Clone)]
pub struct PodFacts {
    pub host_ip: String,
    pub pod_ips: Vec<String>,
    /// Node allocatable, which stands in for a limit the container does not set.
    pub node_cpu_millis: i64,
    pub node_memory_bytes: i64,
    /// Service variables, defined before the container's own env (which may use them).
    pub service_env: Vec<(String, String)>,
}

/// `$(NAME)` is replaced when NAME is defined, `$$` escapes a `$`, and anything else is kept
/// verbatim (an undefined reference stays as written).
pub fn expand(input: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A pod field for downwardAPI volume files: metadata fields, with whole label and annotation
/// maps rendered as `key="value"` lines like upstream.
pub fn pod_field(pod: &Pod, path: &str) -> Option<String> {
    let render = |m: Option<&std::collections::BTreeMap<String, String>>| {
        m.into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    match path {
        "metadata.labels" => Some(render(pod.metadata.labels.as_ref())),
        "metadata.annotations" => Some(render(pod.metadata.annotations.as_ref())),
        _ => field_ref(pod, path, &PodFacts::default()),
    }
}

fn field_ref(pod: &Pod, path: &str, facts: &PodFacts) -> Option<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let keyed = |prefix: &str, map: Option<&std::collections::BTreeMap<String, String>>| {
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
        "status.hostIP" | "status.hostIPs" => facts.host_ip.clone(),
        "status.podIP" => facts.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => facts.pod_ips.join(","),
        _ => {
            return keyed("metadata.labels['", meta.labels.as_ref())
                .or_else(|| keyed("metadata.annotations['", meta.annotations.as_ref()));
        }
    })
}

/// `resourceFieldRef`: a container's request or limit (a missing limit means the node's
/// allocatable), divided by the divisor and rounded up, as upstream renders it.
fn resource_field(
    pod: &Pod,
    own: &Container,
    r: &k8s_openapi::api::core::v1::ResourceFieldSelector,
    facts: &PodFacts,
) -> Result<String, String> {
    use crate::quantity::Amount;
    let target = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
        None => own,
        Some(name) => pod
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .find(|c| c.name == name)
            .ok_or_else(|| format!("resourceFieldRef names unknown container {name:?}"))?,
    };
    let (which, resource) = r
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported resource {:?}", r.resource))?;
    let res = target.resources.as_ref();
    let map = match which {
        "limits" => res.and_then(|x| x.limits.as_ref()),
        "requests" => res.and_then(|x| x.requests.as_ref()),
        _ => return Err(format!("unsupported resource {:?}", r.resource)),
    };
    let set = map
        .and_then(|m| m.get(resource))
        .map(Amount::of)
        .transpose()
        .map_err(|e| e.to_string())?;
    let node = match resource {
        "cpu" => Amount::from_millis(facts.node_cpu_millis),
        "memory" => Amount::from_units(facts.node_memory_bytes),
        "ephemeral-storage" => Amount::ZERO,
        _ => return Err(format!("unsupported resource {:?}", r.resource)),
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
        .transpose()
        .map_err(|e| e.to_string())?
        .filter(|d| *d > Amount::ZERO)
        .unwrap_or(Amount::from_units(1));
    // Ceiling division on non-negative values.
    let out = (value.nano() + divisor.nano() - 1) / divisor.nano();
    Ok(out.to_string())
}

fn resolve_one(
    pod: &Pod,
    container: &Container,
    var: &EnvVar,
    vars: &HashMap<String, String>,
    facts: &PodFacts,
) -> Result<String, EnvError> {
    if let Some(value) = &var.value {
        return Ok(expand(value, vars));
    }
    let Some(from) = &var.value_from else {
        return Ok(String::new());
    };
    if let Some(f) = &from.field_ref {
        return field_ref(pod, &f.field_path, facts).ok_or_else(|| EnvError::Unsupported {
            name: var.name.clone(),
            reason: format!("unsupported fieldPath {:?}", f.field_path),
        });
    }
    if let Some(r) = &from.resource_field_ref {
        return resource_field(pod, container, r, facts).map_err(|reason| EnvError::Unsupported {
            name: var.name.clone(),
            reason,
        });
    }
    let optional = from
        .config_map_key_ref
        .as_ref()
        .and_then(|r| r.optional)
        .or(from.secret_key_ref.as_ref().and_then(|r| r.optional))
        .unwrap_or(false);
    if optional {
        return Ok(String::new());
    }
    Err(EnvError::Unsupported {
        name: var.name.clone(),
        reason: "this kubelet cannot resolve configMap or secret references without an API server"
            .into(),
    })
}

/// The container's environment in order; later entries see earlier ones for expansion.
pub fn container_env(
    pod: &Pod,
    container: &Container,
    facts: &PodFacts,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut vars: HashMap<String, String> = facts.service_env.iter().cloned().collect();
    let mut ordered: Vec<(String, String)> = facts.service_env.clone();
    for var in container.env.iter().flatten() {
        let value = resolve_one(pod, container, var, &vars, facts)?;
        vars.insert(var.name.clone(), value.clone());
        match ordered.iter_mut().find(|(k, _)| *k == var.name) {
            Some(slot) => slot.1 = value,
            None => ordered.push((var.name.clone(), value)),
        }
    }
    Ok(ordered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector};

    #[test]
    fn resource_field_refs_follow_upstream_rounding() {
        use k8s_openapi::api::core::v1::{ResourceFieldSelector, ResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let c = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), Quantity("250m".into()))].into()),
                limits: Some([("memory".to_string(), Quantity("64Mi".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let facts = PodFacts {
            node_cpu_millis: 2000,
            node_memory_bytes: 1 << 30,
            ..Default::default()
        };
        let get = |res: &str, divisor: Option<&str>| {
            let sel = ResourceFieldSelector {
                resource: res.into(),
                divisor: divisor.map(|d| Quantity(d.into())),
                container_name: None,
            };
            resource_field(&Pod::default(), &c, &sel, &facts).unwrap()
        };
        assert_eq!(get("requests.cpu", None), "1");
        assert_eq!(get("requests.cpu", Some("1m")), "250");
        assert_eq!(get("limits.cpu", None), "2");
        assert_eq!(get("limits.memory", Some("1Mi")), "64");
        assert_eq!(get("limits.memory", None), "67108864");
        assert_eq!(get("requests.memory", None), "0");
    }

    #[test]
    fn expansion_rules() {
        let vars = HashMap::from([("A".to_string(), "x".to_string())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$-$(", &vars), "x-$(B)-$(A)-$-$(");
    }

    #[test]
    fn env_in_order_with_field_refs() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p1".into());
        let c = Container {
            name: "c".into(),
            env: Some(vec![
                EnvVar {
                    name: "N".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.name".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                EnvVar {
                    name: "G".into(),
                    value: Some("hi $(N) $(IP)".into()),
                    ..Default::default()
                },
                EnvVar {
                    name: "IP".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "status.podIP".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let facts = PodFacts {
            host_ip: "h".into(),
            pod_ips: vec!["10.0.0.2".into()],
            ..Default::default()
        };
        let env = container_env(&pod, &c, &facts).unwrap();
        assert_eq!(env[1], ("G".to_string(), "hi p1 $(IP)".to_string()));
        assert_eq!(env[2].1, "10.0.0.2");
    }
}
