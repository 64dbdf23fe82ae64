//! Image pulls per imagePullPolicy. Pulls of different images run in parallel (upstream pulls
//! one at a time by default, which stalls every pod behind one big image); concurrent pulls of
//! the same image are coalesced into one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use tokio::sync::Semaphore;

use super::pull_secrets::Keyring;
use crate::cri::{CriError, RuntimeClient, api::AuthConfig};

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("Container image \"{0}\" is not present with pull policy of Never")]
    NeverPull(String),
    #[error("Failed to pull image \"{image}\": {source}")]
    Pull {
        image: String,
        #[source]
        source: CriError,
    },
    #[error("Failed to inspect image \"{image}\": {source}")]
    Inspect {
        image: String,
        #[source]
        source: CriError,
    },
    #[error("couldn't parse image name \"{0}\"")]
    InvalidName(String),
}

impl ImageError {
    /// The container waiting reason upstream reports for this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NeverPull(_) => "ErrImageNeverPull",
            Self::InvalidName(_) => "InvalidImageName",
            Self::Pull { .. } => "ErrImagePull",
            Self::Inspect { .. } => "ImageInspectError",
        }
    }
}

/// Adds ":latest" to a reference with neither tag nor digest, like upstream.
pub fn with_default_tag(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

pub fn pull_policy(container: &Container) -> &str {
    match container.image_pull_policy.as_deref() {
        Some(p @ ("Always" | "Never" | "IfNotPresent")) => p,
        _ => crate::sources::defaults::default_pull_policy(
            container.image.as_deref().unwrap_or_default(),
        ),
    }
}

pub struct ImagePuller {
    cri: RuntimeClient,
    parallel: Arc<Semaphore>,
    /// One lock per image being pulled, so a second pod asking for it waits for the first pull
    /// instead of pulling again. Entries are dropped when nobody holds them.
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    deadline: Duration,
}

#[derive(Debug, Clone)]
pub struct PulledImage {
    /// What CreateContainer gets: the image ID.
    pub image_ref: String,
    /// The image's user: a numeric uid, else a user name; neither means root.
    pub uid: Option<i64>,
    pub username: String,
    pub pulled: bool,
    pub took: Duration,
}

/// Upstream's bound on how long image pulls may take when nothing else limits them.
const PULL_DEADLINE: Duration = Duration::from_secs(30 * 60);

impl ImagePuller {
    /// `serializeImagePulls` (one at a time) or `maxParallelImagePulls` (unbounded if unset).
    pub fn from_settings(cri: RuntimeClient, settings: &crate::config::Settings) -> Self {
        let cfg = &settings.config;
        let max_pulls = if cfg.serialize_image_pulls {
            1
        } else {
            cfg.max_parallel_image_pulls
                .map(|n| n.max(1) as usize)
                .unwrap_or(usize::MAX >> 4)
        };
        Self::new(cri, max_pulls, PULL_DEADLINE)
    }

    pub fn new(cri: RuntimeClient, max_parallel: usize, deadline: Duration) -> Self {
        ImagePuller {
            cri,
            parallel: Arc::new(Semaphore::new(max_parallel.max(1))),
            inflight: Mutex::new(HashMap::new()),
            deadline,
        }
    }

    async fn present(&self, image: &str) -> Result<Option<PulledImage>, ImageError> {
        match self.cri.image_status(image).await {
            Ok(found) => Ok(found.map(|i| PulledImage {
                image_ref: i.id,
                uid: i.uid.map(|u| u.value),
                username: i.username,
                pulled: false,
                took: Duration::ZERO,
            })),
            Err(source) => Err(ImageError::Inspect {
                image: image.to_string(),
                source,
            }),
        }
    }

    /// The local image, unless the policy insists on pulling.
    async fn use_present(
        &self,
        image: &str,
        policy: &str,
    ) -> Result<Option<PulledImage>, ImageError> {
        if policy == "Always" {
            return Ok(None);
        }
        self.present(image).await
    }

    fn image_lock(&self, image: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, l| Arc::strong_count(l) > 1);
        map.entry(image.to_string()).or_default().clone()
    }

    /// `on_pull` runs just before a pull really starts (for the Pulling event); `keyring`
    /// only then too, since reading pull secrets costs API calls.
    pub async fn ensure(
        &self,
        container: &Container,
        keyring: impl AsyncFnOnce() -> Keyring,
        on_pull: impl FnOnce(),
    ) -> Result<PulledImage, ImageError> {
        let raw = container.image.as_deref().unwrap_or_default();
        if raw.trim().is_empty() || raw.contains(char::is_whitespace) {
            return Err(ImageError::InvalidName(raw.to_string()));
        }
        let image = with_default_tag(raw);
        let policy = pull_policy(container);
        if let Some(found) = self.use_present(&image, policy).await? {
            return Ok(found);
        }
        if policy == "Never" {
            return Err(ImageError::NeverPull(image));
        }
        let lock = self.image_lock(&image);
        let _same_image = lock.lock().await;
        if let Some(found) = self.use_present(&image, policy).await? {
            return Ok(found);
        }
        let credentials = keyring().await.lookup(&image);
        let _slot = self.parallel.acquire().await;
        on_pull();
        let started = std::time::Instant::now();
        let image_ref = self.pull(&image, credentials).await?;
        let took = started.elapsed();
        // The pull answer has no user; the image's status has.
        let found = self.present(&image).await?;
        Ok(PulledImage {
            image_ref,
            pulled: true,
            took,
            uid: found.as_ref().and_then(|f| f.uid),
            username: found.map(|f| f.username).unwrap_or_default(),
        })
    }
}

impl ImagePuller {
    /// Without credentials, one anonymous pull; with them, each in turn until one works,
    /// like upstream (a secret may hold an old and a new password during rotation).
    async fn pull(&self, image: &str, credentials: Vec<AuthConfig>) -> Result<String, ImageError> {
        let mut rest = credentials.into_iter();
        // No credentials: one anonymous pull.
        let mut result = self
            .cri
            .pull_image(image, rest.next(), None, self.deadline)
            .await;
        for auth in rest {
            if result.is_ok() {
                break;
            }
            result = self
                .cri
                .pull_image(image, Some(auth), None, self.deadline)
                .await;
        }
        result.map_err(|source| ImageError::Pull {
            image: image.to_string(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_tag_and_policy() {
        assert_eq!(with_default_tag("busybox"), "busybox:latest");
        assert_eq!(
            with_default_tag("localhost:5000/busybox"),
            "localhost:5000/busybox:latest"
        );
        assert_eq!(with_default_tag("busybox:1.36"), "busybox:1.36");
        assert_eq!(with_default_tag("busybox@sha256:ab"), "busybox@sha256:ab");
        let c = |image: &str, policy: Option<&str>| Container {
            name: "c".into(),
            image: Some(image.into()),
            image_pull_policy: policy.map(str::to_string),
            ..Default::default()
        };
        assert_eq!(pull_policy(&c("busybox", None)), "Always");
        assert_eq!(pull_policy(&c("busybox:1", None)), "IfNotPresent");
        assert_eq!(pull_policy(&c("busybox", Some("Never"))), "Never");
    }
}
