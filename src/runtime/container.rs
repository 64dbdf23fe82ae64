//! Builds the CRI container configuration from a container spec.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cm::resources::{milli_cpu_to_quota, milli_cpu_to_shares};
use crate::cri::api;
use crate::pod::paths;
use crate::pod::qos::QosClass;
use crate::quantity::{parse_bytes, parse_cpu_millis};
use crate::runtime::env::{self, EnvError, PodFacts};
use crate::runtime::labels;
use crate::runtime::sandbox::namespace_options;

/// Paths the runtime hides or makes read-only in unprivileged containers (upstream's defaults).
const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error(transparent)]
    Seccomp(#[from] super::seccomp::SeccompError),
    #[error(transparent)]
    AppArmor(#[from] super::apparmor::AppArmorError),
    #[error("container {container}: invalid resource {resource}: {reason}")]
    Resource {
        container: String,
        resource: String,
        reason: String,
    },
}

/// The OOM score adjustment upstream gives each QoS class; burstable containers scale with
/// their share of the node's memory so the biggest requesters are killed last.
pub fn oom_score_adj(qos: QosClass, memory_request: i64, machine_memory: i64) -> i64 {
    match qos {
        QosClass::Guaranteed => -997,
        QosClass::BestEffort => 1000,
        QosClass::Burstable => {
            if machine_memory <= 0 {
                return 999;
            }
            // i128: a request from a manifest can be any i64.
            let adj = 1000 - (1000 * memory_request as i128) / machine_memory as i128;
            adj.clamp(2, 999) as i64
        }
    }
}

fn resource(
    container: &Container,
    which: &str,
    name: &str,
) -> Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    let r = container.resources.as_ref()?;
    let map = if which == "limits" {
        r.limits.as_ref()
    } else {
        r.requests.as_ref()
    };
    map?.get(name).cloned()
}

fn linux_resources(
    container: &Container,
    qos: QosClass,
    p: &ContainerParams<'_>,
) -> Result<api::LinuxContainerResources, ConfigError> {
    container_resources(container, qos, p.machine_memory, p.cgroup_options)
}

/// The cgroup settings a container runs with, from its (allocated) requests and limits.
pub fn container_resources(
    container: &Container,
    qos: QosClass,
    machine_memory: i64,
    cgroup_options: &crate::cm::PodCgroupOptions,
) -> Result<api::LinuxContainerResources, ConfigError> {
    let bad = |res: &str, reason: String| ConfigError::Resource {
        container: container.name.clone(),
        resource: res.to_string(),
        reason,
    };
    let cpu = |which: &str| -> Result<i64, ConfigError> {
        resource(container, which, "cpu")
            .map(|q| parse_cpu_millis(&q).map_err(|e| bad(&format!("{which}.cpu"), e.to_string())))
            .transpose()
            .map(|v| v.unwrap_or(0))
    };
    let mem = |which: &str| -> Result<i64, ConfigError> {
        resource(container, which, "memory")
            .map(|q| parse_bytes(&q).map_err(|e| bad(&format!("{which}.memory"), e.to_string())))
            .transpose()
            .map(|v| v.unwrap_or(0))
    };
    let (cpu_request, cpu_limit) = (cpu("requests")?, cpu("limits")?);
    let (mem_request, mem_limit) = (mem("requests")?, mem("limits")?);
    // A limit without a request means request = limit (API defaulting).
    let cpu_request = if cpu_request == 0 {
        cpu_limit
    } else {
        cpu_request
    };
    let mem_request = if mem_request == 0 {
        mem_limit
    } else {
        mem_request
    };
    let period = cgroup_options.cpu_cfs_period_us;
    let quota = cgroup_options.enforce_cpu_limits && cpu_limit > 0;
    Ok(api::LinuxContainerResources {
        cpu_shares: milli_cpu_to_shares(cpu_request) as i64,
        cpu_period: if quota { period as i64 } else { 0 },
        cpu_quota: if quota {
            milli_cpu_to_quota(cpu_limit, period)
        } else {
            0
        },
        memory_limit_in_bytes: mem_limit,
        oom_score_adj: oom_score_adj(qos, mem_request, machine_memory),
        ..Default::default()
    })
}

// The deprecated `apparmor_profile` string is still set, as upstream does, for runtimes that
// predate the `apparmor` field.
#[allow(deprecated)]
fn security_context(
    pod: &Pod,
    container: &Container,
    seccomp: &super::seccomp::SeccompSettings,
) -> Result<api::LinuxContainerSecurityContext, ConfigError> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = container.security_context.as_ref();
    let privileged = csc.and_then(|s| s.privileged).unwrap_or(false);
    let run_as_user = csc
        .and_then(|s| s.run_as_user)
        .or(psc.and_then(|s| s.run_as_user));
    let run_as_group = csc
        .and_then(|s| s.run_as_group)
        .or(psc.and_then(|s| s.run_as_group));
    let caps = csc.and_then(|s| s.capabilities.as_ref());
    let unmasked = csc.and_then(|s| s.proc_mount.as_deref()) == Some("Unmasked");
    let (masked, readonly) = if privileged || unmasked {
        (vec![], vec![])
    } else {
        (
            MASKED_PATHS.iter().map(|s| s.to_string()).collect(),
            READONLY_PATHS.iter().map(|s| s.to_string()).collect(),
        )
    };
    let apparmor = super::apparmor::for_container(pod, container)?;
    Ok(api::LinuxContainerSecurityContext {
        capabilities: caps.map(|c| api::Capability {
            add_capabilities: c.add.clone().unwrap_or_default(),
            drop_capabilities: c.drop.clone().unwrap_or_default(),
            ..Default::default()
        }),
        privileged,
        namespace_options: Some(namespace_options(pod)),
        run_as_user: run_as_user.map(|value| api::Int64Value { value }),
        run_as_group: run_as_group.map(|value| api::Int64Value { value }),
        readonly_rootfs: csc
            .and_then(|s| s.read_only_root_filesystem)
            .unwrap_or(false),
        supplemental_groups: super::sandbox::supplemental_groups(psc),
        supplemental_groups_policy: supplemental_groups_policy(psc) as i32,
        no_new_privs: csc
            .and_then(|s| s.allow_privilege_escalation)
            .map(|allow| !allow)
            .unwrap_or(false),
        masked_paths: masked,
        readonly_paths: readonly,
        seccomp: Some(seccomp.for_container(pod, container)?),
        apparmor_profile: apparmor.as_ref().map(|a| a.1.clone()).unwrap_or_default(),
        apparmor: apparmor.map(|a| a.0),
        ..Default::default()
    })
}

/// The pod's `supplementalGroupsPolicy` for the CRI. `Strict` only reaches a runtime that
/// reported the feature: admission refuses it elsewhere.
pub fn supplemental_groups_policy(
    psc: Option<&k8s_openapi::api::core::v1::PodSecurityContext>,
) -> api::SupplementalGroupsPolicy {
    match psc.and_then(|s| s.supplemental_groups_policy.as_deref()) {
        Some("Strict") => api::SupplementalGroupsPolicy::Strict,
        _ => api::SupplementalGroupsPolicy::Merge,
    }
}

/// Why a container may not run, by its runAsNonRoot, in upstream's words; `who` names the pod
/// and container.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootRefused {
    #[error("container's runAsUser breaks non-root policy ({who})")]
    RunAsRoot { who: String },
    #[error("container has runAsNonRoot and image will run as root ({who})")]
    ImageRoot { who: String },
    #[error(
        "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root ({who})"
    )]
    ImageUserName { user: String, who: String },
}

/// Upstream's runAsNonRoot check: a container that must not run as root is refused when its
/// effective user is 0, or when only the image decides and the image says root (or gives a
/// name that cannot be checked).
pub fn verify_run_as_non_root(
    pod: &Pod,
    container: &Container,
    image_uid: Option<i64>,
    image_username: &str,
) -> Result<(), RootRefused> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = container.security_context.as_ref();
    let non_root = csc
        .and_then(|s| s.run_as_non_root)
        .or(psc.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    if !non_root {
        return Ok(());
    }
    let m = &pod.metadata;
    let who = format!(
        "pod: \"{}_{}({})\", container: {}",
        m.name.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default(),
        container.name
    );
    match csc
        .and_then(|s| s.run_as_user)
        .or(psc.and_then(|s| s.run_as_user))
    {
        Some(0) => Err(RootRefused::RunAsRoot { who }),
        Some(_) => Ok(()),
        None => match (image_uid, image_username) {
            (Some(0), _) | (None, "") => Err(RootRefused::ImageRoot { who }),
            (None, name) => Err(RootRefused::ImageUserName {
                user: name.to_string(),
                who,
            }),
            (Some(_), _) => Ok(()),
        },
    }
}

pub struct ContainerParams<'a> {
    pub image_ref: &'a str,
    pub restart_count: u32,
    pub qos: QosClass,
    pub machine_memory: i64,
    pub cgroup_options: &'a crate::cm::PodCgroupOptions,
    pub facts: &'a PodFacts,
    pub seccomp: &'a super::seccomp::SeccompSettings,
}

pub fn container_config(
    pod: &Pod,
    container: &Container,
    p: &ContainerParams<'_>,
) -> Result<api::ContainerConfig, ConfigError> {
    let envs = env::container_env(pod, container, p.facts)?;
    let vars: HashMap<String, String> = envs.iter().cloned().collect();
    let expand_all = |list: &Option<Vec<String>>| -> Vec<String> {
        list.iter()
            .flatten()
            .map(|s| crate::expansion::expand(s, &vars))
            .collect()
    };
    Ok(api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: container.name.clone(),
            attempt: p.restart_count,
        }),
        image: Some(api::ImageSpec {
            image: p.image_ref.to_string(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: expand_all(&container.command),
        args: expand_all(&container.args),
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: envs
            .into_iter()
            .map(|(key, value)| api::KeyValue { key, value })
            .collect(),
        labels: labels::container_labels(pod, container)
            .into_iter()
            .collect(),
        annotations: labels::container_annotations(pod, container, p.restart_count)
            .into_iter()
            .collect(),
        log_path: paths::container_log_path(&container.name, p.restart_count)
            .to_string_lossy()
            .into_owned(),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(linux_resources(container, p.qos, p)?),
            security_context: Some(security_context(pod, container, p.seccomp)?),
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supplemental_groups_policy_reaches_the_cri() {
        use k8s_openapi::api::core::v1::PodSecurityContext;
        let psc = |p: Option<&str>| PodSecurityContext {
            supplemental_groups_policy: p.map(String::from),
            ..Default::default()
        };
        assert_eq!(
            supplemental_groups_policy(None),
            api::SupplementalGroupsPolicy::Merge
        );
        assert_eq!(
            supplemental_groups_policy(Some(&psc(Some("Merge")))),
            api::SupplementalGroupsPolicy::Merge
        );
        assert_eq!(
            supplemental_groups_policy(Some(&psc(Some("Strict")))),
            api::SupplementalGroupsPolicy::Strict
        );
    }

    #[test]
    fn run_as_non_root_rules() {
        use k8s_openapi::api::core::v1::SecurityContext;
        let pod = Pod::default();
        let c = |non_root: Option<bool>, user: Option<i64>| Container {
            name: "c".into(),
            security_context: Some(SecurityContext {
                run_as_non_root: non_root,
                run_as_user: user,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(verify_run_as_non_root(&pod, &c(None, None), None, "").is_ok());
        assert!(verify_run_as_non_root(&pod, &c(Some(true), Some(0)), Some(1000), "").is_err());
        assert!(verify_run_as_non_root(&pod, &c(Some(true), Some(1000)), Some(0), "").is_ok());
        let root = verify_run_as_non_root(&pod, &c(Some(true), None), None, "")
            .unwrap_err()
            .to_string();
        assert!(root.contains("image will run as root"), "{root}");
        assert!(verify_run_as_non_root(&pod, &c(Some(true), None), None, "app").is_err());
        assert!(verify_run_as_non_root(&pod, &c(Some(true), None), Some(1000), "").is_ok());
    }

    #[test]
    fn oom_adj_per_qos() {
        assert_eq!(oom_score_adj(QosClass::Guaranteed, 0, 100), -997);
        assert_eq!(oom_score_adj(QosClass::BestEffort, 0, 100), 1000);
        assert_eq!(oom_score_adj(QosClass::Burstable, 50, 100), 500);
        assert_eq!(oom_score_adj(QosClass::Burstable, 100, 100), 2);
        assert_eq!(oom_score_adj(QosClass::Burstable, 0, 100), 999);
        assert_eq!(oom_score_adj(QosClass::Burstable, i64::MAX, 100), 2);
    }

    #[test]
    fn command_and_args_are_expanded() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        let c = Container {
            name: "c".into(),
            image: Some("busybox".into()),
            command: Some(vec!["echo".into(), "$(MSG)".into()]),
            env: Some(vec![k8s_openapi::api::core::v1::EnvVar {
                name: "MSG".into(),
                value: Some("hello".into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let facts = PodFacts::default();
        let cfg = container_config(
            &pod,
            &c,
            &ContainerParams {
                image_ref: "sha256:abc",
                restart_count: 1,
                qos: QosClass::BestEffort,
                machine_memory: 1 << 30,
                cgroup_options: &crate::cm::PodCgroupOptions::default(),
                facts: &facts,
                seccomp: &Default::default(),
            },
        )
        .unwrap();
        assert_eq!(cfg.command, vec!["echo", "hello"]);
        assert_eq!(cfg.log_path, "c/1.log");
        assert_eq!(cfg.metadata.unwrap().attempt, 1);
    }
}
