//! What a request to the kubelet API asks for, in the API server's terms: a verb on the node
//! object's subresource. Access to the kubelet is granted by RBAC rules on `nodes/<sub>`.

use axum::http::Method;

pub const RESOURCE: &str = "nodes";
pub const API_VERSION: &str = "v1";

/// One question for the authorizer. A request may produce several (fine-grained first, then
/// the broader `proxy`); it is allowed when any of them is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub verb: &'static str,
    pub subresource: &'static str,
    /// The node's name: the kubelet only ever answers for its own node.
    pub name: String,
    pub path: String,
}

/// Upstream's mapping; methods it does not list get an empty verb, which no rule grants.
pub fn verb_for(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

/// `path` is `prefix` itself or lies below it (a trailing '/' on `prefix` is ignored).
pub fn is_subpath(path: &str, prefix: &str) -> bool {
    let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// Subresources checked in order for `path`. With `fine_grained` (the KubeletFineGrainedAuthz
/// gate) the read-only endpoints get their own subresource first, with `proxy` as fallback.
pub fn subresources(path: &str, fine_grained: bool) -> Vec<&'static str> {
    let mut subs = Vec::with_capacity(2);
    if fine_grained {
        let specific = [
            ("/pods", "pods"),
            ("/healthz", "healthz"),
            ("/configz", "configz"),
            ("/statusz", "statusz"),
            ("/runningpods/", "pods"),
            // Ours: pod start breakdowns are pod data, allowed to whoever may read /pods.
            ("/debug/pods/startup", "pods"),
        ]
        .into_iter()
        .find(|(prefix, _)| is_subpath(path, prefix));
        if let Some((_, sub)) = specific {
            subs.push(sub);
        }
    }
    let broad = [
        ("/stats/", "stats"),
        ("/metrics", "metrics"),
        ("/logs/", "log"),
        ("/checkpoint/", "checkpoint"),
    ]
    .into_iter()
    .find(|(prefix, _)| is_subpath(path, prefix))
    .map_or("proxy", |(_, sub)| sub);
    subs.push(broad);
    subs
}

pub fn for_request(
    method: &Method,
    path: &str,
    node_name: &str,
    fine_grained: bool,
) -> Vec<Attributes> {
    let verb = verb_for(method);
    subresources(path, fine_grained)
        .into_iter()
        .map(|subresource| Attributes {
            verb,
            subresource,
            name: node_name.to_string(),
            path: path.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_follow_upstream() {
        assert_eq!(verb_for(&Method::GET), "get");
        assert_eq!(verb_for(&Method::POST), "create");
        assert_eq!(verb_for(&Method::PUT), "update");
        assert_eq!(verb_for(&Method::PATCH), "patch");
        assert_eq!(verb_for(&Method::DELETE), "delete");
        assert_eq!(verb_for(&Method::HEAD), "");
        assert_eq!(verb_for(&Method::OPTIONS), "");
    }

    #[test]
    fn subpath_needs_a_separator() {
        assert!(is_subpath("/stats", "/stats/"));
        assert!(is_subpath("/stats/", "/stats/"));
        assert!(is_subpath("/stats/summary", "/stats/"));
        assert!(!is_subpath("/statsx", "/stats/"));
        assert!(!is_subpath("/stat", "/stats/"));
        assert!(is_subpath("/metrics/cadvisor", "/metrics"));
        assert!(!is_subpath("/metricsfoo", "/metrics"));
        assert!(is_subpath("/runningpods/", "/runningpods/"));
    }

    #[test]
    fn subresources_by_path() {
        let fine = |p| subresources(p, true);
        assert_eq!(fine("/stats/summary"), vec!["stats"]);
        assert_eq!(fine("/metrics"), vec!["metrics"]);
        assert_eq!(fine("/metrics/cadvisor"), vec!["metrics"]);
        assert_eq!(fine("/logs/syslog"), vec!["log"]);
        assert_eq!(fine("/logs"), vec!["log"]);
        assert_eq!(fine("/checkpoint/ns/pod/c"), vec!["checkpoint"]);
        assert_eq!(fine("/pods"), vec!["pods", "proxy"]);
        assert_eq!(fine("/pods/"), vec!["pods", "proxy"]);
        assert_eq!(fine("/runningpods/"), vec!["pods", "proxy"]);
        assert_eq!(fine("/healthz/syncloop"), vec!["healthz", "proxy"]);
        assert_eq!(fine("/configz"), vec!["configz", "proxy"]);
        assert_eq!(fine("/exec/ns/pod/c"), vec!["proxy"]);
        assert_eq!(fine("/containerLogs/ns/pod/c"), vec!["proxy"]);
        assert_eq!(fine("/podsx"), vec!["proxy"]);
        assert_eq!(fine("/"), vec!["proxy"]);
        assert_eq!(subresources("/pods", false), vec!["proxy"]);
        assert_eq!(subresources("/configz", false), vec!["proxy"]);
        assert_eq!(subresources("/stats/summary", false), vec!["stats"]);
    }

    #[test]
    fn attributes_name_the_node() {
        let a = for_request(&Method::POST, "/exec/ns/p/c", "node-1", true);
        assert_eq!(
            a,
            vec![Attributes {
                verb: "create",
                subresource: "proxy",
                name: "node-1".into(),
                path: "/exec/ns/p/c".into(),
            }]
        );
    }
}
