//! A pod's hostname, and with `setHostnameAsFQDN` the kernel hostname of a pod with a
//! subdomain: its fully qualified name `<hostname>.<subdomain>.<namespace>.svc.<clusterDomain>`.

use k8s_openapi::api::core::v1::Pod;

/// Hostnames are DNS labels: at most 63 bytes, no trailing '-' or '.' after truncation.
fn truncate_hostname(name: &str) -> String {
    let mut h: String = name.chars().take(63).collect();
    while h.ends_with(['-', '.']) {
        h.pop();
    }
    h
}

/// The hostname the sandbox gets. Host-network pods share the node's UTS namespace, where
/// the runtime must not set one, so they get none (like upstream).
pub fn pod_hostname(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.host_network).unwrap_or(false) {
        return String::new();
    }
    let name = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
        .or(pod.metadata.name.as_deref())
        .unwrap_or_default();
    truncate_hostname(name)
}

/// The kernel's nodename field holds 64 bytes plus the terminating NUL.
const FQDN_MAX_LEN: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HostnameError {
    #[error(
        "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long ({FQDN_MAX_LEN} characters is the max, {} characters requested)",
        fqdn.len()
    )]
    FqdnTooLong { fqdn: String },
}

/// The pod's DNS domain, which only a pod with a subdomain has.
pub fn pod_domain(pod: &Pod, cluster_domain: &str) -> Option<String> {
    let sub = pod
        .spec
        .as_ref()
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())?;
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    Some(format!("{sub}.{ns}.svc.{cluster_domain}"))
}

/// The hostname the sandbox gets: the pod's hostname, or its FQDN when it asks for one and has
/// a domain. Host-network pods get none either way.
pub fn kernel_hostname(pod: &Pod, cluster_domain: &str) -> Result<String, HostnameError> {
    let hostname = pod_hostname(pod);
    let as_fqdn = pod
        .spec
        .as_ref()
        .and_then(|s| s.set_hostname_as_fqdn)
        .unwrap_or(false);
    if hostname.is_empty() || !as_fqdn {
        return Ok(hostname);
    }
    let Some(domain) = pod_domain(pod, cluster_domain) else {
        return Ok(hostname);
    };
    let fqdn = format!("{hostname}.{domain}");
    if fqdn.len() > FQDN_MAX_LEN {
        return Err(HostnameError::FqdnTooLong { fqdn });
    }
    Ok(fqdn)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn hostname_is_truncated_label() {
        let mut pod = Pod::default();
        pod.metadata.name = Some(format!("{}-x", "a".repeat(62)));
        assert_eq!(pod_hostname(&pod), "a".repeat(62));
        pod.spec = Some(PodSpec {
            host_network: Some(true),
            ..Default::default()
        });
        assert_eq!(pod_hostname(&pod), "");
    }

    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(name: &str, sub: Option<&str>, fqdn: Option<bool>) -> Pod {
        let mut p = Pod {
            spec: Some(PodSpec {
                subdomain: sub.map(str::to_string),
                set_hostname_as_fqdn: fqdn,
                ..Default::default()
            }),
            ..Default::default()
        };
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns1".into());
        p
    }

    #[test]
    fn fqdn_only_with_a_subdomain_and_the_flag() {
        let d = "cluster.local";
        assert_eq!(
            kernel_hostname(&pod("web", None, Some(true)), d).unwrap(),
            "web"
        );
        assert_eq!(
            kernel_hostname(&pod("web", Some("s"), None), d).unwrap(),
            "web"
        );
        assert_eq!(
            kernel_hostname(&pod("web", Some("s"), Some(true)), d).unwrap(),
            "web.s.ns1.svc.cluster.local"
        );
        let mut host_net = pod("web", Some("s"), Some(true));
        host_net.spec.as_mut().unwrap().host_network = Some(true);
        assert_eq!(kernel_hostname(&host_net, d).unwrap(), "");
    }

    #[test]
    fn fqdn_longer_than_64_is_refused_with_upstreams_message() {
        // ".s.ns1.svc.cluster.local" is 24 characters: a 40-character name makes 64.
        let fits = pod(&"a".repeat(40), Some("s"), Some(true));
        assert_eq!(kernel_hostname(&fits, "cluster.local").unwrap().len(), 64);
        let long = pod(&"a".repeat(41), Some("s"), Some(true));
        let err = kernel_hostname(&long, "cluster.local").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "failed to construct FQDN from pod hostname and cluster domain, FQDN {}.s.ns1.svc.cluster.local is too long (64 characters is the max, 65 characters requested)",
                "a".repeat(41)
            )
        );
    }
}
