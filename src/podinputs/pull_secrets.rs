//! The secrets a pod names in `imagePullSecrets`, read before its containers are created; the
//! runtime turns them into registry credentials.

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use tracing::warn;

use super::Fetch;

/// The pod's imagePullSecrets, read from the API server. A secret that cannot be read is
/// logged and skipped, like upstream: the pull may still work without it.
pub async fn fetch(client: &kube::Client, pod: &Pod) -> Vec<Secret> {
    let names: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .into_iter()
        .flatten()
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return Vec::new();
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        match super::get_opt(&api, &name).await {
            Ok(Some(secret)) => out.push(secret),
            Ok(None) => warn!(
                secret = %name, namespace = %ns, err = "not found",
                "Unable to retrieve pull secret; the image pull may not succeed"
            ),
            Err(Fetch::Api(err)) => warn!(
                secret = %name, namespace = %ns, %err,
                "Unable to retrieve pull secret; the image pull may not succeed"
            ),
            Err(Fetch::TimedOut) => warn!(
                secret = %name, namespace = %ns,
                "Timed out retrieving pull secret; the image pull may not succeed"
            ),
        }
    }
    out
}
