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

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::Api;

use env_sources::EnvObjects;
use runtime_class::RuntimeClassError;
use tokens::TokenCache;

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

/// The API client the inputs are read with (none when standalone), and the token cache.
#[derive(Default)]
pub struct PodInputSource {
    client: Option<kube::Client>,
    tokens: TokenCache,
}

impl PodInputSource {
    pub fn new(client: Option<kube::Client>) -> Self {
        PodInputSource {
            client,
            tokens: TokenCache::default(),
        }
    }

    /// The API client, none when standalone.
    pub fn client(&self) -> Option<&kube::Client> {
        self.client.as_ref()
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
            inputs.service_env = services::fetch_service_env(client, pod).await;
            inputs.env_objects = env_sources::fetch(client, pod).await;
            if let Some(client) = client {
                inputs.pull_secrets = pull_secrets::fetch(client, pod).await;
            }
        }
        inputs
    }

    /// The key/value data of one configMap or secret; `None` when it does not exist.
    pub async fn object_data(
        &self,
        kind: ObjectKind,
        ns: &str,
        name: &str,
    ) -> Result<Option<HashMap<String, Vec<u8>>>, InputError> {
        let client = self.client.as_ref().ok_or(InputError::NoApiServer)?;
        Ok(match kind {
            ObjectKind::Secret => get(Api::<Secret>::namespaced(client.clone(), ns), name)
                .await?
                .map(objects::secret_data),
            ObjectKind::ConfigMap => get(Api::<ConfigMap>::namespaced(client.clone(), ns), name)
                .await?
                .map(objects::config_map_data),
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

    /// Drops what is kept for the pod (its tokens), at teardown.
    pub fn forget_pod(&self, uid: &str) {
        self.tokens.forget_pod(uid);
    }
}

/// Why one bounded GET got no answer.
#[derive(Debug)]
pub(crate) enum Fetch {
    Api(kube::Error),
    TimedOut,
}

/// One object by name, or `None` when it does not exist, within [`FETCH_TIMEOUT`]: the GET
/// every input is read with.
pub(crate) async fn get_opt<K>(api: &Api<K>, name: &str) -> Result<Option<K>, Fetch>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match tokio::time::timeout(FETCH_TIMEOUT, api.get_opt(name)).await {
        Ok(found) => found.map_err(Fetch::Api),
        Err(_) => Err(Fetch::TimedOut),
    }
}

async fn get<K>(api: Api<K>, name: &str) -> Result<Option<K>, InputError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    get_opt(&api, name).await.map_err(|e| match e {
        Fetch::Api(e) => InputError::Api(e.to_string()),
        Fetch::TimedOut => InputError::Api(format!("fetching {name} timed out")),
    })
}
