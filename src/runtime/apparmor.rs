//! AppArmor profiles as upstream v1.34 applies them: the container's `appArmorProfile`, else
//! the deprecated `container.apparmor.security.beta.kubernetes.io/<name>` annotation (static
//! pods never had it copied into the field), else the pod's field. The runtime gets both the
//! CRI `apparmor` profile and the deprecated string form older runtimes read.

use std::path::Path;

use k8s_openapi::api::core::v1::{AppArmorProfile, Container, Pod};

use crate::cri::api;
use crate::cri::api::security_profile::ProfileType;

pub const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
const RUNTIME_DEFAULT: &str = "runtime/default";
const UNCONFINED: &str = "unconfined";
const LOCALHOST_PREFIX: &str = "localhost/";

/// The reason a pod the node cannot confine is rejected with.
pub const REJECT_REASON: &str = "AppArmor";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AppArmorError {
    #[error("missing localhost apparmor profile name")]
    MissingLocalhostName,
    #[error("unknown apparmor profile type: {0:?}")]
    UnknownType(String),
}

fn from_annotation(pod: &Pod, container: &str) -> Option<AppArmorProfile> {
    let value = pod
        .metadata
        .annotations
        .as_ref()?
        .get(&format!("{ANNOTATION_PREFIX}{container}"))?;
    let of = |t: &str, name: Option<String>| AppArmorProfile {
        type_: t.into(),
        localhost_profile: name,
    };
    match value.as_str() {
        RUNTIME_DEFAULT => Some(of("RuntimeDefault", None)),
        UNCONFINED => Some(of("Unconfined", None)),
        v => v
            .strip_prefix(LOCALHOST_PREFIX)
            .map(|name| of("Localhost", Some(name.to_string()))),
    }
}

/// The profile that applies to `container`, if any says one.
pub fn profile(pod: &Pod, container: &Container) -> Option<AppArmorProfile> {
    container
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
        .or_else(|| from_annotation(pod, &container.name))
        .or_else(|| {
            pod.spec
                .as_ref()?
                .security_context
                .as_ref()?
                .app_armor_profile
                .clone()
        })
}

/// The CRI profile and the deprecated string for `container`; nothing when none applies.
pub fn for_container(
    pod: &Pod,
    container: &Container,
) -> Result<Option<(api::SecurityProfile, String)>, AppArmorError> {
    let Some(p) = profile(pod, container) else {
        return Ok(None);
    };
    let of = |t: ProfileType, name: &str| api::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: name.to_string(),
    };
    Ok(Some(match p.type_.as_str() {
        "RuntimeDefault" => (of(ProfileType::RuntimeDefault, ""), RUNTIME_DEFAULT.into()),
        "Unconfined" => (of(ProfileType::Unconfined, ""), UNCONFINED.into()),
        "Localhost" => {
            let name = p
                .localhost_profile
                .as_deref()
                .ok_or(AppArmorError::MissingLocalhostName)?;
            (
                of(ProfileType::Localhost, name),
                format!("{LOCALHOST_PREFIX}{name}"),
            )
        }
        other => return Err(AppArmorError::UnknownType(other.to_string())),
    }))
}

fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
    })
}

/// Whether the pod asks for any confinement (a profile other than `Unconfined`).
fn required(pod: &Pod) -> bool {
    let confining = |p: Option<&AppArmorProfile>| p.is_some_and(|p| p.type_ != "Unconfined");
    let spec_level = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.app_armor_profile.as_ref());
    confining(spec_level)
        || all_containers(pod).any(|c| {
            confining(
                c.security_context
                    .as_ref()
                    .and_then(|s| s.app_armor_profile.as_ref()),
            )
        })
        || pod
            .metadata
            .annotations
            .iter()
            .flatten()
            .any(|(k, v)| k.starts_with(ANNOTATION_PREFIX) && v != UNCONFINED)
}

/// Whether this kernel enforces AppArmor (runc's test: the securityfs folder exists and the
/// module says it is enabled).
pub fn host_enabled(sys: &Path) -> bool {
    sys.join("kernel/security/apparmor").exists()
        && std::fs::read(sys.join("module/apparmor/parameters/enabled"))
            .is_ok_and(|b| b.starts_with(b"Y"))
}

/// Why a pod's AppArmor confinement cannot be given, in upstream's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unenforceable {
    #[error("Cannot enforce AppArmor: AppArmor is not enabled on the host")]
    HostDisabled,
    #[error("Cannot enforce AppArmor: invalid empty AppArmor profile name: {0:?}")]
    EmptyProfile(String),
}

/// Upstream's AppArmor admission: a pod that asks for confinement on a host that cannot give
/// it, or that names an empty localhost profile, is refused with the returned message.
pub fn admit(pod: &Pod, host_enabled: bool) -> Result<(), Unenforceable> {
    if !required(pod) {
        return Ok(());
    }
    if !host_enabled {
        return Err(Unenforceable::HostDisabled);
    }
    for c in all_containers(pod) {
        if let Some(p) = profile(pod, c)
            && p.type_ == "Localhost"
            && p.localhost_profile
                .as_deref()
                .is_none_or(|n| n.trim().is_empty())
        {
            return Err(Unenforceable::EmptyProfile(
                p.localhost_profile.unwrap_or_default(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSecurityContext, PodSpec, SecurityContext};

    fn pod(annotation: Option<&str>, field: Option<&str>, pod_field: Option<&str>) -> Pod {
        let p = |t: &str| AppArmorProfile {
            type_: t.into(),
            localhost_profile: (t == "Localhost").then(|| "k8s-deny".to_string()),
        };
        let mut pod = Pod {
            spec: Some(PodSpec {
                security_context: Some(PodSecurityContext {
                    app_armor_profile: pod_field.map(p),
                    ..Default::default()
                }),
                containers: vec![Container {
                    name: "c".into(),
                    security_context: Some(SecurityContext {
                        app_armor_profile: field.map(p),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        if let Some(a) = annotation {
            pod.metadata.annotations = Some(
                [(format!("{ANNOTATION_PREFIX}c"), a.to_string())]
                    .into_iter()
                    .collect(),
            );
        }
        pod
    }

    fn cri(pod: &Pod) -> Option<(i32, String, String)> {
        let c = &pod.spec.as_ref().unwrap().containers[0];
        for_container(pod, c)
            .unwrap()
            .map(|(p, s)| (p.profile_type, p.localhost_ref, s))
    }

    #[test]
    fn field_then_annotation_then_pod_field() {
        assert_eq!(cri(&pod(None, None, None)), None);
        assert_eq!(
            cri(&pod(Some("localhost/k8s-x"), None, Some("RuntimeDefault"))),
            Some((
                ProfileType::Localhost as i32,
                "k8s-x".into(),
                "localhost/k8s-x".into()
            ))
        );
        assert_eq!(
            cri(&pod(Some("localhost/k8s-x"), Some("Unconfined"), None)),
            Some((
                ProfileType::Unconfined as i32,
                "".into(),
                "unconfined".into()
            ))
        );
        assert_eq!(
            cri(&pod(None, None, Some("RuntimeDefault"))),
            Some((
                ProfileType::RuntimeDefault as i32,
                "".into(),
                "runtime/default".into()
            ))
        );
        // An annotation upstream does not understand is ignored.
        assert_eq!(cri(&pod(Some("bogus"), None, None)), None);
    }

    #[test]
    fn admission_refuses_confinement_without_apparmor() {
        assert!(admit(&pod(None, None, None), false).is_ok());
        assert!(admit(&pod(Some("unconfined"), Some("Unconfined"), None), false).is_ok());
        for p in [
            pod(None, None, Some("RuntimeDefault")),
            pod(None, Some("Localhost"), None),
            pod(Some("runtime/default"), None, None),
        ] {
            assert_eq!(
                admit(&p, false).unwrap_err().to_string(),
                "Cannot enforce AppArmor: AppArmor is not enabled on the host"
            );
            assert!(admit(&p, true).is_ok());
        }
        let empty = pod(Some("localhost/ "), None, None);
        assert!(
            admit(&empty, true)
                .unwrap_err()
                .to_string()
                .contains("invalid empty AppArmor profile name")
        );
    }

    #[test]
    fn host_detection_reads_the_module_flag() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!host_enabled(dir.path()));
        std::fs::create_dir_all(dir.path().join("kernel/security/apparmor")).unwrap();
        std::fs::create_dir_all(dir.path().join("module/apparmor/parameters")).unwrap();
        let flag = dir.path().join("module/apparmor/parameters/enabled");
        std::fs::write(&flag, "N\n").unwrap();
        assert!(!host_enabled(dir.path()));
        std::fs::write(&flag, "Y\n").unwrap();
        assert!(host_enabled(dir.path()));
    }
}
