//! The API server connection, built from the kubeconfig the kubelet was given. Only a client is
//! made here; what the kubelet does with it lives with the parts that own each object (node
//! status, pod sources, pod status).

use std::path::Path;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ApiClientError {
    #[error("reading kubeconfig {path}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("building an API client from {path}")]
    Client {
        path: String,
        #[source]
        source: kube::Error,
    },
}

/// A client for the API server in `kubeconfig`. Every request is bounded by `timeout`, except
/// watches, which carry their own server-side timeout and are re-established by their owners.
pub async fn connect(kubeconfig: &Path, timeout: Duration) -> Result<kube::Client, ApiClientError> {
    let path = kubeconfig.display().to_string();
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|source| {
        ApiClientError::Kubeconfig {
            path: path.clone(),
            source,
        }
    })?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|source| ApiClientError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
    config.connect_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    // Watches hold a response open for minutes; they set timeoutSeconds below this.
    config.read_timeout = Some(Duration::from_secs(330));
    kube::Client::try_from(config).map_err(|source| ApiClientError::Client { path, source })
}
