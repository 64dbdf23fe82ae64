//! TLS bootstrap against the test control plane: a bootstrap token buys a node client
//! certificate (the cluster auto-approves CSRs from the bootstrap group), and the written
//! kubeconfig then authenticates as the node.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, PostParams};

const NODE: &str = "krs-bootstrap-node";
const TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_gets_a_node_certificate() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let env = common::cluster_env();
    let bootstrap = env
        .get("KRS_BOOTSTRAP_KUBECONFIG")
        .expect("env.sh exports KRS_BOOTSTRAP_KUBECONFIG");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubelet.conf");
    let cert_dir = dir.path().join("pki");

    kubelet_rs::testing::bootstrap_if_needed(
        &kubeconfig,
        Some(Path::new(bootstrap)),
        &cert_dir,
        NODE,
        TIMEOUT,
    )
    .await
    .expect("bootstrap");

    let current = cert_dir.join("kubelet-client-current.pem");
    assert!(
        std::fs::symlink_metadata(&current)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let target = cert_dir.join(std::fs::read_link(&current).unwrap());
    let name = target.file_name().unwrap().to_string_lossy().to_string();
    assert!(name.starts_with("kubelet-client-2"), "{name}");
    let mode = std::fs::metadata(&target).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let pem = std::fs::read_to_string(&current).unwrap();
    assert!(pem.contains("BEGIN CERTIFICATE"));
    assert!(pem.contains("PRIVATE KEY"));
    let kc = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(kc.contains(&current.display().to_string()), "{kc}");
    assert!(!kc.contains("token"), "{kc}");

    // The written kubeconfig authenticates as the node: the node authorizer lets it list nodes,
    // and the API server names the user after the certificate's CN.
    let client = kubelet_rs::testing::connect(&kubeconfig, TIMEOUT)
        .await
        .expect("client from the bootstrapped kubeconfig");
    let nodes: Api<Node> = Api::all(client.clone());
    tokio::time::timeout(TIMEOUT, nodes.list(&ListParams::default().limit(1)))
        .await
        .expect("list nodes in time")
        .expect("list nodes as the node");
    let reviews: Api<SelfSubjectReview> = Api::all(client);
    let review = tokio::time::timeout(
        TIMEOUT,
        reviews.create(&PostParams::default(), &SelfSubjectReview::default()),
    )
    .await
    .expect("self review in time");
    let me = format!("system:node:{NODE}");
    match review {
        Ok(r) => {
            let user = r.status.and_then(|s| s.user_info).unwrap_or_default();
            assert_eq!(user.username.as_deref(), Some(me.as_str()));
            let groups = user.groups.unwrap_or_default();
            assert!(groups.iter().any(|g| g == "system:nodes"), "{groups:?}");
        }
        // Clusters whose RBAC does not grant self reviews to nodes still name the user.
        Err(kube::Error::Api(s)) if s.code == 403 => {
            assert!(
                s.message.contains(&format!("User \"{me}\"")),
                "{}",
                s.message
            );
        }
        Err(e) => panic!("self review: {e}"),
    }

    // A second call finds the kubeconfig valid and leaves the files alone.
    kubelet_rs::testing::bootstrap_if_needed(
        &kubeconfig,
        Some(Path::new(bootstrap)),
        &cert_dir,
        NODE,
        TIMEOUT,
    )
    .await
    .expect("second bootstrap");
    assert_eq!(std::fs::read_link(&current).unwrap(), Path::new(&name));
    assert_eq!(std::fs::read_dir(&cert_dir).unwrap().count(), 2);

    // Rotation: the node's own certificate buys the next one (selfnodeclient approval), the
    // link moves, and a new client made from the unchanged kubeconfig uses it.
    std::thread::sleep(Duration::from_millis(1100));
    let before = std::fs::read_to_string(&current).unwrap();
    let rotated = kubelet_rs::testing::rotate_once(
        &kubeconfig,
        &cert_dir,
        NODE,
        TIMEOUT,
        &tokio_util::sync::CancellationToken::new(),
    )
    .await
    .expect("rotation");
    assert_eq!(
        cert_dir.join(std::fs::read_link(&current).unwrap()),
        rotated
    );
    assert_ne!(std::fs::read_to_string(&current).unwrap(), before);
    assert!(target.exists(), "the previous pair is kept");
    assert_eq!(std::fs::read_to_string(&kubeconfig).unwrap(), kc);
    let client = kubelet_rs::testing::connect(&kubeconfig, TIMEOUT)
        .await
        .expect("client after rotation");
    tokio::time::timeout(
        TIMEOUT,
        Api::<Node>::all(client).list(&ListParams::default().limit(1)),
    )
    .await
    .expect("list nodes in time")
    .expect("list nodes with the rotated certificate");
}
