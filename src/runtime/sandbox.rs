//! Builds the CRI sandbox configuration for a pod.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

use crate::cri::api;
use crate::pod::paths;
use crate::runtime::dns::{DnsSettings, pod_dns_config};
use crate::runtime::labels;

pub fn namespace_options(pod: &Pod) -> api::NamespaceOption {
    let spec = pod.spec.as_ref();
    let flag = |f: Option<bool>| f.unwrap_or(false);
    let mode = |node: bool, fallback: api::NamespaceMode| {
        if node {
            api::NamespaceMode::Node
        } else {
            fallback
        }
    };
    let shared_pid = flag(spec.and_then(|s| s.share_process_namespace));
    api::NamespaceOption {
        network: mode(
            flag(spec.and_then(|s| s.host_network)),
            api::NamespaceMode::Pod,
        ) as i32,
        pid: mode(
            flag(spec.and_then(|s| s.host_pid)),
            if shared_pid {
                api::NamespaceMode::Pod
            } else {
                api::NamespaceMode::Container
            },
        ) as i32,
        ipc: mode(flag(spec.and_then(|s| s.host_ipc)), api::NamespaceMode::Pod) as i32,
        ..Default::default()
    }
}

pub struct SandboxParams<'a> {
    pub logs_root: &'a Path,
    pub cgroup_parent: &'a str,
    pub dns: &'a DnsSettings,
}

pub fn sandbox_config(pod: &Pod, attempt: u32, p: &SandboxParams<'_>) -> api::PodSandboxConfig {
    let meta = &pod.metadata;
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let uid = meta.uid.clone().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let log_dir = paths::pod_log_dir(p.logs_root, &namespace, &name, &uid);

    let mut port_mappings = Vec::new();
    for c in spec.map(|s| s.containers.as_slice()).unwrap_or(&[]) {
        for port in c.ports.iter().flatten() {
            port_mappings.push(api::PortMapping {
                protocol: protocol(port.protocol.as_deref()) as i32,
                container_port: port.container_port,
                host_port: port.host_port.unwrap_or(0),
                host_ip: port.host_ip.clone().unwrap_or_default(),
            });
        }
    }

    let psc = spec.and_then(|s| s.security_context.as_ref());
    let security_context = api::LinuxSandboxSecurityContext {
        namespace_options: Some(namespace_options(pod)),
        run_as_user: psc
            .and_then(|s| s.run_as_user)
            .map(|value| api::Int64Value { value }),
        run_as_group: psc
            .and_then(|s| s.run_as_group)
            .map(|value| api::Int64Value { value }),
        supplemental_groups: supplemental_groups(psc),
        // Runtimes refuse privileged containers in an unprivileged sandbox.
        privileged: has_privileged_container(pod),
        ..Default::default()
    };
    let sysctls = psc
        .and_then(|s| s.sysctls.as_ref())
        .map(|list| {
            list.iter()
                .map(|s| (s.name.clone(), s.value.clone()))
                .collect()
        })
        .unwrap_or_default();

    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name,
            uid,
            namespace,
            attempt,
        }),
        hostname: crate::pod::hostname::pod_hostname(pod),
        log_directory: log_dir.to_string_lossy().into_owned(),
        dns_config: Some(pod_dns_config(pod, p.dns)),
        port_mappings,
        labels: labels::pod_labels(pod).into_iter().collect(),
        annotations: meta
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: p.cgroup_parent.to_string(),
            security_context: Some(security_context),
            sysctls,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn has_privileged_container(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        })
}

pub fn protocol(p: Option<&str>) -> api::Protocol {
    match p {
        Some("UDP") => api::Protocol::Udp,
        Some("SCTP") => api::Protocol::Sctp,
        _ => api::Protocol::Tcp,
    }
}

/// The pod's `fsGroup` first, then its `supplementalGroups`, as upstream hands them to the
/// runtime: a container must be able to read what the volumes give to its fsGroup.
pub fn supplemental_groups(
    psc: Option<&k8s_openapi::api::core::v1::PodSecurityContext>,
) -> Vec<i64> {
    let Some(psc) = psc else {
        return vec![];
    };
    psc.fs_group
        .into_iter()
        .chain(psc.supplemental_groups.iter().flatten().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_group_comes_first_among_supplemental_groups() {
        use k8s_openapi::api::core::v1::PodSecurityContext;
        assert!(supplemental_groups(None).is_empty());
        let psc = PodSecurityContext {
            fs_group: Some(1001),
            supplemental_groups: Some(vec![5, 6]),
            ..Default::default()
        };
        assert_eq!(supplemental_groups(Some(&psc)), vec![1001, 5, 6]);
    }
    #[test]
    fn sandbox_carries_identity_and_log_dir() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web-n1".into());
        pod.metadata.namespace = Some("default".into());
        pod.metadata.uid = Some("u1".into());
        let dns = DnsSettings::default();
        let cfg = sandbox_config(
            &pod,
            2,
            &SandboxParams {
                logs_root: Path::new("/var/log/pods"),
                cgroup_parent: "/kubepods/besteffort/podu1",
                dns: &dns,
            },
        );
        assert_eq!(cfg.log_directory, "/var/log/pods/default_web-n1_u1");
        assert_eq!(cfg.metadata.unwrap().attempt, 2);
        assert_eq!(cfg.labels[labels::POD_UID], "u1");
        assert_eq!(
            cfg.linux.unwrap().cgroup_parent,
            "/kubepods/besteffort/podu1"
        );
    }
}
