//! The subset of upstream pod validation the kubelet needs for pods it reads itself.
//!
//! Messages use upstream's field-error wording (`spec.containers[0].image: Required value`) so
//! operators see the same text as from `kubectl apply`.

use std::collections::HashSet;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use crate::names::{
    DNS1123_LABEL_MESSAGE, DNS1123_SUBDOMAIN_MESSAGE, is_dns1123_label, is_dns1123_subdomain,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    Required,
    Invalid {
        value: String,
        detail: String,
    },
    Duplicate {
        value: String,
    },
    NotSupported {
        value: String,
        supported: &'static [&'static str],
    },
    NotFound {
        value: String,
    },
    Forbidden {
        detail: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub kind: FieldErrorKind,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.field)?;
        match &self.kind {
            FieldErrorKind::Required => write!(f, "Required value"),
            FieldErrorKind::Invalid { value, detail } => {
                write!(f, "Invalid value: {value:?}: {detail}")
            }
            FieldErrorKind::Duplicate { value } => write!(f, "Duplicate value: {value:?}"),
            FieldErrorKind::NotSupported { value, supported } => {
                let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "Unsupported value: {value:?}: supported values: {}",
                    list.join(", ")
                )
            }
            FieldErrorKind::NotFound { value } => write!(f, "Not found: {value:?}"),
            FieldErrorKind::Forbidden { detail } => write!(f, "Forbidden: {detail}"),
        }
    }
}

/// All problems found in one pod, rendered like upstream's aggregate (`[a, b]` when several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        match parts.len() {
            1 => write!(f, "{}", parts[0]),
            _ => write!(f, "[{}]", parts.join(", ")),
        }
    }
}

impl std::error::Error for FieldErrors {}

const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
const INIT_RESTART_POLICIES: &[&str] = &["Always"];
const DNS_POLICIES: &[&str] = &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
const TERMINATION_MESSAGE_POLICIES: &[&str] = &["File", "FallbackToLogsOnError"];
const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];

struct Collector(Vec<FieldError>);

impl Collector {
    fn push(&mut self, field: impl Into<String>, kind: FieldErrorKind) {
        self.0.push(FieldError {
            field: field.into(),
            kind,
        });
    }

    fn required(&mut self, field: impl Into<String>) {
        self.push(field, FieldErrorKind::Required);
    }

    fn one_of(&mut self, field: String, value: Option<&str>, supported: &'static [&'static str]) {
        if let Some(v) = value
            && !supported.contains(&v)
        {
            self.push(
                field,
                FieldErrorKind::NotSupported {
                    value: v.to_string(),
                    supported,
                },
            );
        }
    }
}

/// Checks a defaulted pod; `Ok` means the kubelet can run it.
pub fn validate_pod(pod: &Pod) -> Result<(), FieldErrors> {
    let mut errs = Collector(Vec::new());
    validate_meta(pod, &mut errs);
    match pod.spec.as_ref() {
        Some(spec) => validate_spec(spec, &mut errs),
        None => errs.required("spec"),
    }
    if errs.0.is_empty() {
        Ok(())
    } else {
        Err(FieldErrors(errs.0))
    }
}

fn validate_meta(pod: &Pod, errs: &mut Collector) {
    match pod.metadata.name.as_deref() {
        None | Some("") => errs.required("metadata.name"),
        Some(name) if !is_dns1123_subdomain(name) => errs.push(
            "metadata.name",
            FieldErrorKind::Invalid {
                value: name.to_string(),
                detail: DNS1123_SUBDOMAIN_MESSAGE.to_string(),
            },
        ),
        Some(_) => {}
    }
    match pod.metadata.namespace.as_deref() {
        None | Some("") => errs.required("metadata.namespace"),
        Some(ns) if !is_dns1123_label(ns) => errs.push("metadata.namespace", invalid_label(ns)),
        Some(_) => {}
    }
}

fn validate_spec(spec: &PodSpec, errs: &mut Collector) {
    if spec.containers.is_empty() {
        errs.required("spec.containers");
    }
    errs.one_of(
        "spec.restartPolicy".into(),
        spec.restart_policy.as_deref(),
        RESTART_POLICIES,
    );
    errs.one_of(
        "spec.dnsPolicy".into(),
        spec.dns_policy.as_deref(),
        DNS_POLICIES,
    );
    if let Some(g) = spec.termination_grace_period_seconds
        && g < 0
    {
        errs.push(
            "spec.terminationGracePeriodSeconds",
            FieldErrorKind::Invalid {
                value: g.to_string(),
                detail: "must be greater than or equal to 0".to_string(),
            },
        );
    }
    if let Some(d) = spec.active_deadline_seconds
        && d <= 0
    {
        errs.push(
            "spec.activeDeadlineSeconds",
            FieldErrorKind::Invalid {
                value: d.to_string(),
                detail: "must be greater than 0".to_string(),
            },
        );
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.push(
            "spec.ephemeralContainers",
            FieldErrorKind::Forbidden {
                detail: "cannot be set on create".to_string(),
            },
        );
    }

    let volumes = validate_volumes(spec, errs);
    let mut names = HashSet::new();
    let inits = spec.init_containers.iter().flatten();
    for (i, c) in inits.enumerate() {
        let path = format!("spec.initContainers[{i}]");
        validate_container(c, &path, &volumes, &mut names, errs);
        // `Always` makes it a sidecar (see runtime/sidecars.rs); nothing else is allowed.
        errs.one_of(
            format!("{path}.restartPolicy"),
            c.restart_policy.as_deref(),
            INIT_RESTART_POLICIES,
        );
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let path = format!("spec.containers[{i}]");
        validate_container(c, &path, &volumes, &mut names, errs);
    }
}

fn validate_volumes<'a>(spec: &'a PodSpec, errs: &mut Collector) -> HashSet<&'a str> {
    let mut names = HashSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let field = format!("spec.volumes[{i}].name");
        if v.name.is_empty() {
            errs.required(field);
        } else if !is_dns1123_label(&v.name) {
            errs.push(field, invalid_label(&v.name));
        } else if !names.insert(v.name.as_str()) {
            errs.push(
                field,
                FieldErrorKind::Duplicate {
                    value: v.name.clone(),
                },
            );
        }
    }
    names
}

fn invalid_label(value: &str) -> FieldErrorKind {
    FieldErrorKind::Invalid {
        value: value.to_string(),
        detail: DNS1123_LABEL_MESSAGE.to_string(),
    }
}

fn validate_container<'a>(
    c: &'a Container,
    path: &str,
    volumes: &HashSet<&str>,
    names: &mut HashSet<&'a str>,
    errs: &mut Collector,
) {
    if c.name.is_empty() {
        errs.required(format!("{path}.name"));
    } else if !is_dns1123_label(&c.name) {
        errs.push(format!("{path}.name"), invalid_label(&c.name));
    } else if !names.insert(c.name.as_str()) {
        errs.push(
            format!("{path}.name"),
            FieldErrorKind::Duplicate {
                value: c.name.clone(),
            },
        );
    }
    if c.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
        errs.required(format!("{path}.image"));
    }
    errs.one_of(
        format!("{path}.imagePullPolicy"),
        c.image_pull_policy.as_deref(),
        PULL_POLICIES,
    );
    errs.one_of(
        format!("{path}.terminationMessagePolicy"),
        c.termination_message_policy.as_deref(),
        TERMINATION_MESSAGE_POLICIES,
    );
    for (j, p) in c.ports.iter().flatten().enumerate() {
        if !(1..=65535).contains(&p.container_port) {
            errs.push(
                format!("{path}.ports[{j}].containerPort"),
                FieldErrorKind::Invalid {
                    value: p.container_port.to_string(),
                    detail: "must be between 1 and 65535, inclusive".to_string(),
                },
            );
        }
        if let Some(h) = p.host_port
            && !(0..=65535).contains(&h)
        {
            errs.push(
                format!("{path}.ports[{j}].hostPort"),
                FieldErrorKind::Invalid {
                    value: h.to_string(),
                    detail: "must be between 1 and 65535, inclusive".to_string(),
                },
            );
        }
        errs.one_of(
            format!("{path}.ports[{j}].protocol"),
            p.protocol.as_deref(),
            PROTOCOLS,
        );
    }
    for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
        if m.name.is_empty() {
            errs.required(format!("{path}.volumeMounts[{j}].name"));
        } else if !volumes.contains(m.name.as_str()) {
            errs.push(
                format!("{path}.volumeMounts[{j}].name"),
                FieldErrorKind::NotFound {
                    value: m.name.clone(),
                },
            );
        }
        if m.mount_path.is_empty() {
            errs.required(format!("{path}.volumeMounts[{j}].mountPath"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Volume, VolumeMount};

    fn valid_pod() -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web-node1".into());
        pod.metadata.namespace = Some("default".into());
        pod.spec = Some(PodSpec {
            containers: vec![Container {
                name: "web".into(),
                image: Some("nginx:1.27".into()),
                ..Default::default()
            }],
            restart_policy: Some("Always".into()),
            ..Default::default()
        });
        pod
    }

    fn errors(pod: &Pod) -> String {
        match validate_pod(pod) {
            Ok(()) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn valid_pod_passes() {
        assert_eq!(validate_pod(&valid_pod()), Ok(()));
    }

    /// A static pod's name gets `-<node name>` appended, so long node names make long pod
    /// names; like upstream, only the 253-character total counts.
    #[test]
    fn pod_name_length_is_a_subdomain_length() {
        let mut pod = valid_pod();
        pod.metadata.name = Some(format!("kube-proxy-{}", "n".repeat(60)));
        assert_eq!(validate_pod(&pod), Ok(()));
        pod.metadata.name = Some("p".repeat(254));
        assert!(
            errors(&pod).starts_with("metadata.name: Invalid value: \"ppp"),
            "{}",
            errors(&pod)
        );
        pod.metadata.namespace = Some("n".repeat(64));
        pod.metadata.name = Some("web".into());
        assert!(
            errors(&pod).contains("metadata.namespace: Invalid value: \"nnnn"),
            "{}",
            errors(&pod)
        );
    }

    #[test]
    fn missing_image() {
        let mut pod = valid_pod();
        if let Some(s) = pod.spec.as_mut() {
            s.containers[0].image = None;
        }
        assert_eq!(errors(&pod), "spec.containers[0].image: Required value");
    }

    #[test]
    fn duplicate_names_across_init_and_regular() {
        let mut pod = valid_pod();
        if let Some(s) = pod.spec.as_mut() {
            s.init_containers = Some(vec![Container {
                name: "web".into(),
                image: Some("busybox".into()),
                ..Default::default()
            }]);
        }
        assert_eq!(
            errors(&pod),
            "spec.containers[0].name: Duplicate value: \"web\""
        );
    }

    #[test]
    fn bad_restart_policy_and_grace_and_name() {
        let mut pod = valid_pod();
        if let Some(s) = pod.spec.as_mut() {
            s.restart_policy = Some("Sometimes".into());
            s.termination_grace_period_seconds = Some(-1);
            s.containers[0].name = "Web".into();
        }
        let e = errors(&pod);
        assert!(e.starts_with('['), "{e}");
        assert!(
            e.contains(
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \
                 \"Always\", \"OnFailure\", \"Never\""
            ),
            "{e}"
        );
        assert!(
            e.contains("spec.terminationGracePeriodSeconds: Invalid value: \"-1\""),
            "{e}"
        );
        assert!(
            e.contains("spec.containers[0].name: Invalid value: \"Web\""),
            "{e}"
        );
    }

    #[test]
    fn init_containers_may_only_be_sidecars_by_always() {
        let mut pod = valid_pod();
        let init = |policy: &str| Container {
            name: "proxy".into(),
            image: Some("busybox".into()),
            restart_policy: Some(policy.into()),
            ..Default::default()
        };
        if let Some(s) = pod.spec.as_mut() {
            s.init_containers = Some(vec![init("Always")]);
        }
        assert_eq!(validate_pod(&pod), Ok(()));
        if let Some(s) = pod.spec.as_mut() {
            s.init_containers = Some(vec![init("Never")]);
        }
        assert_eq!(
            errors(&pod),
            "spec.initContainers[0].restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""
        );
    }

    #[test]
    fn no_containers_and_no_name() {
        let mut pod = valid_pod();
        pod.metadata.name = None;
        if let Some(s) = pod.spec.as_mut() {
            s.containers.clear();
        }
        assert_eq!(
            errors(&pod),
            "[metadata.name: Required value, spec.containers: Required value]"
        );
    }

    #[test]
    fn volume_mount_must_reference_volume() {
        let mut pod = valid_pod();
        if let Some(s) = pod.spec.as_mut() {
            s.volumes = Some(vec![Volume {
                name: "data".into(),
                ..Default::default()
            }]);
            s.containers[0].volume_mounts = Some(vec![
                VolumeMount {
                    name: "data".into(),
                    mount_path: "/data".into(),
                    ..Default::default()
                },
                VolumeMount {
                    name: "logs".into(),
                    mount_path: "/logs".into(),
                    ..Default::default()
                },
            ]);
        }
        assert_eq!(
            errors(&pod),
            "spec.containers[0].volumeMounts[1].name: Not found: \"logs\""
        );
    }
}
