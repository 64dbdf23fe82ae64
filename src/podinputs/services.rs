//! The environment variables Kubernetes gives every container for the services it can see
//! (docker-links style): `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`, `<NAME>_PORT_...`. The
//! API server's own `kubernetes` service (namespace default) is always included; the others of
//! the pod's namespace only with `enableServiceLinks`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};

const LIST_TIMEOUT: Duration = Duration::from_secs(10);

fn env_name(service: &str) -> String {
    service.to_uppercase().replace('-', "_")
}

/// The variables for one service, in upstream's order; none for headless services.
pub fn service_env(svc: &Service) -> Vec<(String, String)> {
    let Some(spec) = &svc.spec else { return vec![] };
    let ip = spec.cluster_ip.as_deref().unwrap_or_default();
    if ip.is_empty() || ip == "None" {
        return vec![];
    }
    let name = env_name(svc.metadata.name.as_deref().unwrap_or_default());
    let ports = spec.ports.as_deref().unwrap_or(&[]);
    let Some(first) = ports.first() else {
        return vec![];
    };
    let mut out = vec![
        (format!("{name}_SERVICE_HOST"), ip.to_string()),
        (format!("{name}_SERVICE_PORT"), first.port.to_string()),
    ];
    for p in ports {
        if let Some(pname) = p.name.as_deref().filter(|n| !n.is_empty()) {
            out.push((
                format!("{name}_SERVICE_PORT_{}", env_name(pname)),
                p.port.to_string(),
            ));
        }
    }
    let proto = |p: &k8s_openapi::api::core::v1::ServicePort| {
        p.protocol.clone().unwrap_or_else(|| "TCP".into())
    };
    // IPv6 addresses are bracketed in URLs.
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    out.push((
        format!("{name}_PORT"),
        format!("{}://{host}:{}", proto(first).to_lowercase(), first.port),
    ));
    for p in ports {
        let pr = proto(p);
        let prefix = format!("{name}_PORT_{}_{}", p.port, pr.to_uppercase());
        out.push((
            prefix.clone(),
            format!("{}://{host}:{}", pr.to_lowercase(), p.port),
        ));
        out.push((format!("{prefix}_PROTO"), pr.to_lowercase()));
        out.push((format!("{prefix}_PORT"), p.port.to_string()));
        out.push((format!("{prefix}_ADDR"), ip.to_string()));
    }
    out
}

/// Service variables for `pod`: the pod namespace's services when service links are on, then
/// the `kubernetes` service from namespace default (which wins a name clash, like upstream).
pub fn pod_service_env(
    pod: &Pod,
    namespace_services: &[Service],
    default_services: &[Service],
) -> Vec<(String, String)> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    if links {
        for svc in namespace_services {
            vars.extend(service_env(svc));
        }
    }
    let master = default_services
        .iter()
        .chain(if ns == "default" {
            namespace_services
        } else {
            &[]
        })
        .find(|s| s.metadata.name.as_deref() == Some("kubernetes"));
    if let Some(svc) = master {
        vars.extend(service_env(svc));
    }
    vars.into_iter().collect()
}

async fn list(client: &kube::Client, ns: &str) -> Vec<Service> {
    let api: Api<Service> = Api::namespaced(client.clone(), ns);
    match tokio::time::timeout(LIST_TIMEOUT, api.list(&ListParams::default())).await {
        Ok(Ok(list)) => list.items,
        Ok(Err(err)) => {
            tracing::warn!(namespace = ns, %err, "Could not list services for container environment");
            vec![]
        }
        Err(_) => {
            tracing::warn!(
                namespace = ns,
                "Listing services for container environment timed out"
            );
            vec![]
        }
    }
}

/// Looks the services up in the API server (nothing without one).
pub async fn fetch_service_env(client: Option<&kube::Client>, pod: &Pod) -> Vec<(String, String)> {
    let Some(client) = client else { return vec![] };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let own = list(client, ns).await;
    let default = if ns == "default" {
        vec![]
    } else {
        list(client, "default").await
    };
    pod_service_env(pod, &own, &default)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ServicePort, ServiceSpec};

    fn svc(name: &str, ip: &str, ports: &[(&str, i32)]) -> Service {
        Service {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, p)| ServicePort {
                            name: Some(n.to_string()).filter(|n| !n.is_empty()),
                            port: *p,
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn docker_link_variables() {
        let env: BTreeMap<_, _> =
            service_env(&svc("my-web", "10.96.0.20", &[("http", 80), ("", 443)]))
                .into_iter()
                .collect();
        assert_eq!(env["MY_WEB_SERVICE_HOST"], "10.96.0.20");
        assert_eq!(env["MY_WEB_SERVICE_PORT"], "80");
        assert_eq!(env["MY_WEB_SERVICE_PORT_HTTP"], "80");
        assert_eq!(env["MY_WEB_PORT"], "tcp://10.96.0.20:80");
        assert_eq!(env["MY_WEB_PORT_443_TCP"], "tcp://10.96.0.20:443");
        assert_eq!(env["MY_WEB_PORT_443_TCP_ADDR"], "10.96.0.20");
        assert!(service_env(&svc("headless", "None", &[("", 80)])).is_empty());
    }

    #[test]
    fn service_links_switch_and_master_service() {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("app".into());
        pod.spec = Some(PodSpec {
            enable_service_links: Some(false),
            ..Default::default()
        });
        let own = [svc("db", "10.96.0.30", &[("", 5432)])];
        let default = [svc("kubernetes", "10.96.0.1", &[("https", 443)])];
        let env: BTreeMap<_, _> = pod_service_env(&pod, &own, &default).into_iter().collect();
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert!(!env.contains_key("DB_SERVICE_HOST"));
        pod.spec.as_mut().unwrap().enable_service_links = Some(true);
        let env: BTreeMap<_, _> = pod_service_env(&pod, &own, &default).into_iter().collect();
        assert_eq!(env["DB_SERVICE_PORT"], "5432");
    }
}
