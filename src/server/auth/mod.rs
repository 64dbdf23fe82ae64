//! Authentication and authorization for the kubelet's API port, as upstream's kubelet:
//! client certificate first, then bearer token (TokenReview), then anonymous when allowed;
//! then the authorizer (AlwaysAllow or SubjectAccessReview) on `nodes/<subresource>`.
//!
//! Handlers behind [`middleware`] find the caller as `axum::Extension<UserInfo>`.

pub mod attributes;
pub mod authorizer;
pub mod cache;
mod retry;
pub mod token;
pub mod user;
pub mod x509;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::{debug, info};

use crate::config::KubeletConfiguration;
use authorizer::{Authorizer, Verdict, WebhookAuthorizer};
use token::TokenAuthenticator;
pub use user::{Outcome, UserInfo};
use x509::{PeerCertificates, X509Authenticator};

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("unable to load client CA file {path}: {reason}")]
    ClientCa { path: PathBuf, reason: String },
    #[error("no client provided, cannot use webhook authentication")]
    NoClientForAuthentication,
    #[error("no client provided, cannot use webhook authorization")]
    NoClientForAuthorization,
    #[error("No authorization mode specified")]
    NoAuthorizationMode,
    #[error("Unknown authorization mode {0}")]
    UnknownAuthorizationMode(String),
}

/// Everything the middleware needs, built once at start-up.
pub struct KubeletAuth {
    x509: Option<X509Authenticator>,
    token: Option<TokenAuthenticator>,
    anonymous: bool,
    authorizer: Authorizer,
    node_name: String,
    /// KubeletFineGrainedAuthz: per-endpoint subresources before `proxy`.
    fine_grained: bool,
}

/// Beta and on by default since 1.33; a configuration may still turn it off.
fn fine_grained_authz(cfg: &KubeletConfiguration) -> bool {
    cfg.feature_gates
        .get("KubeletFineGrainedAuthz")
        .copied()
        .unwrap_or(true)
}

impl KubeletAuth {
    pub fn from_config(
        cfg: &KubeletConfiguration,
        node_name: &str,
        api: Option<&kube::Client>,
    ) -> Result<Self, AuthError> {
        let authn = &cfg.authentication;
        let x509 = match authn.x509.client_ca_file.as_str() {
            "" => None,
            path => Some(X509Authenticator::new(std::path::Path::new(path))?),
        };
        let token = if authn.webhook.enabled {
            let client = api.ok_or(AuthError::NoClientForAuthentication)?;
            Some(TokenAuthenticator::new(
                token::api_reviewer(client.clone()),
                authn.webhook.cache_ttl.0,
            ))
        } else {
            None
        };
        let authz = &cfg.authorization;
        let authorizer = match authz.mode.as_str() {
            "AlwaysAllow" => Authorizer::AlwaysAllow,
            "Webhook" => {
                let client = api.ok_or(AuthError::NoClientForAuthorization)?;
                Authorizer::Webhook(WebhookAuthorizer::new(
                    authorizer::api_reviewer(client.clone()),
                    authz.webhook.cache_authorized_ttl.0,
                    authz.webhook.cache_unauthorized_ttl.0,
                ))
            }
            "" => return Err(AuthError::NoAuthorizationMode),
            other => return Err(AuthError::UnknownAuthorizationMode(other.to_string())),
        };
        info!(
            client_certificates = x509.is_some(),
            token_webhook = token.is_some(),
            anonymous = authn.anonymous.enabled,
            authorization = %authz.mode,
            "Kubelet API authentication and authorization"
        );
        Ok(Self {
            x509,
            token,
            anonymous: authn.anonymous.enabled,
            authorizer,
            node_name: node_name.to_string(),
            fine_grained: fine_grained_authz(cfg),
        })
    }

    async fn authenticate(
        &self,
        certs: Option<&PeerCertificates>,
        bearer: Option<String>,
    ) -> Result<UserInfo, Unauthenticated> {
        let from_cert = match (&self.x509, certs) {
            (Some(x), Some(c)) => x.authenticate(&c.0),
            _ => Outcome::NoCredential,
        };
        let token = self.token.as_ref();
        let check_token = move |t: String| async move {
            match token {
                Some(auth) => auth.authenticate(&t).await,
                None => Outcome::NoCredential,
            }
        };
        authenticate(from_cert, bearer, check_token, self.anonymous).await
    }
}

/// Why a request is not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unauthenticated {
    /// No credential at all, and anonymous requests are not allowed.
    #[error("no credentials")]
    NoCredentials,
    /// Each presented credential's authenticator said why it is not good.
    #[error("{}", .0.join("; "))]
    Rejected(Vec<String>),
}

/// Upstream's chain: the first authenticator that names a user wins; when none does, any
/// failure is final (a bad credential is never treated as anonymous); only a request with no
/// credential at all may be anonymous.
pub async fn authenticate<F, Fut>(
    from_cert: Outcome,
    bearer: Option<String>,
    check_token: F,
    anonymous: bool,
) -> Result<UserInfo, Unauthenticated>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Outcome>,
{
    let mut failures = Vec::new();
    match from_cert {
        Outcome::User(u) => return Ok(u.with_authenticated_group()),
        Outcome::Failed(why) => failures.push(why),
        Outcome::NoCredential => {}
    }
    if let Some(t) = bearer {
        match check_token(t).await {
            Outcome::User(u) => return Ok(u.with_authenticated_group()),
            Outcome::Failed(why) => failures.push(why),
            Outcome::NoCredential => {}
        }
    }
    if !failures.is_empty() {
        return Err(Unauthenticated::Rejected(failures));
    }
    if anonymous {
        return Ok(UserInfo::anonymous());
    }
    Err(Unauthenticated::NoCredentials)
}

fn plain(status: StatusCode, body: String) -> Response {
    (
        status,
        [("content-type", "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// The axum layer in front of every route of the authenticated port.
pub async fn middleware(
    State(auth): State<Arc<KubeletAuth>>,
    mut req: Request,
    next: Next,
) -> Response {
    let bearer = token::bearer_token(req.headers());
    let certs = req.extensions().get::<PeerCertificates>();
    let had_token = bearer.is_some();
    let user = match auth.authenticate(certs, bearer).await {
        Ok(u) => u,
        Err(why) => {
            // A bad credential (or a token review that could not reach the API server) is
            // worth a line; a request with none is routine.
            if why == Unauthenticated::NoCredentials {
                debug!(
                    path = req.uri().path(),
                    "Request without credentials refused"
                );
            } else {
                info!(path = req.uri().path(), reason = %why, "Unable to authenticate the request");
            }
            return plain(StatusCode::UNAUTHORIZED, "Unauthorized".into());
        }
    };
    // Like upstream: once a token identified the caller, handlers (and anything they proxy
    // to) never see it.
    if had_token {
        req.headers_mut().remove(AUTHORIZATION);
    }
    let attrs = attributes::for_request(
        req.method(),
        req.uri().path(),
        &auth.node_name,
        auth.fine_grained,
    );
    let verdict = authorizer::authorize_any(&user, &attrs, |a| {
        let auth = auth.clone();
        let user = user.clone();
        async move { auth.authorizer.authorize(&user, &a).await }
    })
    .await;
    match verdict {
        Verdict::Allowed => {
            debug!(user = %user.name, path = req.uri().path(), "Authorized");
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        Verdict::Forbidden(msg) => plain(StatusCode::FORBIDDEN, msg),
        Verdict::Error(msg) => plain(StatusCode::INTERNAL_SERVER_ERROR, msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KubeletConfiguration;

    fn user(name: &str) -> UserInfo {
        UserInfo {
            name: name.into(),
            ..Default::default()
        }
    }

    async fn run(
        cert: Outcome,
        bearer: Option<&str>,
        token: Outcome,
        anonymous: bool,
    ) -> Result<UserInfo, String> {
        authenticate(
            cert,
            bearer.map(str::to_string),
            move |_| async move { token },
            anonymous,
        )
        .await
        .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn certificate_wins_before_token() {
        let u = run(
            Outcome::User(user("cert-user")),
            Some("t"),
            Outcome::User(user("token-user")),
            false,
        )
        .await
        .unwrap();
        assert_eq!(u.name, "cert-user");
        assert_eq!(u.groups, vec![user::AUTHENTICATED_GROUP]);
    }

    #[tokio::test]
    async fn token_identifies_when_no_certificate() {
        let u = run(
            Outcome::NoCredential,
            Some("t"),
            Outcome::User(user("bob")),
            false,
        )
        .await
        .unwrap();
        assert_eq!(u.name, "bob");
        // A bad certificate does not stop a good token, as in upstream's union.
        let u = run(
            Outcome::Failed("bad cert".into()),
            Some("t"),
            Outcome::User(user("bob")),
            true,
        )
        .await
        .unwrap();
        assert_eq!(u.name, "bob");
    }

    #[tokio::test]
    async fn no_credentials_is_anonymous_only_when_enabled() {
        let anon = run(Outcome::NoCredential, None, Outcome::NoCredential, true)
            .await
            .unwrap();
        assert_eq!(anon, UserInfo::anonymous());
        assert!(
            run(Outcome::NoCredential, None, Outcome::NoCredential, false)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn rejected_credentials_are_never_anonymous() {
        let bad_token = run(
            Outcome::NoCredential,
            Some("t"),
            Outcome::Failed("invalid bearer token".into()),
            true,
        )
        .await;
        assert_eq!(bad_token, Err("invalid bearer token".into()));
        let bad_cert = run(
            Outcome::Failed("unknown authority".into()),
            None,
            Outcome::NoCredential,
            true,
        )
        .await;
        assert!(bad_cert.is_err());
    }

    #[test]
    fn webhook_modes_need_a_client() {
        let mut cfg = KubeletConfiguration::legacy_flag_defaults();
        assert!(KubeletAuth::from_config(&cfg, "n", None).is_ok());
        cfg.authorization.mode = "Webhook".into();
        let err = KubeletAuth::from_config(&cfg, "n", None).err().unwrap();
        assert_eq!(
            err.to_string(),
            "no client provided, cannot use webhook authorization"
        );
        cfg.authorization.mode = "AlwaysAllow".into();
        cfg.authentication.webhook.enabled = true;
        let err = KubeletAuth::from_config(&cfg, "n", None).err().unwrap();
        assert_eq!(
            err.to_string(),
            "no client provided, cannot use webhook authentication"
        );
        cfg.authentication.webhook.enabled = false;
        cfg.authorization.mode = "RBAC".into();
        assert!(matches!(
            KubeletAuth::from_config(&cfg, "n", None),
            Err(AuthError::UnknownAuthorizationMode(_))
        ));
    }

    /// The middleware in front of one handler that echoes the user it was given, with a token
    /// reviewer knowing "alice-token" and an access reviewer granting alice nodes/proxy only.
    fn guarded(anonymous: bool, sar_fails: bool) -> axum::Router {
        use axum::Extension;
        use k8s_openapi::api::authentication::v1::TokenReviewStatus;
        use k8s_openapi::api::authorization::v1::SubjectAccessReviewStatus;
        let tokens: token::ReviewFn = Arc::new(|t: String| {
            Box::pin(async move {
                Ok(if t == "alice-token" {
                    TokenReviewStatus {
                        authenticated: Some(true),
                        user: Some(k8s_openapi::api::authentication::v1::UserInfo {
                            username: Some("alice".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }
                } else {
                    TokenReviewStatus::default()
                })
            })
        });
        let sar: authorizer::ReviewFn = Arc::new(move |spec| {
            Box::pin(async move {
                if sar_fails {
                    return Err(retry::ReviewError::Failed {
                        review: "subject access review",
                        reason: "apiserver unreachable".into(),
                    });
                }
                let sub = spec
                    .resource_attributes
                    .and_then(|r| r.subresource)
                    .unwrap_or_default();
                Ok(SubjectAccessReviewStatus {
                    allowed: spec.user.as_deref() == Some("alice") && sub == "proxy",
                    ..Default::default()
                })
            })
        });
        let auth = KubeletAuth {
            x509: None,
            token: Some(TokenAuthenticator::new(tokens, std::time::Duration::ZERO)),
            anonymous,
            authorizer: Authorizer::Webhook(WebhookAuthorizer::new(
                sar,
                std::time::Duration::ZERO,
                std::time::Duration::ZERO,
            )),
            node_name: "n1".into(),
            fine_grained: true,
        };
        async fn echo(Extension(u): Extension<UserInfo>, req: Request) -> String {
            let leaked = req.headers().contains_key(AUTHORIZATION);
            format!("{} {:?} leaked={leaked}", u.name, u.groups)
        }
        axum::Router::new()
            .route("/pods", axum::routing::get(echo))
            .route("/stats/summary", axum::routing::get(echo))
            .layer(axum::middleware::from_fn_with_state(
                Arc::new(auth),
                middleware,
            ))
    }

    async fn call(router: axum::Router, path: &str, token: Option<&str>) -> (u16, String) {
        use tower::ServiceExt;
        let mut req = axum::http::Request::get(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = router
            .oneshot(req.body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap();
        let code = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn middleware_answers_401_403_200_and_500() {
        let (code, body) = call(guarded(false, false), "/pods", None).await;
        assert_eq!((code, body.as_str()), (401, "Unauthorized"));
        let (code, _) = call(guarded(true, false), "/pods", Some("stolen")).await;
        assert_eq!(code, 401, "a rejected token is not anonymous");
        let (code, body) = call(guarded(true, false), "/pods", None).await;
        assert_eq!(code, 403);
        assert_eq!(
            body,
            "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
        );
        // alice has nodes/proxy: /pods falls back to it, /stats needs nodes/stats.
        let (code, body) = call(guarded(false, false), "/pods", Some("alice-token")).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(
            body, "alice [\"system:authenticated\"] leaked=false",
            "the handler sees the user, not the token"
        );
        let (code, body) = call(guarded(false, false), "/stats/summary", Some("alice-token")).await;
        assert_eq!(code, 403);
        assert!(body.contains("subresource(s)=[stats]"), "{body}");
        let (code, body) = call(guarded(false, true), "/pods", Some("alice-token")).await;
        assert_eq!(code, 500);
        assert_eq!(
            body,
            "Authorization error (user=alice, verb=get, resource=nodes, subresource=pods)"
        );
    }

    #[test]
    fn fine_grained_gate_defaults_on() {
        let mut cfg = KubeletConfiguration::legacy_flag_defaults();
        assert!(fine_grained_authz(&cfg));
        cfg.feature_gates
            .insert("KubeletFineGrainedAuthz".into(), false);
        assert!(!fine_grained_authz(&cfg));
    }
}
