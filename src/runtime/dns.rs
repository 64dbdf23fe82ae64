//! The DNS settings a sandbox gets, per the pod's dnsPolicy.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

use crate::cri::api;

#[derive(Clone, Debug, Default)]
pub struct DnsSettings {
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// The host's resolver configuration (resolvConf), parsed once at start.
    pub host: api::DnsConfig,
}

/// Parses the subset of resolv.conf the CRI carries: nameserver, search and options.
pub fn parse_resolv_conf(text: &str) -> api::DnsConfig {
    let mut cfg = api::DnsConfig::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or_default();
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => cfg.servers.extend(words.next().map(str::to_string)),
            Some("search") => cfg.searches = words.map(str::to_string).collect(),
            Some("options") => cfg.options.extend(words.map(str::to_string)),
            _ => {}
        }
    }
    cfg
}

pub fn load_host_resolv_conf(path: &Path) -> api::DnsConfig {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_resolv_conf(&text),
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "Could not read resolvConf; pods get no host DNS");
            api::DnsConfig::default()
        }
    }
}

pub fn pod_dns_config(pod: &Pod, settings: &DnsSettings) -> api::DnsConfig {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let cluster_first = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        _ => false,
    };
    let mut cfg = if policy == "None" {
        api::DnsConfig::default()
    } else if cluster_first && !settings.cluster_dns.is_empty() {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let domain = &settings.cluster_domain;
        let mut searches = vec![
            format!("{ns}.svc.{domain}"),
            format!("svc.{domain}"),
            domain.clone(),
        ];
        searches.extend(settings.host.searches.iter().cloned());
        api::DnsConfig {
            servers: settings.cluster_dns.clone(),
            searches,
            options: vec!["ndots:5".into()],
        }
    } else {
        // ClusterFirst without clusterDNS falls back to the host's resolver, like upstream.
        settings.host.clone()
    };
    if let Some(extra) = spec.and_then(|s| s.dns_config.as_ref()) {
        cfg.servers
            .extend(extra.nameservers.iter().flatten().cloned());
        cfg.searches
            .extend(extra.searches.iter().flatten().cloned());
        for opt in extra.options.iter().flatten() {
            let Some(name) = opt.name.as_deref() else {
                continue;
            };
            cfg.options.retain(|o| o.split(':').next() != Some(name));
            cfg.options.push(match &opt.value {
                Some(v) => format!("{name}:{v}"),
                None => name.to_string(),
            });
        }
    }
    cfg.servers.dedup();
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    #[test]
    fn parses_resolv_conf() {
        let c = parse_resolv_conf(
            "# c\nnameserver 1.1.1.1\nnameserver 8.8.8.8 ; x\nsearch a b\noptions ndots:2 edns0\n",
        );
        assert_eq!(c.servers, vec!["1.1.1.1", "8.8.8.8"]);
        assert_eq!(c.searches, vec!["a", "b"]);
        assert_eq!(c.options, vec!["ndots:2", "edns0"]);
    }

    #[test]
    fn cluster_first_uses_cluster_dns_when_configured() {
        let settings = DnsSettings {
            cluster_dns: vec!["10.96.0.10".into()],
            cluster_domain: "cluster.local".into(),
            host: parse_resolv_conf("nameserver 9.9.9.9\nsearch corp\n"),
        };
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("ns1".into());
        let c = pod_dns_config(&pod, &settings);
        assert_eq!(c.servers, vec!["10.96.0.10"]);
        assert_eq!(c.searches[0], "ns1.svc.cluster.local");
        assert_eq!(c.searches.last().unwrap(), "corp");
        pod.spec = Some(PodSpec {
            dns_policy: Some("Default".into()),
            ..Default::default()
        });
        assert_eq!(pod_dns_config(&pod, &settings).servers, vec!["9.9.9.9"]);
    }
}
