//! Authorization: AlwaysAllow, or Webhook (the API server's SubjectAccessReview,
//! authorization.k8s.io/v1) with its answers cached for cacheAuthorizedTTL /
//! cacheUnauthorizedTTL.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use kube::api::{Api, PostParams};

use super::attributes::{API_VERSION, Attributes, RESOURCE};
use super::cache::{DEFAULT_CAPACITY, TtlCache, key_of};
use super::retry::{self, ReviewError};
use super::user::UserInfo;

/// Upstream's bound on one access review.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    NoOpinion,
}

/// Asks the API server one access question; a fake in unit tests.
pub type ReviewFn = Arc<
    dyn Fn(
            SubjectAccessReviewSpec,
        ) -> BoxFuture<'static, Result<SubjectAccessReviewStatus, ReviewError>>
        + Send
        + Sync,
>;

/// Why the authorizer could not decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthzError {
    #[error(transparent)]
    Review(#[from] ReviewError),
    #[error("webhook subject access review returned both allow and deny response")]
    AllowedAndDenied,
    #[error("encoding the review: {0}")]
    Encode(String),
}

pub enum Authorizer {
    AlwaysAllow,
    Webhook(WebhookAuthorizer),
}

impl Authorizer {
    pub async fn authorize(
        &self,
        user: &UserInfo,
        attrs: &Attributes,
    ) -> Result<Decision, AuthzError> {
        match self {
            Self::AlwaysAllow => Ok(Decision::Allow),
            Self::Webhook(w) => w.authorize(user, attrs).await,
        }
    }
}

pub struct WebhookAuthorizer {
    review: ReviewFn,
    cache: TtlCache<SubjectAccessReviewStatus>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
}

/// Posts a SubjectAccessReview with `client`, retrying passing failures, all within
/// [`REVIEW_TIMEOUT`].
pub fn api_reviewer(client: kube::Client) -> ReviewFn {
    Arc::new(move |spec: SubjectAccessReviewSpec| {
        let api: Api<SubjectAccessReview> = Api::all(client.clone());
        Box::pin(async move {
            let review = SubjectAccessReview {
                spec,
                ..Default::default()
            };
            let params = PostParams::default();
            let attempt = || api.create(&params, &review);
            retry::with_backoff(REVIEW_TIMEOUT, retry::is_transient, attempt)
                .await
                .map(|done| done.status.unwrap_or_default())
                .map_err(|failure| {
                    ReviewError::of("subject access review", REVIEW_TIMEOUT, failure)
                })
        })
    })
}

/// The review the API server is asked for: the user as authenticated, and the attributes as
/// a resource request on the node object.
pub fn review_spec(user: &UserInfo, attrs: &Attributes) -> SubjectAccessReviewSpec {
    let some = |s: &str| Some(s.to_string());
    SubjectAccessReviewSpec {
        user: some(&user.name),
        uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
        groups: Some(user.groups.clone()).filter(|g| !g.is_empty()),
        extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
        resource_attributes: Some(ResourceAttributes {
            namespace: some(""),
            verb: some(attrs.verb),
            group: some(""),
            version: some(API_VERSION),
            resource: some(RESOURCE),
            subresource: some(attrs.subresource),
            name: some(&attrs.name),
            ..Default::default()
        }),
        non_resource_attributes: None,
    }
}

pub fn decision_of(status: &SubjectAccessReviewStatus) -> Result<Decision, AuthzError> {
    let denied = status.denied == Some(true);
    match (status.allowed, denied) {
        (true, true) => Err(AuthzError::AllowedAndDenied),
        (_, true) => Ok(Decision::Deny),
        (true, false) => Ok(Decision::Allow),
        (false, false) => Ok(Decision::NoOpinion),
    }
}

impl WebhookAuthorizer {
    pub fn new(review: ReviewFn, allowed_ttl: Duration, denied_ttl: Duration) -> Self {
        Self {
            review,
            cache: TtlCache::new(DEFAULT_CAPACITY),
            allowed_ttl,
            denied_ttl,
        }
    }

    pub async fn authorize(
        &self,
        user: &UserInfo,
        attrs: &Attributes,
    ) -> Result<Decision, AuthzError> {
        let spec = review_spec(user, attrs);
        let encoded = serde_json::to_vec(&spec).map_err(|e| AuthzError::Encode(e.to_string()))?;
        let key = key_of(&encoded);
        if let Some(status) = self.cache.get(&key) {
            return decision_of(&status);
        }
        let status = (self.review)(spec).await?;
        let ttl = if status.allowed {
            self.allowed_ttl
        } else {
            self.denied_ttl
        };
        self.cache.insert(key, status.clone(), ttl);
        decision_of(&status)
    }
}

/// The end of authorization for one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// 403 with this body.
    Forbidden(String),
    /// 500 with this body: the authorizer could not decide.
    Error(String),
}

/// Allowed when any of `attrs` (tried in order) is allowed; an authorizer error stops there.
/// The messages are upstream's.
pub async fn authorize_any<F, Fut>(user: &UserInfo, attrs: &[Attributes], mut check: F) -> Verdict
where
    F: FnMut(Attributes) -> Fut,
    Fut: std::future::Future<Output = Result<Decision, AuthzError>>,
{
    let Some(first) = attrs.first() else {
        return Verdict::Forbidden(
            "Authorization error: could not determine attributes for request".into(),
        );
    };
    for attr in attrs {
        match check(attr.clone()).await {
            Ok(Decision::Allow) => return Verdict::Allowed,
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(user = %user.name, verb = attr.verb, subresource = attr.subresource, %err, "Authorization error");
                return Verdict::Error(format!(
                    "Authorization error (user={}, verb={}, resource={}, subresource={})",
                    user.name, attr.verb, RESOURCE, attr.subresource
                ));
            }
        }
    }
    let subs: Vec<&str> = attrs.iter().map(|a| a.subresource).collect();
    tracing::debug!(user = %user.name, verb = first.verb, subresources = ?subs, "Forbidden");
    Verdict::Forbidden(format!(
        "Forbidden (user={}, verb={}, resource={}, subresource(s)=[{}])\n",
        user.name,
        first.verb,
        RESOURCE,
        subs.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::auth::attributes::for_request;
    use axum::http::Method;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn alice() -> UserInfo {
        UserInfo {
            name: "alice".into(),
            groups: vec!["dev".into()],
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn fine_grained_falls_back_to_proxy() {
        let attrs = for_request(&Method::GET, "/configz", "n1", true);
        let only_proxy = |a: Attributes| async move {
            Ok(if a.subresource == "proxy" {
                Decision::Allow
            } else {
                Decision::NoOpinion
            })
        };
        assert_eq!(
            authorize_any(&alice(), &attrs, only_proxy).await,
            Verdict::Allowed
        );
        let only_configz = |a: Attributes| async move {
            Ok(if a.subresource == "configz" {
                Decision::Allow
            } else {
                Decision::Deny
            })
        };
        assert_eq!(
            authorize_any(&alice(), &attrs, only_configz).await,
            Verdict::Allowed
        );
    }

    #[tokio::test]
    async fn denial_names_every_subresource() {
        let attrs = for_request(&Method::GET, "/pods", "n1", true);
        let v = authorize_any(&alice(), &attrs, |_| async { Ok(Decision::NoOpinion) }).await;
        assert_eq!(
            v,
            Verdict::Forbidden(
                "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
                    .into()
            )
        );
        let attrs = for_request(&Method::POST, "/exec/a/b/c", "n1", true);
        let v = authorize_any(&alice(), &attrs, |_| async { Ok(Decision::Deny) }).await;
        assert_eq!(
            v,
            Verdict::Forbidden(
                "Forbidden (user=alice, verb=create, resource=nodes, subresource(s)=[proxy])\n"
                    .into()
            )
        );
    }

    #[tokio::test]
    async fn authorizer_errors_are_500() {
        let attrs = for_request(&Method::GET, "/stats/summary", "n1", true);
        let boom = AuthzError::Encode("boom".into());
        let v = authorize_any(&alice(), &attrs, |_| async { Err(boom.clone()) }).await;
        assert_eq!(
            v,
            Verdict::Error(
                "Authorization error (user=alice, verb=get, resource=nodes, subresource=stats)"
                    .into()
            )
        );
    }

    #[test]
    fn review_spec_carries_user_and_node() {
        let attrs = for_request(&Method::GET, "/stats/summary", "n1", true);
        let spec = review_spec(&alice(), &attrs[0]);
        assert_eq!(spec.user.as_deref(), Some("alice"));
        assert_eq!(spec.groups, Some(vec!["dev".to_string()]));
        assert_eq!(spec.uid, None);
        let ra = spec.resource_attributes.unwrap();
        assert_eq!(ra.verb.as_deref(), Some("get"));
        assert_eq!(ra.resource.as_deref(), Some("nodes"));
        assert_eq!(ra.subresource.as_deref(), Some("stats"));
        assert_eq!(ra.name.as_deref(), Some("n1"));
        assert_eq!(ra.group.as_deref(), Some(""));
        assert_eq!(ra.version.as_deref(), Some("v1"));
    }

    #[test]
    fn status_to_decision() {
        let st = |allowed, denied| SubjectAccessReviewStatus {
            allowed,
            denied,
            ..Default::default()
        };
        assert_eq!(decision_of(&st(true, None)), Ok(Decision::Allow));
        assert_eq!(decision_of(&st(false, Some(true))), Ok(Decision::Deny));
        assert_eq!(decision_of(&st(false, None)), Ok(Decision::NoOpinion));
        assert!(decision_of(&st(true, Some(true))).is_err());
    }

    fn counting(calls: Arc<AtomicUsize>, allow: bool) -> ReviewFn {
        Arc::new(move |_spec| {
            calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                Ok(SubjectAccessReviewStatus {
                    allowed: allow,
                    ..Default::default()
                })
            })
        })
    }

    #[tokio::test]
    async fn webhook_caches_with_the_ttl_of_the_answer() {
        let attrs = for_request(&Method::GET, "/pods", "n1", true);
        let calls = Arc::new(AtomicUsize::new(0));
        let w = WebhookAuthorizer::new(
            counting(calls.clone(), true),
            Duration::from_secs(60),
            Duration::ZERO,
        );
        assert_eq!(w.authorize(&alice(), &attrs[0]).await, Ok(Decision::Allow));
        assert_eq!(w.authorize(&alice(), &attrs[0]).await, Ok(Decision::Allow));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "allowed answers cached");
        // Another subresource is another question.
        w.authorize(&alice(), &attrs[1]).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        let calls = Arc::new(AtomicUsize::new(0));
        let w = WebhookAuthorizer::new(
            counting(calls.clone(), false),
            Duration::from_secs(60),
            Duration::ZERO,
        );
        assert_eq!(
            w.authorize(&alice(), &attrs[0]).await,
            Ok(Decision::NoOpinion)
        );
        w.authorize(&alice(), &attrs[0]).await.unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "a zero unauthorized TTL caches no denial"
        );
    }
}
