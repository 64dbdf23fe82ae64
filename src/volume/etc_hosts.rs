//! The kubelet-managed /etc/hosts of a pod's containers.

use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::MountError;
use crate::cri::api;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> MountError + '_ {
    move |source| MountError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The kubelet-managed /etc/hosts: localhost entries, the pod's own name on each pod IP, and
/// the pod's hostAliases; host-network pods get the node's file plus their aliases.
pub fn etc_hosts_content(
    pod: &Pod,
    pod_ips: &[String],
    cluster_domain: &str,
    node_hosts: &str,
) -> String {
    let spec = pod.spec.as_ref();
    let mut out = String::new();
    if spec.and_then(|s| s.host_network).unwrap_or(false) {
        out.push_str(node_hosts);
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
    } else {
        out.push_str(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
        );
        let hostname = crate::pod::hostname::pod_hostname(pod);
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let domain = spec
            .and_then(|s| s.subdomain.as_deref())
            .filter(|d| !d.is_empty() && !cluster_domain.is_empty())
            .map(|sub| format!("{sub}.{ns}.svc.{cluster_domain}"));
        for ip in pod_ips {
            match &domain {
                Some(d) => out.push_str(&format!("{ip}\t{hostname}.{d}\t{hostname}\n")),
                None => out.push_str(&format!("{ip}\t{hostname}\n")),
            }
        }
    }
    let aliases = spec.and_then(|s| s.host_aliases.as_deref()).unwrap_or(&[]);
    if !aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.clone().unwrap_or_default().join("\t");
            out.push_str(&format!("{}\t{names}\n", a.ip));
        }
    }
    out
}

/// Writes the pod's hosts file and returns its mount, unless the container mounts its own
/// /etc/hosts or the pod has no IP yet (upstream's conditions).
pub fn etc_hosts_mount(
    pod: &Pod,
    container: &Container,
    pod_dir: &Path,
    pod_ips: &[String],
    cluster_domain: &str,
) -> Result<Option<api::Mount>, MountError> {
    let own = container
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == "/etc/hosts");
    if own || pod_ips.is_empty() {
        return Ok(None);
    }
    let node_hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let content = etc_hosts_content(pod, pod_ips, cluster_domain, &node_hosts);
    let dir = pod_dir;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let file = dir.join("etc-hosts");
    let tmp = dir.join(".etc-hosts.tmp");
    std::fs::write(&tmp, content).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &file).map_err(io(&file))?;
    Ok(Some(api::Mount {
        container_path: "/etc/hosts".into(),
        host_path: file.to_string_lossy().into_owned(),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod_with(volumes: Vec<k8s_openapi::api::core::v1::Volume>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u1".into());
        pod.spec = Some(PodSpec {
            volumes: Some(volumes),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn managed_hosts_file() {
        use k8s_openapi::api::core::v1::HostAlias;
        let mut pod = pod_with(vec![]);
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("ns".into());
        let spec = pod.spec.as_mut().unwrap();
        spec.subdomain = Some("sub".into());
        spec.host_aliases = Some(vec![HostAlias {
            ip: "1.2.3.4".into(),
            hostnames: Some(vec!["foo".into(), "bar".into()]),
        }]);
        let text = etc_hosts_content(&pod, &["10.0.0.7".into()], "cluster.local", "");
        assert!(text.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(
            text.contains("10.0.0.7\tweb.sub.ns.svc.cluster.local\tweb\n"),
            "{text}"
        );
        assert!(
            text.ends_with("\n# Entries added by HostAliases.\n1.2.3.4\tfoo\tbar\n"),
            "{text}"
        );
        pod.spec.as_mut().unwrap().host_network = Some(true);
        let text = etc_hosts_content(
            &pod,
            &["10.0.0.7".into()],
            "cluster.local",
            "127.0.0.1 node\n",
        );
        assert!(
            text.starts_with("127.0.0.1 node\n\n# Entries added by HostAliases."),
            "{text}"
        );
    }
}
