//! Container environment: the pod's env list resolved in order, and `$(VAR)` expansion in
//! env values, command and args, with upstream's rules.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};

use crate::expansion::expand;
use crate::fieldpath::{self, NodeAllocatable};
use crate::podinputs::env_sources::EnvObjects;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    #[error("env {name}: {reason}")]
    Unsupported { name: String, reason: String },
    /// A configMap, secret or key the env needs is missing (and not optional), with upstream's
    /// message.
    #[error("{0}")]
    Source(String),
}

/// Facts about the running pod that downward-API env vars can reference.
#[derive(Debug, Default, Clone)]
pub struct PodFacts {
    pub host_ip: String,
    pub pod_ips: Vec<String>,
    /// Node allocatable, which stands in for a limit the container does not set.
    pub node: NodeAllocatable,
    /// Service variables, defined before the container's own env (which may use them).
    pub service_env: Vec<(String, String)>,
    /// The configMaps and secrets the env refers to.
    pub env_objects: EnvObjects,
    /// The pod's imagePullSecrets, for a pull that needs them.
    pub pull_secrets: Vec<k8s_openapi::api::core::v1::Secret>,
}

fn resolve_one(
    pod: &Pod,
    container: &Container,
    var: &EnvVar,
    vars: &HashMap<String, String>,
    facts: &PodFacts,
) -> Result<Option<String>, EnvError> {
    if let Some(value) = var.value.as_deref().filter(|v| !v.is_empty()) {
        return Ok(Some(expand(value, vars)));
    }
    let Some(from) = &var.value_from else {
        return Ok(Some(String::new()));
    };
    if let Some(f) = &from.field_ref {
        let addresses = fieldpath::Addresses {
            host_ip: &facts.host_ip,
            pod_ips: &facts.pod_ips,
        };
        return fieldpath::field_ref(pod, &f.field_path, addresses)
            .map(Some)
            .ok_or_else(|| EnvError::Unsupported {
                name: var.name.clone(),
                reason: format!("unsupported fieldPath {:?}", f.field_path),
            });
    }
    if let Some(r) = &from.resource_field_ref {
        return fieldpath::resource_field(pod, Some(container), r, facts.node)
            .map(Some)
            .map_err(|e| EnvError::Unsupported {
                name: var.name.clone(),
                reason: e.to_string(),
            });
    }
    if let Some(r) = &from.config_map_key_ref {
        return key_ref(
            &facts.env_objects,
            Kind::ConfigMap,
            &r.name,
            &r.key,
            r.optional.unwrap_or(false),
        );
    }
    if let Some(r) = &from.secret_key_ref {
        return key_ref(
            &facts.env_objects,
            Kind::Secret,
            &r.name,
            &r.key,
            r.optional.unwrap_or(false),
        );
    }
    Ok(Some(String::new()))
}

#[derive(Clone, Copy)]
enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    /// As in upstream's messages: "ConfigMap" in "couldn't find key", "configmaps" in "not found".
    fn title(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
        }
    }
    fn resource(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        }
    }
    fn lower(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configMap",
            Kind::Secret => "secret",
        }
    }
}

/// The data of a referenced object: `Ok(None)` when it is missing and optional (the
/// variables it would give are then left out, as upstream does).
fn object_data<'a>(
    objects: &'a EnvObjects,
    kind: Kind,
    name: &str,
    optional: bool,
) -> Result<Option<&'a std::collections::BTreeMap<String, String>>, EnvError> {
    if let Some(e) = &objects.error {
        return Err(EnvError::Source(e.clone()));
    }
    if !objects.available {
        return Err(EnvError::Source(format!(
            "couldn't get {} {}/{name}, no kubeClient defined",
            kind.lower(),
            objects.namespace
        )));
    }
    let found = match kind {
        Kind::ConfigMap => objects.config_maps.get(name),
        Kind::Secret => objects.secrets.get(name),
    };
    match found.and_then(|o| o.as_ref()) {
        Some(data) => Ok(Some(data)),
        None if optional => Ok(None),
        None => Err(EnvError::Source(format!(
            "{} \"{name}\" not found",
            kind.resource()
        ))),
    }
}

fn key_ref(
    objects: &EnvObjects,
    kind: Kind,
    name: &str,
    key: &str,
    optional: bool,
) -> Result<Option<String>, EnvError> {
    let Some(data) = object_data(objects, kind, name, optional)? else {
        return Ok(None);
    };
    match data.get(key) {
        Some(v) => Ok(Some(v.clone())),
        None if optional => Ok(None),
        None => Err(EnvError::Source(format!(
            "couldn't find key {key} in {} {}/{name}",
            kind.title(),
            objects.namespace
        ))),
    }
}

/// Upstream's IsEnvVarName: letters, digits, `_`, `-` and `.`, not starting with a digit.
pub fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || matches!(c, '_' | '-' | '.'))
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Keys of an `envFrom` source that are no valid variable names once prefixed: upstream skips
/// them and says so in an `InvalidEnvironmentVariableNames` event, one per source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedKeys {
    pub message: String,
}

/// What a container's `envFrom` gives: its variables in order, and the keys it skips.
struct EnvFrom {
    vars: Vec<(String, String)>,
    skipped: Vec<SkippedKeys>,
}

fn env_from(container: &Container, objects: &EnvObjects) -> Result<EnvFrom, EnvError> {
    let mut vars = Vec::new();
    let mut skipped = Vec::new();
    for from in container.env_from.iter().flatten() {
        let (kind, name, optional) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), _) => (Kind::ConfigMap, &r.name, r.optional.unwrap_or(false)),
            (None, Some(r)) => (Kind::Secret, &r.name, r.optional.unwrap_or(false)),
            (None, None) => continue,
        };
        let Some(data) = object_data(objects, kind, name, optional)? else {
            continue;
        };
        let prefix = from.prefix.as_deref().unwrap_or("");
        let mut invalid = Vec::new();
        for (key, value) in data {
            let key = format!("{prefix}{key}");
            if is_env_var_name(&key) {
                vars.push((key, value.clone()));
            } else {
                invalid.push(key);
            }
        }
        if !invalid.is_empty() {
            invalid.sort();
            skipped.push(SkippedKeys {
                message: format!(
                    "Keys [{}] from the EnvFrom {} {}/{name} were skipped since they are considered invalid environment variable names.",
                    invalid.join(", "),
                    kind.lower(),
                    objects.namespace
                ),
            });
        }
    }
    Ok(EnvFrom { vars, skipped })
}

/// The keys `envFrom` skips for a container, for the event upstream emits (empty when the
/// sources cannot be read: container_env reports that).
pub fn skipped_env_from_keys(container: &Container, facts: &PodFacts) -> Vec<SkippedKeys> {
    env_from(container, &facts.env_objects)
        .map(|from| from.skipped)
        .unwrap_or_default()
}

/// The container's environment in order: the services' variables, then `envFrom`, then `env`
/// (later entries see earlier ones for expansion, and replace an earlier one of the same name).
pub fn container_env(
    pod: &Pod,
    container: &Container,
    facts: &PodFacts,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut vars: HashMap<String, String> = HashMap::new();
    let mut ordered: Vec<(String, String)> = Vec::new();
    let mut set = |name: String, value: String, vars: &mut HashMap<String, String>| {
        vars.insert(name.clone(), value.clone());
        match ordered.iter_mut().find(|(k, _)| *k == name) {
            Some(slot) => slot.1 = value,
            None => ordered.push((name, value)),
        }
    };
    for (name, value) in facts.service_env.iter().cloned() {
        set(name, value, &mut vars);
    }
    for (name, value) in env_from(container, &facts.env_objects)?.vars {
        set(name, value, &mut vars);
    }
    for var in container.env.iter().flatten() {
        if let Some(value) = resolve_one(pod, container, var, &vars, facts)? {
            set(var.name.clone(), value, &mut vars);
        }
    }
    Ok(ordered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector};

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

    fn objects() -> EnvObjects {
        EnvObjects {
            available: true,
            namespace: "ns".into(),
            config_maps: [
                (
                    "cm".to_string(),
                    Some(
                        [
                            ("data_1".to_string(), "value-1".to_string()),
                            ("1bad".to_string(), "x".to_string()),
                        ]
                        .into(),
                    ),
                ),
                ("gone".to_string(), None),
            ]
            .into(),
            secrets: [(
                "s".to_string(),
                Some([("data-2".to_string(), "value-2".to_string())].into()),
            )]
            .into(),
            ..Default::default()
        }
    }

    fn key_var(
        name: &str,
        cm: Option<(&str, &str)>,
        secret: Option<(&str, &str)>,
        optional: bool,
    ) -> EnvVar {
        use k8s_openapi::api::core::v1::{ConfigMapKeySelector, SecretKeySelector};
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                config_map_key_ref: cm.map(|(n, k)| ConfigMapKeySelector {
                    name: n.into(),
                    key: k.into(),
                    optional: Some(optional),
                }),
                secret_key_ref: secret.map(|(n, k)| SecretKeySelector {
                    name: n.into(),
                    key: k.into(),
                    optional: Some(optional),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn env_from_with_prefix_then_key_refs_and_upstream_messages() {
        use k8s_openapi::api::core::v1::{ConfigMapEnvSource, EnvFromSource, SecretEnvSource};
        let facts = PodFacts {
            env_objects: objects(),
            ..Default::default()
        };
        let c = Container {
            name: "c".into(),
            env_from: Some(vec![
                EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: "cm".into(),
                        optional: None,
                    }),
                    prefix: Some("p_".into()),
                    ..Default::default()
                },
                EnvFromSource {
                    secret_ref: Some(SecretEnvSource {
                        name: "s".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
                EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: "gone".into(),
                        optional: Some(true),
                    }),
                    ..Default::default()
                },
            ]),
            env: Some(vec![
                key_var("A", Some(("cm", "data_1")), None, false),
                key_var("B", None, Some(("s", "data-2")), false),
                key_var("C", Some(("cm", "nope")), None, true),
                key_var("D", Some(("gone", "k")), None, true),
            ]),
            ..Default::default()
        };
        let env = container_env(&Pod::default(), &c, &facts).unwrap();
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        // "p_1bad" is a valid name once prefixed; optional misses set nothing.
        assert_eq!(names, ["p_1bad", "p_data_1", "data-2", "A", "B"]);
        assert_eq!(env[3].1, "value-1");
        assert_eq!(env[4].1, "value-2");

        let mut unprefixed = c.clone();
        unprefixed.env_from.as_mut().unwrap()[0].prefix = None;
        let skipped = skipped_env_from_keys(&unprefixed, &facts);
        assert_eq!(
            skipped[0].message,
            "Keys [1bad] from the EnvFrom configMap ns/cm were skipped since they are considered invalid environment variable names."
        );

        let err = |var: EnvVar| {
            let c = Container {
                name: "c".into(),
                env: Some(vec![var]),
                ..Default::default()
            };
            container_env(&Pod::default(), &c, &facts)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(key_var("X", Some(("cm", "nope")), None, false)),
            "couldn't find key nope in ConfigMap ns/cm"
        );
        assert_eq!(
            err(key_var("X", None, Some(("s", "nope")), false)),
            "couldn't find key nope in Secret ns/s"
        );
        assert_eq!(
            err(key_var("X", Some(("gone", "k")), None, false)),
            "configmaps \"gone\" not found"
        );
        let standalone = PodFacts::default();
        let c = Container {
            name: "c".into(),
            env: Some(vec![key_var("X", Some(("cm", "k")), None, false)]),
            ..Default::default()
        };
        assert!(
            container_env(&Pod::default(), &c, &standalone)
                .unwrap_err()
                .to_string()
                .contains("no kubeClient defined")
        );
    }

    #[test]
    fn env_var_names_follow_upstream() {
        for ok in ["A", "a_b", "-x", ".y", "A1-b.c"] {
            assert!(is_env_var_name(ok), "{ok}");
        }
        for bad in ["", "1a", "a b", "a=b", "ä"] {
            assert!(!is_env_var_name(bad), "{bad}");
        }
    }
}
