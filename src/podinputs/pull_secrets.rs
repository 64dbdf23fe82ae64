//! The secrets a pod names in `imagePullSecrets`, read before its containers are created; the
//! runtime turns them into registry credentials.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Secret};
use tracing::warn;

use super::PodInputSource;

/// The pod's imagePullSecrets, read through the secret watches. A secret that cannot be read
/// is logged and skipped, like upstream: the pull may still work without it.
pub async fn fetch(inputs: &PodInputSource, pod: &Pod) -> Vec<Secret> {
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
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        match inputs.secret(pod, &name).await {
            Ok(Some(secret)) => out.push(Arc::unwrap_or_clone(secret)),
            Ok(None) => warn!(
                secret = %name, namespace = %ns, err = "not found",
                "Unable to retrieve pull secret; the image pull may not succeed"
            ),
            Err(err) => warn!(
                secret = %name, namespace = %ns, %err,
                "Unable to retrieve pull secret; the image pull may not succeed"
            ),
        }
    }
    out
}
