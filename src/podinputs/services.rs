//! The environment variables Kubernetes gives every container for the services it can see
//! (docker-links style): `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`, `<NAME>_PORT_...`. The
//! API server's own `kubernetes` service (namespace default) is always included; the others of
//! the pod's namespace only with `enableServiceLinks`. The services are read from a watch of
//! all of them, as upstream's service informer: started by the first container that needs
//! them, so a container (re)start sends no request for them.

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::{WatchStreamExt, reflector::ObjectRef};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long a container waits for the first list of the services.
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Every service of the cluster, as a watch keeps them; the watch ends with the cache.
pub struct ServiceCache {
    store: Store<Service>,
    /// Set once the first list is in. (The store's own readiness wakes only one of several
    /// waiters.)
    ready: watch::Receiver<bool>,
    stop: CancellationToken,
}

impl Drop for ServiceCache {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl ServiceCache {
    /// Starts the watch (the watcher relists on its own after errors, with kube's backoff).
    pub fn start(client: kube::Client) -> Self {
        let (store, writer) = reflector::store();
        let (ready_tx, ready) = watch::channel(false);
        let stop = CancellationToken::new();
        let api: Api<Service> = Api::all(client);
        let cancelled = stop.clone();
        tokio::spawn(async move {
            let events = watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer);
            let mut events = pin!(events);
            loop {
                let next = tokio::select! {
                    _ = cancelled.cancelled() => return,
                    n = events.next() => n,
                };
                match next {
                    None => return,
                    Some(Err(err)) => tracing::debug!(%err, "Watching services"),
                    Some(Ok(watcher::Event::InitDone)) => {
                        ready_tx.send_replace(true);
                    }
                    Some(Ok(_)) => {}
                }
            }
        });
        ServiceCache { store, ready, stop }
    }

    /// The services of `namespace`, once the first list is in (None until then, after
    /// waiting up to [`SYNC_TIMEOUT`]).
    async fn in_namespace(&self, namespace: &str) -> Option<Vec<Service>> {
        let mut ready = self.ready.clone();
        let listed = tokio::time::timeout(SYNC_TIMEOUT, ready.wait_for(|r| *r)).await;
        if !matches!(listed, Ok(Ok(_))) {
            return None;
        }
        Some(
            self.store
                .state()
                .iter()
                .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
                .map(|s| Service::clone(s))
                .collect(),
        )
    }

    /// One service, if the first list is in and it exists.
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }
}

/// The service variables for `pod` from the cache (nothing without one: standalone). Until
/// the first list is in, a container gets none, with a warning, as when a list failed.
pub async fn pod_env(cache: Option<&ServiceCache>, pod: &Pod) -> Vec<(String, String)> {
    let Some(cache) = cache else { return vec![] };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let Some(own) = cache.in_namespace(ns).await else {
        tracing::warn!(
            namespace = ns,
            "Services have not yet been read at least once, the container gets no service variables"
        );
        return vec![];
    };
    let default: Vec<Service> = if ns == "default" {
        vec![]
    } else {
        cache
            .get("default", "kubernetes")
            .map(|s| Service::clone(&s))
            .into_iter()
            .collect()
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
