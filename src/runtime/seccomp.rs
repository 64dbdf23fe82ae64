//! The seccomp profile each container and sandbox gets, as upstream v1.34 picks it: the
//! container's `seccompProfile` wins over the pod's; with neither, `seccompDefault` decides
//! between the runtime's default profile and none. The old `seccomp.security.alpha...`
//! annotations are not read: kubelets ignore them since v1.25 (an API server of v1.19–v1.26
//! copies them into the fields, which is how they still take effect through the API).

use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, SeccompProfile};

use crate::cri::api;
use crate::cri::api::security_profile::ProfileType;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SeccompError {
    /// Upstream's message, word for word.
    #[error("localhostProfile must be set if seccompProfile type is Localhost.")]
    MissingLocalhostProfile,
}

#[derive(Clone, Debug, Default)]
pub struct SeccompSettings {
    /// `<root-dir>/seccomp`: where `Localhost` profiles are looked up.
    pub profile_root: PathBuf,
    /// `seccompDefault`: `RuntimeDefault` for pods and containers that set nothing.
    pub default_runtime: bool,
}

impl SeccompSettings {
    pub fn new(root_dir: &Path, seccomp_default: bool) -> Self {
        SeccompSettings {
            profile_root: root_dir.join("seccomp"),
            default_runtime: seccomp_default,
        }
    }

    fn profile_of(
        &self,
        field: Option<&SeccompProfile>,
    ) -> Result<api::SecurityProfile, SeccompError> {
        let of = |t: ProfileType| api::SecurityProfile {
            profile_type: t as i32,
            localhost_ref: String::new(),
        };
        let Some(field) = field else {
            return Ok(of(if self.default_runtime {
                ProfileType::RuntimeDefault
            } else {
                ProfileType::Unconfined
            }));
        };
        match field.type_.as_str() {
            "RuntimeDefault" => Ok(of(ProfileType::RuntimeDefault)),
            "Localhost" => {
                let name = field
                    .localhost_profile
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .ok_or(SeccompError::MissingLocalhostProfile)?;
                Ok(api::SecurityProfile {
                    profile_type: ProfileType::Localhost as i32,
                    localhost_ref: join_below(&self.profile_root, name)
                        .to_string_lossy()
                        .into_owned(),
                })
            }
            // Upstream treats anything else (Unconfined, or a type a newer API added) as none.
            _ => Ok(of(ProfileType::Unconfined)),
        }
    }

    /// The profile of one container: its own field, else the pod's, else the default.
    pub fn for_container(
        &self,
        pod: &Pod,
        container: &Container,
    ) -> Result<api::SecurityProfile, SeccompError> {
        let own = container
            .security_context
            .as_ref()
            .and_then(|s| s.seccomp_profile.as_ref());
        self.profile_of(own.or_else(|| pod_field(pod)))
    }

    /// The sandbox's profile: the pod's field, else the default.
    pub fn for_sandbox(&self, pod: &Pod) -> Result<api::SecurityProfile, SeccompError> {
        self.profile_of(pod_field(pod))
    }
}

fn pod_field(pod: &Pod) -> Option<&SeccompProfile> {
    pod.spec
        .as_ref()?
        .security_context
        .as_ref()?
        .seccomp_profile
        .as_ref()
}

/// `root` joined with `name` the way Go's `filepath.Join` does it: a leading `/` does not
/// replace the root and `..` is resolved lexically, so a profile name from a static pod (which
/// no API server validated) cannot point above the profile folder.
fn join_below(root: &Path, name: &str) -> PathBuf {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in Path::new(name).components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    parts.iter().fold(root.to_path_buf(), |p, s| p.join(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSecurityContext, PodSpec, SecurityContext};

    fn field(t: &str, name: Option<&str>) -> SeccompProfile {
        SeccompProfile {
            type_: t.into(),
            localhost_profile: name.map(String::from),
        }
    }

    fn pod(pod_level: Option<SeccompProfile>, container_level: Option<SeccompProfile>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                security_context: Some(PodSecurityContext {
                    seccomp_profile: pod_level,
                    ..Default::default()
                }),
                containers: vec![Container {
                    name: "c".into(),
                    security_context: Some(SecurityContext {
                        seccomp_profile: container_level,
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn kind(p: &api::SecurityProfile) -> ProfileType {
        ProfileType::try_from(p.profile_type).unwrap()
    }

    #[test]
    fn container_field_wins_then_pod_then_default() {
        let off = SeccompSettings::new(Path::new("/var/lib/kubelet"), false);
        let on = SeccompSettings::new(Path::new("/var/lib/kubelet"), true);
        let p = pod(None, None);
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            kind(&off.for_container(&p, c).unwrap()),
            ProfileType::Unconfined
        );
        assert_eq!(
            kind(&on.for_container(&p, c).unwrap()),
            ProfileType::RuntimeDefault
        );
        assert_eq!(
            kind(&on.for_sandbox(&p).unwrap()),
            ProfileType::RuntimeDefault
        );

        let p = pod(Some(field("RuntimeDefault", None)), None);
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            kind(&off.for_container(&p, c).unwrap()),
            ProfileType::RuntimeDefault
        );
        assert_eq!(
            kind(&off.for_sandbox(&p).unwrap()),
            ProfileType::RuntimeDefault
        );

        let p = pod(
            Some(field("RuntimeDefault", None)),
            Some(field("Unconfined", None)),
        );
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            kind(&on.for_container(&p, c).unwrap()),
            ProfileType::Unconfined
        );
        assert_eq!(
            kind(&on.for_sandbox(&p).unwrap()),
            ProfileType::RuntimeDefault
        );
    }

    #[test]
    fn localhost_profiles_live_under_the_root_dir() {
        let s = SeccompSettings::new(Path::new("/var/lib/kubelet"), false);
        let p = pod(None, Some(field("Localhost", Some("profiles/deny.json"))));
        let c = &p.spec.as_ref().unwrap().containers[0];
        let got = s.for_container(&p, c).unwrap();
        assert_eq!(kind(&got), ProfileType::Localhost);
        assert_eq!(
            got.localhost_ref,
            "/var/lib/kubelet/seccomp/profiles/deny.json"
        );

        let p = pod(None, Some(field("Localhost", Some("/../../etc/x.json"))));
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            s.for_container(&p, c).unwrap().localhost_ref,
            "/var/lib/kubelet/seccomp/etc/x.json"
        );

        let p = pod(None, Some(field("Localhost", None)));
        let c = &p.spec.as_ref().unwrap().containers[0];
        let err = s.for_container(&p, c).unwrap_err();
        assert_eq!(
            err.to_string(),
            "localhostProfile must be set if seccompProfile type is Localhost."
        );
    }

    #[test]
    fn annotations_are_ignored_as_in_upstream_since_v1_25() {
        let s = SeccompSettings::new(Path::new("/r"), false);
        let mut p = pod(None, None);
        p.metadata.annotations = Some(
            [
                (
                    "seccomp.security.alpha.kubernetes.io/pod",
                    "runtime/default",
                ),
                (
                    "container.seccomp.security.alpha.kubernetes.io/c",
                    "runtime/default",
                ),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            kind(&s.for_container(&p, c).unwrap()),
            ProfileType::Unconfined
        );
    }
}
