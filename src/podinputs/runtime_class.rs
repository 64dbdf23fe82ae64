//! `runtimeClassName`: the pod's RuntimeClass (node.k8s.io/v1) names the CRI handler its
//! sandbox runs with. The class is read when the sandbox is created, which is rare enough for
//! a GET each time: a class created or changed after the pod is seen at the next attempt,
//! with no watch to keep.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::Api;

const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, thiserror::Error)]
pub enum RuntimeClassError {
    /// Upstream's lister error, which its FailedCreatePodSandBox event carries.
    #[error("runtimeclass.node.k8s.io \"{0}\" not found")]
    NotFound(String),
    #[error("failed to lookup RuntimeClass {name}: {reason}")]
    Lookup { name: String, reason: String },
    /// Upstream's standalone kubelet ignores the class and uses the default handler; running
    /// a pod that asked for another runtime (a sandboxed one, say) under runc would be worse
    /// than not running it.
    #[error(
        "RuntimeClass \"{0}\" cannot be looked up: the kubelet runs without an API server (no --kubeconfig)"
    )]
    Standalone(String),
}

/// The class the pod names, if any (an empty name is the default class).
pub fn class_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.runtime_class_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The runtime handler for `pod`: `default` when it names no class, else its class's handler.
pub async fn lookup_handler(
    client: Option<&kube::Client>,
    pod: &Pod,
    default: &str,
) -> Result<String, RuntimeClassError> {
    let Some(name) = class_name(pod) else {
        return Ok(default.to_string());
    };
    let Some(client) = client else {
        return Err(RuntimeClassError::Standalone(name.to_string()));
    };
    let api: Api<RuntimeClass> = Api::all(client.clone());
    let lookup = |reason: String| RuntimeClassError::Lookup {
        name: name.to_string(),
        reason,
    };
    match tokio::time::timeout(LOOKUP_TIMEOUT, api.get_opt(name)).await {
        Ok(Ok(Some(rc))) => Ok(rc.handler),
        Ok(Ok(None)) => Err(RuntimeClassError::NotFound(name.to_string())),
        Ok(Err(err)) => Err(lookup(err.to_string())),
        Err(_) => Err(lookup(format!(
            "no answer from the API server within {LOOKUP_TIMEOUT:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(class: Option<&str>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                runtime_class_name: class.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn no_class_is_the_default_handler_and_standalone_refuses_a_class() {
        assert_eq!(lookup_handler(None, &pod(None), "").await.unwrap(), "");
        assert_eq!(
            lookup_handler(None, &pod(Some("")), "runc").await.unwrap(),
            "runc"
        );
        let err = lookup_handler(None, &pod(Some("gvisor")), "")
            .await
            .unwrap_err();
        assert!(matches!(err, RuntimeClassError::Standalone(ref n) if n == "gvisor"));
        assert!(err.to_string().contains("RuntimeClass \"gvisor\""));
    }

    #[test]
    fn not_found_reads_like_upstream() {
        assert_eq!(
            RuntimeClassError::NotFound("x".into()).to_string(),
            "runtimeclass.node.k8s.io \"x\" not found"
        );
    }
}
