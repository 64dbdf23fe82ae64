//! The configMaps and secrets a pod's environment reads (`configMapKeyRef`, `secretKeyRef`,
//! `envFrom`), read through the watches of [`super::watched`] before its containers are
//! created. The Node authorizer lets a kubelet read those of the pods bound to it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, Secret};

use super::PodInputSource;

/// Why the objects could not be read; the container waits in `CreateContainerConfigError`
/// and the next sync tries again.
#[derive(Debug, thiserror::Error)]
pub enum EnvSourceError {
    #[error("couldn't get {kind} {namespace}/{name}: {reason}")]
    Get {
        kind: &'static str,
        namespace: String,
        name: String,
        reason: String,
    },
}

/// The string data of each object a pod's env names; `None` where the object does not exist.
/// `available` is false when there is no API server to ask (standalone mode).
#[derive(Debug, Clone, Default)]
pub struct EnvObjects {
    pub available: bool,
    /// Why reading them failed this time, if it did: every container that needs them waits.
    pub error: Option<String>,
    pub namespace: String,
    pub config_maps: HashMap<String, Option<BTreeMap<String, String>>>,
    pub secrets: HashMap<String, Option<BTreeMap<String, String>>>,
}

fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
    })
}

/// The configMap and secret names the pod's env refers to.
pub fn referenced(pod: &Pod) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut config_maps, mut secrets) = (BTreeSet::new(), BTreeSet::new());
    for c in containers(pod) {
        for from in c.env_from.iter().flatten() {
            if let Some(r) = &from.config_map_ref {
                config_maps.insert(r.name.clone());
            }
            if let Some(r) = &from.secret_ref {
                secrets.insert(r.name.clone());
            }
        }
        for var in c.env.iter().flatten() {
            let Some(from) = &var.value_from else {
                continue;
            };
            if let Some(r) = &from.config_map_key_ref {
                config_maps.insert(r.name.clone());
            }
            if let Some(r) = &from.secret_key_ref {
                secrets.insert(r.name.clone());
            }
        }
    }
    (config_maps, secrets)
}

/// Secret values are bytes; the environment gets them as text, as upstream does.
fn secret_strings(secret: Secret) -> BTreeMap<String, String> {
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect()
}

/// Reads every object the pod's env names (nothing when it names none); a failure is kept in
/// `error` for the containers that need the objects.
pub async fn fetch(inputs: &PodInputSource, pod: &Pod) -> EnvObjects {
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    match try_fetch(inputs, pod).await {
        Ok(objects) => objects,
        Err(e) => EnvObjects {
            available: true,
            error: Some(e.to_string()),
            namespace,
            ..Default::default()
        },
    }
}

async fn try_fetch(inputs: &PodInputSource, pod: &Pod) -> Result<EnvObjects, EnvSourceError> {
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    if inputs.client().is_none() {
        return Ok(EnvObjects {
            namespace,
            ..Default::default()
        });
    }
    let failed = |kind: &'static str, name: &str, e: super::InputError| EnvSourceError::Get {
        kind,
        namespace: namespace.clone(),
        name: name.to_string(),
        reason: e.to_string(),
    };
    let (config_map_names, secret_names) = referenced(pod);
    let mut objects = EnvObjects {
        available: true,
        namespace: namespace.clone(),
        ..Default::default()
    };
    for name in config_map_names {
        let found = inputs
            .config_map(pod, &name)
            .await
            .map_err(|e| failed("configMap", &name, e))?;
        let data = found.map(|cm| Arc::unwrap_or_clone(cm).data.unwrap_or_default());
        objects.config_maps.insert(name, data);
    }
    for name in secret_names {
        let found = inputs
            .secret(pod, &name)
            .await
            .map_err(|e| failed("secret", &name, e))?;
        let data = found.map(|s| secret_strings(Arc::unwrap_or_clone(s)));
        objects.secrets.insert(name, data);
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource, PodSpec,
        SecretKeySelector,
    };

    #[test]
    fn names_come_from_env_and_env_from_of_every_container() {
        let pod = Pod {
            spec: Some(PodSpec {
                init_containers: Some(vec![Container {
                    name: "init".into(),
                    env_from: Some(vec![EnvFromSource {
                        config_map_ref: Some(ConfigMapEnvSource {
                            name: "cm-a".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }]),
                containers: vec![Container {
                    name: "app".into(),
                    env: Some(vec![
                        EnvVar {
                            name: "X".into(),
                            value_from: Some(EnvVarSource {
                                config_map_key_ref: Some(ConfigMapKeySelector {
                                    name: "cm-b".into(),
                                    key: "k".into(),
                                    optional: None,
                                }),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                        EnvVar {
                            name: "Y".into(),
                            value_from: Some(EnvVarSource {
                                secret_key_ref: Some(SecretKeySelector {
                                    name: "s".into(),
                                    key: "k".into(),
                                    optional: None,
                                }),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                    ]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let (cms, secrets) = referenced(&pod);
        assert_eq!(cms.into_iter().collect::<Vec<_>>(), ["cm-a", "cm-b"]);
        assert_eq!(secrets.into_iter().collect::<Vec<_>>(), ["s"]);
    }

    #[test]
    fn secret_bytes_become_text() {
        use k8s_openapi::ByteString;
        let secret = Secret {
            data: Some([("a".to_string(), ByteString(b"value-1".to_vec()))].into()),
            ..Default::default()
        };
        assert_eq!(secret_strings(secret)["a"], "value-1");
    }
}
