//! Service account tokens for projected volumes, from the TokenRequest API, bound to the pod.
//! Each token is kept and handed out again until it is due for a refresh, upstream's rule:
//! past 80 % of its life, or older than 24 h.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Upstream's default `expirationSeconds` for a projected token.
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// Why no token could be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("failed to fetch token: {0}")]
    Request(#[from] kube::Error),
    #[error("failed to fetch token: the request timed out")]
    Timeout,
    #[error("failed to fetch token: the answer has no status")]
    NoStatus,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    pod_uid: String,
    namespace: String,
    service_account: String,
    audience: String,
    expiration_seconds: i64,
}

#[derive(Clone)]
struct Cached {
    token: String,
    expires: SystemTime,
}

/// Whether a token of `ttl` that expires at `expires` must be replaced at `now`.
fn requires_refresh(expires: SystemTime, ttl: Duration, now: SystemTime) -> bool {
    let issued = expires.checked_sub(ttl).unwrap_or(SystemTime::UNIX_EPOCH);
    let too_old = issued + MAX_TTL <= now;
    let near_end = expires.checked_sub(ttl / 5).is_none_or(|t| t <= now);
    too_old || near_end
}

/// Bounded by the pods running here: a pod's tokens are forgotten when it is torn down.
#[derive(Default)]
pub struct TokenCache {
    tokens: Mutex<HashMap<Key, Cached>>,
}

impl TokenCache {
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Cached>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops the pod's tokens (at teardown).
    pub fn forget_pod(&self, uid: &str) {
        self.lock().retain(|k, _| k.pod_uid != uid);
    }

    /// A token for the pod's service account with this audience (empty: the API server's
    /// own) and lifetime.
    pub async fn token(
        &self,
        client: &kube::Client,
        pod: &Pod,
        audience: &str,
        expiration_seconds: i64,
    ) -> Result<String, TokenError> {
        self.token_at(client, pod, audience, expiration_seconds, SystemTime::now())
            .await
    }

    /// `token` as if the clock read `now` (the refresh rule only reads the clock here; a test
    /// moves it forward rather than waiting most of a token's life).
    pub async fn token_at(
        &self,
        client: &kube::Client,
        pod: &Pod,
        audience: &str,
        expiration_seconds: i64,
        now: SystemTime,
    ) -> Result<String, TokenError> {
        self.token_and_expiry_at(client, pod, audience, expiration_seconds, now)
            .await
            .map(|(token, _)| token)
    }

    /// `token` with the time it expires, as a CSI driver's `serviceAccount.tokens` tells it.
    pub async fn token_and_expiry(
        &self,
        client: &kube::Client,
        pod: &Pod,
        audience: &str,
        expiration_seconds: i64,
    ) -> Result<(String, SystemTime), TokenError> {
        self.token_and_expiry_at(client, pod, audience, expiration_seconds, SystemTime::now())
            .await
    }

    async fn token_and_expiry_at(
        &self,
        client: &kube::Client,
        pod: &Pod,
        audience: &str,
        expiration_seconds: i64,
        now: SystemTime,
    ) -> Result<(String, SystemTime), TokenError> {
        let meta = &pod.metadata;
        let service_account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let key = Key {
            pod_uid: meta.uid.clone().unwrap_or_default(),
            namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
            service_account,
            audience: audience.to_string(),
            expiration_seconds,
        };
        let ttl = Duration::from_secs(u64::try_from(expiration_seconds).unwrap_or(0));
        let cached = self.lock().get(&key).cloned();
        if let Some(c) = cached
            && !requires_refresh(c.expires, ttl, now)
        {
            return Ok((c.token, c.expires));
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: if audience.is_empty() {
                    vec![]
                } else {
                    vec![audience.to_string()]
                },
                expiration_seconds: Some(expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: meta.name.clone(),
                    uid: meta.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &key.namespace);
        let params = PostParams::default();
        let call = api.create_token_request(&key.service_account, &params, &request);
        let issued = match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
            Ok(r) => r?,
            Err(_) => return Err(TokenError::Timeout),
        };
        let status = issued.status.ok_or(TokenError::NoStatus)?;
        let expires = SystemTime::from(status.expiration_timestamp.0);
        self.lock().insert(
            key,
            Cached {
                token: status.token.clone(),
                expires,
            },
        );
        Ok((status.token, expires))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_at_eighty_percent_or_a_day() {
        let hour = Duration::from_secs(3600);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let expires = t0 + hour;
        assert!(!requires_refresh(expires, hour, t0));
        assert!(!requires_refresh(expires, hour, t0 + hour * 79 / 100));
        assert!(requires_refresh(expires, hour, t0 + hour * 81 / 100));
        let week = Duration::from_secs(7 * 24 * 3600);
        let long = t0 + week;
        assert!(!requires_refresh(long, week, t0 + hour));
        assert!(requires_refresh(
            long,
            week,
            t0 + Duration::from_secs(24 * 3600)
        ));
    }
}
