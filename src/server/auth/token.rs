//! Bearer tokens, checked with the API server's TokenReview (authentication.k8s.io/v1) and
//! cached for authentication.webhook.cacheTTL. Tokens are never logged and the cache keys
//! them by their SHA-256 digest.

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use kube::api::{Api, PostParams};

use super::cache::{DEFAULT_CAPACITY, TtlCache, key_of};
use super::retry::{self, ReviewError};
use super::user::{Outcome, UserInfo};

/// Upstream's bound on one token review.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks the API server about one token; a fake in unit tests.
pub type ReviewFn =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<TokenReviewStatus, ReviewError>> + Send + Sync>;

/// The token of an `Authorization: Bearer <token>` header; anything else is no token.
pub fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

pub struct TokenAuthenticator {
    review: ReviewFn,
    cache: TtlCache<Outcome>,
    ttl: Duration,
}

/// Posts a TokenReview with `client`, retrying passing failures, all within [`REVIEW_TIMEOUT`].
pub fn api_reviewer(client: kube::Client) -> ReviewFn {
    Arc::new(move |token: String| {
        let api: Api<TokenReview> = Api::all(client.clone());
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token),
                    ..Default::default()
                },
                ..Default::default()
            };
            let params = PostParams::default();
            let attempt = || api.create(&params, &review);
            retry::with_backoff(REVIEW_TIMEOUT, retry::is_transient, attempt)
                .await
                .map(|done| done.status.unwrap_or_default())
                .map_err(|failure| ReviewError::of("token review", REVIEW_TIMEOUT, failure))
        })
    })
}

/// The API server's verdict on a token. A rejection without a reason still fails the request
/// (rather than falling through to anonymous), as upstream's bearer token authenticator does.
pub fn outcome_of(status: TokenReviewStatus) -> Outcome {
    if status.authenticated == Some(true) {
        let user = status.user.unwrap_or_default();
        return Outcome::User(UserInfo {
            name: user.username.unwrap_or_default(),
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        });
    }
    Outcome::Failed(
        status
            .error
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "invalid bearer token".into()),
    )
}

impl TokenAuthenticator {
    pub fn new(review: ReviewFn, ttl: Duration) -> Self {
        Self {
            review,
            cache: TtlCache::new(DEFAULT_CAPACITY),
            ttl,
        }
    }

    /// Answers from the API server are cached (accepted and rejected alike); failures to ask
    /// are not, so a brief outage does not lock a client out for a whole TTL.
    pub async fn authenticate(&self, token: &str) -> Outcome {
        let key = key_of(token.as_bytes());
        if let Some(hit) = self.cache.get(&key) {
            return hit;
        }
        match (self.review)(token.to_string()).await {
            Ok(status) => {
                let outcome = outcome_of(status);
                self.cache.insert(key, outcome.clone(), self.ttl);
                outcome
            }
            Err(err) => Outcome::Failed(err.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn bearer_header_forms() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc".into()));
        assert_eq!(
            bearer_token(&headers("bearer abc extra")),
            Some("abc".into())
        );
        assert_eq!(bearer_token(&headers("  Bearer abc  ")), Some("abc".into()));
        assert_eq!(bearer_token(&headers("Bearer  abc")), None);
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&headers("Bearer")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    fn accepted(name: &str) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated: Some(true),
            user: Some(k8s_openapi::api::authentication::v1::UserInfo {
                username: Some(name.into()),
                uid: Some("u1".into()),
                groups: Some(vec!["g".into()]),
                extra: None,
            }),
            ..Default::default()
        }
    }

    /// A reviewer that knows one good token and counts its calls.
    fn fake(calls: Arc<AtomicUsize>, fail: bool) -> ReviewFn {
        Arc::new(move |token: String| {
            calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if fail {
                    return Err(ReviewError::Failed {
                        review: "token review",
                        reason: "connection refused".into(),
                    });
                }
                Ok(if token == "good" {
                    accepted("alice")
                } else {
                    TokenReviewStatus {
                        authenticated: Some(false),
                        error: Some("token not found".into()),
                        ..Default::default()
                    }
                })
            })
        })
    }

    #[tokio::test]
    async fn answers_are_cached_for_the_ttl() {
        let calls = Arc::new(AtomicUsize::new(0));
        let auth = TokenAuthenticator::new(fake(calls.clone(), false), Duration::from_secs(60));
        let first = auth.authenticate("good").await;
        assert_eq!(first, auth.authenticate("good").await);
        match first {
            Outcome::User(u) => {
                assert_eq!(u.name, "alice");
                assert_eq!(u.uid, "u1");
                assert_eq!(u.groups, vec!["g"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            auth.authenticate("bad").await,
            Outcome::Failed("token not found".into())
        );
        auth.authenticate("bad").await;
        assert_eq!(calls.load(Ordering::SeqCst), 2, "one review per token");
    }

    #[tokio::test]
    async fn zero_ttl_asks_every_time() {
        let calls = Arc::new(AtomicUsize::new(0));
        let auth = TokenAuthenticator::new(fake(calls.clone(), false), Duration::ZERO);
        auth.authenticate("good").await;
        auth.authenticate("good").await;
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn review_errors_fail_and_are_not_cached() {
        let calls = Arc::new(AtomicUsize::new(0));
        let auth = TokenAuthenticator::new(fake(calls.clone(), true), Duration::from_secs(60));
        assert!(matches!(
            auth.authenticate("good").await,
            Outcome::Failed(_)
        ));
        auth.authenticate("good").await;
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn rejection_without_reason_still_fails() {
        assert_eq!(
            outcome_of(TokenReviewStatus::default()),
            Outcome::Failed("invalid bearer token".into())
        );
    }
}
