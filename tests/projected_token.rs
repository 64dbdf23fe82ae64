//! Projected service account tokens through the real API server: the `kube-api-access-*`
//! volume v1.22+ API servers inject (a bound token, `kube-root-ca.crt`, the namespace), and a
//! token for a chosen audience. Each token is a JWT the API server accepts in a TokenReview,
//! and a token past 80 % of its life is replaced by a new one the API server accepts too.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

const NODE: &str = "krs-token-node";
const POD: &str = "krs-projected-token";
const REFRESH_POD: &str = "krs-token-refresh";

async fn review(client: &kube::Client, token: &str, audience: Option<&str>) -> (bool, String) {
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences: audience.map(|a| vec![a.to_string()]),
        },
        ..Default::default()
    };
    let done = reviews
        .create(&PostParams::default(), &review)
        .await
        .expect("TokenReview");
    let status = done.status.unwrap_or_default();
    let user = status.user.and_then(|u| u.username).unwrap_or_default();
    (status.authenticated.unwrap_or(false), user)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projected_tokens_are_bound_and_accepted() {
    let (client, pods) = default_pods(&[POD]).await;

    let mut k = Kubelet::started_as_node("projected-token", NODE);
    let pod: Pod = api_pod(json!({
        "metadata": {"name": POD},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; sleep 3600"],
                "volumeMounts": [
                    {"name": "kube-api-access-test", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
                    {"name": "aud", "mountPath": "/aud"},
                ],
            }],
            "volumes": [
                {"name": "kube-api-access-test", "projected": {"defaultMode": 0o644, "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ]}},
                {"name": "aud", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "aud-token", "audience": "krs-audience", "expirationSeconds": 600}},
                ]}},
            ],
        },
    }));
    let uid = create_pod(&pods, &pod).await;
    wait_async(Duration::from_secs(60), "the pod to run", || async {
        let p = pods.get(POD).await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;

    let projected = k
        .root_dir
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~projected");
    let access = projected.join("kube-api-access-test");
    let token = std::fs::read_to_string(access.join("token")).expect("token file");
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let ca = std::fs::read_to_string(access.join("ca.crt")).expect("ca.crt");
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    assert_eq!(
        std::fs::read_to_string(access.join("namespace")).unwrap(),
        "default"
    );
    let (ok, user) = review(&client, &token, None).await;
    assert!(ok, "the API server rejects the projected token");
    assert_eq!(user, "system:serviceaccount:default:default");

    let aud = std::fs::read_to_string(projected.join("aud/aud-token")).expect("aud-token");
    assert_ne!(aud, token);
    assert!(review(&client, &aud, Some("krs-audience")).await.0);
    assert!(
        !review(&client, &aud, None).await.0,
        "a token for another audience is not one for the API server"
    );

    // The same token is handed out again on later syncs (it is far from its refresh point).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        std::fs::read_to_string(access.join("token")).unwrap(),
        token
    );

    // The token is bound to the pod: once the pod is gone, the API server refuses it.
    delete_now(&pods, &[POD]).await;
    wait_async(Duration::from_secs(60), "the pod to go", || async {
        pods.get_opt(POD).await.ok()?.is_none().then_some(())
    })
    .await;
    wait_async(
        Duration::from_secs(30),
        "the bound token to be refused",
        || async { (!review(&client, &token, None).await.0).then_some(()) },
    )
    .await;
    k.cleanup();
}

/// The kubelet's token cache against the real TokenRequest API, its clock moved forward instead
/// of waiting out 80 % of the shortest lifetime the API server allows (600 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_renewed_past_eighty_percent_of_their_life() {
    let (client, pods) = default_pods(&[REFRESH_POD]).await;
    // The token is bound to this pod, which needs no kubelet: it never leaves Pending.
    let pod: Pod = api_pod(json!({
        "metadata": {"name": REFRESH_POD},
        "spec": {
            "nodeName": "krs-token-nowhere",
            "containers": [{"name": "main", "image": BUSYBOX}],
        },
    }));
    let pod = pods.create(&PostParams::default(), &pod).await.unwrap();

    let cache = kubelet_rs::testing::TokenCache::default();
    let t0 = SystemTime::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let first = cache.token_at(&client, &pod, "", 600, t0).await.unwrap();
    assert!(review(&client, &first, None).await.0);
    // A token fetched within the same second would be the same bytes (same claims, same
    // signature): wait, so that a fetch shows as a new token.
    let next_second = || tokio::time::sleep(Duration::from_millis(1100));
    next_second().await;
    // At 78 % of its life the token is handed out again; past 80 % a new one is fetched.
    let again = cache
        .token_at(&client, &pod, "", 600, at(470))
        .await
        .unwrap();
    assert_eq!(again, first);
    let renewed = cache
        .token_at(&client, &pod, "", 600, at(490))
        .await
        .unwrap();
    assert_ne!(
        renewed, first,
        "no new token past 80 % of the old one's life"
    );
    let (ok, user) = review(&client, &renewed, None).await;
    assert!(ok, "the API server rejects the renewed token");
    assert_eq!(user, "system:serviceaccount:default:default");

    delete_now(&pods, &[REFRESH_POD]).await;
}
