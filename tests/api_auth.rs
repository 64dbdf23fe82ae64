//! The authenticated kubelet API (--port, 10250 upstream) over TLS: standalone with upstream's
//! legacy defaults (anonymous, AlwaysAllow), and in the test control plane with client
//! certificates, TokenReview and SubjectAccessReview.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Node, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

#[test]
fn standalone_serves_pods_configz_and_running_pods_over_tls() {
    let _guard = serial();
    let mut k = Kubelet::new("apiauth");
    // Its own cgroup subtree: kubelets of other test runs on this machine may use the default.
    k.cgroup_root = "/krs-it-apiauth".into();
    k.start();
    k.write_manifest(
        "web.yaml",
        &pod_yaml("web", "Always", 1, "while true; do sleep 1; done"),
    );
    k.wait_pod("web", "running", Duration::from_secs(60), |p| {
        phase(p) == "Running"
    });

    // The self-signed pair names 127.0.0.1 and chains to the CA stored with it.
    let crt = k.dir.path().join("pki/kubelet.crt");
    assert!(crt.exists(), "no self-signed certificate in --cert-dir");
    let crt_path = crt.to_string_lossy().into_owned();
    let (code, body) = https_get(k.port, "/pods", &["--cacert", &crt_path]).expect("GET /pods");
    assert_eq!(code, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert!(names.contains(&format!("web-{NODE}").as_str()), "{names:?}");

    let (code, body) = https_get(k.port, "/configz", &[]).expect("GET /configz");
    assert_eq!(code, 200, "{body}");
    let cz: Value = serde_json::from_str(&body).unwrap();
    let kc = &cz["kubeletconfig"];
    assert_eq!(kc["port"], json!(k.port));
    assert_eq!(kc["authorization"]["mode"], "AlwaysAllow");
    assert_eq!(kc["authentication"]["anonymous"]["enabled"], true);
    assert_eq!(kc["tlsCertFile"], crt.to_string_lossy().as_ref());
    assert!(kc.get("kind").is_none(), "configz has no TypeMeta");

    let (code, body) = https_get(k.port, "/runningpods/", &[]).expect("GET /runningpods/");
    assert_eq!(code, 200, "{body}");
    let running: Value = serde_json::from_str(&body).unwrap();
    let web = running["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["metadata"]["name"] == format!("web-{NODE}").as_str())
        .unwrap_or_else(|| panic!("web not among running pods: {body}"));
    assert!(
        web["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert_eq!(web["spec"]["containers"][0]["name"], "main");

    let (code, body) = https_get(k.port, "/healthz", &["--http2"]).expect("GET /healthz");
    assert_eq!((code, body.as_str()), (200, "ok"), "HTTP/2 works too");
    let (code, _) = https_get(k.port, "/nope", &[]).expect("GET /nope");
    assert_eq!(code, 404);

    k.cleanup();
}

const AUTH_NODE: &str = "krs-it-apiauth";
const READER: &str = "krs-apiauth-reader";

async fn sa_token(client: &kube::Client) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let _ = sas.delete(READER, &DeleteParams::default()).await;
    wait_async(
        Duration::from_secs(30),
        "old service account gone",
        || async { sas.get_opt(READER).await.ok()?.is_none().then_some(()) },
    )
    .await;
    let sa: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": READER}
    }))
    .unwrap();
    sas.create(&PostParams::default(), &sa)
        .await
        .expect("create service account");
    // 1.20's token controller puts a token secret on every service account.
    let secret = wait_async(Duration::from_secs(60), "service account token", || async {
        let sa = sas.get_opt(READER).await.ok()??;
        sa.secrets?.first()?.name.clone()
    })
    .await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let s = secrets.get(&secret).await.expect("token secret");
    let token = s
        .data
        .unwrap_or_default()
        .remove("token")
        .expect("token key");
    String::from_utf8(token.0).expect("token text")
}

async fn grant_node_proxy(client: &kube::Client) {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let _ = roles.delete(READER, &DeleteParams::default()).await;
    let _ = bindings.delete(READER, &DeleteParams::default()).await;
    let role: ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": READER},
        "rules": [{"apiGroups": [""], "resources": ["nodes/proxy", "nodes/stats"], "verbs": ["get"]}]
    }))
    .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": READER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER},
        "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": "default"}]
    }))
    .unwrap();
    roles
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
}

async fn tidy(client: &kube::Client) {
    let dp = DeleteParams::default();
    let _ = Api::<ClusterRoleBinding>::all(client.clone())
        .delete(READER, &dp)
        .await;
    let _ = Api::<ClusterRole>::all(client.clone())
        .delete(READER, &dp)
        .await;
    let _ = Api::<ServiceAccount>::namespaced(client.clone(), "default")
        .delete(READER, &dp)
        .await;
    let _ = Api::<Node>::all(client.clone())
        .delete(AUTH_NODE, &dp)
        .await;
}

// The guard keeps the other test's kubelet off the runtime meanwhile; this test owns its
// runtime, so nothing else on it waits for the lock.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_authenticates_and_authorizes_through_the_apiserver() {
    let _guard = serial();
    let env = cluster_env();
    let ca = env.get("KRS_CLUSTER_CA").expect("KRS_CLUSTER_CA").clone();
    let pki = Path::new(&ca).parent().unwrap().to_path_buf();
    let client = admin_client().await;

    let mut k = Kubelet::new("apiauth-cluster");
    k.cgroup_root = "/krs-it-apiauth".into();
    let mut flags = webhook_auth_flags();
    flags.push("--authorization-webhook-cache-unauthorized-ttl=1s".into());
    k.start_as_node(
        AUTH_NODE,
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let port = k.port;

    let (code, body) = https_get(port, "/pods", &[]).expect("no credentials");
    assert_eq!((code, body.as_str()), (401, "Unauthorized"));
    let (code, _) = https_get(port, "/pods", &["-H", "Authorization: Bearer not-a-token"])
        .expect("unknown token");
    assert_eq!(code, 401);

    let token = sa_token(&client).await;
    let bearer = format!("Authorization: Bearer {token}");
    let user = format!("system:serviceaccount:default:{READER}");
    let (code, body) = https_get(port, "/pods", &["-H", &bearer]).expect("token, no rights");
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body,
        format!("Forbidden (user={user}, verb=get, resource=nodes, subresource(s)=[pods proxy])\n")
    );
    let (code, body) = https_get(port, "/configz", &["-H", &bearer]).expect("configz, no rights");
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("subresource(s)=[configz proxy]"), "{body}");

    grant_node_proxy(&client).await;
    // Denials are cached for 1s here and RBAC takes a moment to see the binding.
    let body = wait_async(Duration::from_secs(30), "nodes/proxy grant", || async {
        https_get(port, "/pods", &["-H", &bearer])
            .filter(|(c, _)| *c == 200)
            .map(|(_, b)| b)
    })
    .await;
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    let (code, body) = https_get(port, "/configz", &["-H", &bearer]).expect("configz");
    assert_eq!(code, 200, "{body}");
    let cz: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(cz["kubeletconfig"]["authorization"]["mode"], "Webhook");
    assert_eq!(
        cz["kubeletconfig"]["authentication"]["x509"]["clientCAFile"],
        ca.as_str()
    );

    // The API server's own client certificate (O=system:masters) is trusted through the CA.
    let cert = pki.join("apiserver-kubelet-client.crt");
    let key = pki.join("apiserver-kubelet-client.key");
    let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());
    let with_cert = ["--cert", cert.as_ref(), "--key", key.as_ref()];
    let (code, body) = https_get(port, "/runningpods/", &with_cert).expect("client cert");
    assert_eq!(code, 200, "{body}");
    let (code, body) = https_get(port, "/healthz", &with_cert).expect("client cert healthz");
    assert_eq!((code, body.as_str()), (200, "ok"));

    tidy(&client).await;
    k.cleanup();
}
