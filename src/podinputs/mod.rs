//! What a pod reads from the API server besides itself: the configMaps and secrets its env and
//! volumes name, the services its env describes, its image pull secrets, its RuntimeClass's
//! handler, and its service account tokens. One owner reads them all, so that the runtime gets
//! them as data and speaks only CRI, and the volume manager asks here rather than the API server.
//! Without an API server (standalone), a pod gets none of them.

pub mod env_sources;
pub mod objects;
pub mod pull_secrets;
pub mod runtime_class;
pub mod services;
pub mod tokens;
pub mod watched;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};

use env_sources::EnvObjects;
use runtime_class::RuntimeClassError;
use tokens::TokenCache;
use watched::{Watched, WatchedError};

/// Bounds every read of a pod input.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{0}")]
    Api(String),
    #[error("needs an API server (run with --kubeconfig)")]
    NoApiServer,
    #[error(transparent)]
    Token(#[from] tokens::TokenError),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

/// Which inputs one step of a pod's sync will use: none are read that it will not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// A sandbox is created: the RuntimeClass handler.
    pub sandbox: bool,
    /// Containers are created: env objects, service env and pull secrets.
    pub containers: bool,
}

/// The inputs of one sync step, read just before it.
#[derive(Debug)]
pub struct PodInputs {
    /// The sandbox's CRI handler; only read when `Needs::sandbox`.
    pub runtime_handler: Result<String, RuntimeClassError>,
    /// Service variables, defined before the container's own env (which may use them).
    pub service_env: Vec<(String, String)>,
    /// The configMaps and secrets the env refers to.
    pub env_objects: EnvObjects,
    pub pull_secrets: Vec<Secret>,
}

impl PodInputs {
    /// Nothing read: the default handler, no service env, no objects, no pull secrets.
    pub fn none(default_handler: &str) -> Self {
        PodInputs {
            runtime_handler: Ok(default_handler.to_string()),
            service_env: Vec::new(),
            env_objects: EnvObjects::default(),
            pull_secrets: Vec::new(),
        }
    }
}

/// The API client the inputs are read with (none when standalone), the watches that keep the
/// secrets and configMaps pods use, and the token cache.
#[derive(Default)]
pub struct PodInputSource {
    client: Option<kube::Client>,
    objects: Option<WatchedObjects>,
    /// The services' watch, started by the first container that needs them.
    services: std::sync::OnceLock<services::ServiceCache>,
    tokens: TokenCache,
}

struct WatchedObjects {
    secrets: Watched<Secret>,
    config_maps: Watched<ConfigMap>,
}

/// The UID a pod's reads are kept under.
fn user(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

impl PodInputSource {
    pub fn new(client: Option<kube::Client>) -> Self {
        PodInputSource {
            objects: client.clone().map(|c| WatchedObjects {
                secrets: Watched::new(c.clone()),
                config_maps: Watched::new(c),
            }),
            client,
            services: std::sync::OnceLock::new(),
            tokens: TokenCache::default(),
        }
    }

    /// The API client, none when standalone.
    pub fn client(&self) -> Option<&kube::Client> {
        self.client.as_ref()
    }

    fn objects(&self) -> Result<&WatchedObjects, InputError> {
        self.objects.as_ref().ok_or(InputError::NoApiServer)
    }

    /// A secret in the pod's namespace, `None` when it does not exist (see [`Watched::get`]).
    pub async fn secret(&self, pod: &Pod, name: &str) -> Result<Option<Arc<Secret>>, InputError> {
        let got = self
            .objects()?
            .secrets
            .get(user(pod), namespace(pod), name, FETCH_TIMEOUT);
        got.await.map_err(|e| watch_failed("secret", name, e))
    }

    /// A configMap in the pod's namespace, `None` when it does not exist.
    pub async fn config_map(
        &self,
        pod: &Pod,
        name: &str,
    ) -> Result<Option<Arc<ConfigMap>>, InputError> {
        let got = self
            .objects()?
            .config_maps
            .get(user(pod), namespace(pod), name, FETCH_TIMEOUT);
        got.await.map_err(|e| watch_failed("configmap", name, e))
    }

    /// Reads what `needs` asks for; `default_handler` serves a pod that names no RuntimeClass.
    pub async fn resolve(&self, pod: &Pod, needs: Needs, default_handler: &str) -> PodInputs {
        let mut inputs = PodInputs::none(default_handler);
        let client = self.client.as_ref();
        if needs.sandbox {
            inputs.runtime_handler =
                runtime_class::lookup_handler(client, pod, default_handler).await;
        }
        if needs.containers {
            let cache = client.map(|c| {
                self.services
                    .get_or_init(|| services::ServiceCache::start(c.clone()))
            });
            inputs.service_env = services::pod_env(cache, pod).await;
            inputs.env_objects = env_sources::fetch(self, pod).await;
            if client.is_some() {
                inputs.pull_secrets = pull_secrets::fetch(self, pod).await;
            }
        }
        inputs
    }

    /// The key/value data of one configMap or secret of the pod's namespace; `None` when it
    /// does not exist.
    pub async fn object_data(
        &self,
        kind: ObjectKind,
        pod: &Pod,
        name: &str,
    ) -> Result<Option<HashMap<String, Vec<u8>>>, InputError> {
        Ok(match kind {
            ObjectKind::Secret => self
                .secret(pod, name)
                .await?
                .map(|s| objects::secret_data(Arc::unwrap_or_clone(s))),
            ObjectKind::ConfigMap => self
                .config_map(pod, name)
                .await?
                .map(|c| objects::config_map_data(Arc::unwrap_or_clone(c))),
        })
    }

    /// A token for the pod's service account (see [`TokenCache::token`]).
    pub async fn token(
        &self,
        pod: &Pod,
        audience: &str,
        expiration_seconds: i64,
    ) -> Result<String, InputError> {
        let client = self.client.as_ref().ok_or(InputError::NoApiServer)?;
        Ok(self
            .tokens
            .token(client, pod, audience, expiration_seconds)
            .await?)
    }

    /// A token for the pod's service account and the time it expires.
    pub async fn token_and_expiry(
        &self,
        pod: &Pod,
        audience: &str,
        expiration_seconds: i64,
    ) -> Result<(String, std::time::SystemTime), InputError> {
        let client = self.client.as_ref().ok_or(InputError::NoApiServer)?;
        Ok(self
            .tokens
            .token_and_expiry(client, pod, audience, expiration_seconds)
            .await?)
    }

    /// Drops what is kept for the pod (its tokens, and the watches only it used), at teardown.
    pub fn forget_pod(&self, uid: &str) {
        self.tokens.forget_pod(uid);
        if let Some(objects) = &self.objects {
            objects.secrets.forget(uid);
            objects.config_maps.forget(uid);
        }
    }
}

/// Upstream's words for an object its watch cannot give.
fn watch_failed(kind: &str, name: &str, e: WatchedError) -> InputError {
    InputError::Api(match e {
        WatchedError::TimedOut(_) => {
            format!("failed to sync {kind} cache: timed out waiting for the condition")
        }
        WatchedError::Api(e) => format!("failed to sync {kind} cache: {e}"),
        WatchedError::InvalidName(_) => format!("invalid {kind} name {name:?}"),
    })
}
