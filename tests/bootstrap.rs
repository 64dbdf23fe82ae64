//! TLS bootstrap against the test control plane: a bootstrap token buys a node client
//! certificate (the cluster auto-approves CSRs from the bootstrap group), and the written
//! kubeconfig then authenticates as the node; a kubelet killed while its CSR is pending comes
//! back to that same CSR.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

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

    let bootstrap_if_needed = || {
        kubelet_rs::testing::bootstrap_if_needed(
            &kubeconfig,
            Some(Path::new(bootstrap)),
            &cert_dir,
            NODE,
            TIMEOUT,
        )
    };
    bootstrap_if_needed().await.expect("bootstrap");

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
    bootstrap_if_needed().await.expect("second bootstrap");
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

const PENDING_NODE: &str = "krs-csr-restart-node";
/// A bootstrap group of the test's own: bound to system:node-bootstrapper (create and read
/// CSRs) but, unlike the cluster's, not to the nodeclient approval role, so the
/// controller-manager leaves its CSRs pending.
const PENDING_GROUP: &str = "system:bootstrappers:krs-csr-pending";
const PENDING_BINDING: &str = "krs-it-csr-pending-bootstrap";

/// Lower-case letters and digits, as bootstrap token ids and secrets are made of.
fn random_token_part(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = vec![0u8; len];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").unwrap(),
        &mut bytes,
    )
    .unwrap();
    bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Removes what the pending-CSR test put into the shared cluster, whatever way the test ends.
struct PendingCleanup {
    token_id: String,
}

impl Drop for PendingCleanup {
    fn drop(&mut self) {
        let secret = format!("bootstrap-token-{}", self.token_id);
        for args in [
            vec!["-n", "kube-system", "delete", "secret", &secret],
            vec!["delete", "clusterrolebinding", PENDING_BINDING],
            vec!["delete", "node", PENDING_NODE],
        ] {
            let _ = common::kubectl(&args)
                .arg("--ignore-not-found")
                .arg("--wait=false")
                .output();
        }
        let Ok(out) = common::kubectl(&["get", "csr", "-o", "json"]).output() else {
            return;
        };
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let users = [
            format!("system:bootstrap:{}", self.token_id),
            format!("system:node:{PENDING_NODE}"),
        ];
        for csr in list["items"].as_array().into_iter().flatten() {
            let user = csr["spec"]["username"].as_str().unwrap_or_default();
            if users.iter().any(|u| u == user)
                && let Some(name) = csr["metadata"]["name"].as_str()
            {
                let _ = common::kubectl(&["delete", "csr", name, "--ignore-not-found"]).output();
            }
        }
    }
}

fn csrs_of(list: &[CertificateSigningRequest], user: &str) -> Vec<String> {
    list.iter()
        .filter(|c| c.spec.username.as_deref() == Some(user))
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

/// Upstream keeps the bootstrap key in the cert dir and names the CSR after it: a kubelet
/// killed while its CSR waits for an admin comes back to the same CSR, and approving that one
/// (the only one the admin sees) completes the bootstrap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_kubelet_waits_on_its_pending_csr_after_restart() {
    let env = common::cluster_env();
    let client = common::admin_client().await;
    let token_id = random_token_part(6);
    let token = format!("{token_id}.{}", random_token_part(16));
    let _cleanup = PendingCleanup {
        token_id: token_id.clone(),
    };
    // An expiry lets the cluster's tokencleaner remove the token should the cleanup not run.
    let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1))
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("bootstrap-token-{token_id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": token_id,
            "token-secret": &token[7..],
            "expiration": expires,
            "usage-bootstrap-authentication": "true",
            "auth-extra-groups": PENDING_GROUP,
        },
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the bootstrap token");
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": PENDING_BINDING},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:node-bootstrapper"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": PENDING_GROUP}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("create the bootstrap binding");

    let mut k = common::Kubelet::new("csr-restart");
    let shared = std::fs::read_to_string(&env["KRS_BOOTSTRAP_KUBECONFIG"]).unwrap();
    let bootstrap = k.dir.path().join("bootstrap-kubelet.conf");
    std::fs::write(
        &bootstrap,
        shared.replace(&env["KRS_BOOTSTRAP_TOKEN"], &token),
    )
    .unwrap();
    // Should the node become Ready, no other test's pods are scheduled onto it.
    std::fs::write(
        k.drop_ins.join("50-csr-restart.conf"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         registerWithTaints:\n- key: krs-it/csr-restart\n  effect: NoSchedule\n",
    )
    .unwrap();
    let kubeconfig = k.dir.path().join("kubelet.conf");
    let cert_dir = k.dir.path().join("pki");
    let node_ip = env
        .get("KRS_NODE_IP")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1".into());
    let args = [
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--bootstrap-kubeconfig={}", bootstrap.display()),
        format!("--node-ip={node_ip}"),
        format!("--hostname-override={PENDING_NODE}"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let user = format!("system:bootstrap:{token_id}");
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let list_ours = || async {
        let list = csrs.list(&ListParams::default()).await.ok()?;
        Some(csrs_of(&list.items, &user))
    };

    k.spawn_with(&args);
    let first = common::wait_async(Duration::from_secs(60), "the first CSR", || async {
        list_ours().await.filter(|l| !l.is_empty())
    })
    .await;
    assert_eq!(first.len(), 1, "{first:?}");
    let first = first[0].clone();
    // Pending, not auto-approved: a second look a moment later still sees no certificate.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let csr = csrs.get(&first).await.expect("read the first CSR");
    assert!(
        csr.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_none_or(|c| c.is_empty()),
        "the test's CSR was acted on: {:?}",
        csr.status
    );
    k.assert_alive();
    k.kill();
    assert!(!kubeconfig.exists(), "bootstrapped without approval");

    k.spawn_with(&args);
    let waiting = "Waiting for the client certificate to be issued";
    common::wait_async(
        Duration::from_secs(60),
        "the restarted kubelet to wait",
        || async { (k.log().matches(waiting).count() >= 2).then_some(()) },
    )
    .await;

    Api::<CertificateSigningRequest>::all(client.clone())
        .patch_approval(
            &first,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"conditions": [{
                "type": "Approved", "status": "True", "reason": "KrsTestApproved",
                "message": "approved by tests/bootstrap.rs",
            }]}})),
        )
        .await
        .expect("approve the first CSR");

    let current = cert_dir.join("kubelet-client-current.pem");
    let got = common::wait_for_opt(Duration::from_secs(60), || {
        (kubeconfig.exists() && current.exists()).then_some(())
    });
    let after = list_ours().await.unwrap_or_default();
    assert!(
        got.is_some(),
        "the restarted kubelet got no certificate after {first} was approved; CSRs of {user}: \
         {after:?}\nkubelet log tail:\n{}",
        common::tail(&k.log(), 30)
    );
    assert_eq!(after, vec![first.clone()], "one CSR for the node");
    assert!(
        !cert_dir.join("kubelet-client.key.tmp").exists(),
        "the bootstrap key is removed once the pair is stored"
    );
    let pem = std::fs::read_to_string(&current).unwrap();
    assert!(pem.contains("BEGIN CERTIFICATE") && pem.contains("PRIVATE KEY"));
    k.stop();
}
