//! The certificates kubeadm relies on, against the test control plane: a kubeconfig with an
//! embedded client certificate (a v1 one, as `openssl x509 -req` makes without -extfile) and
//! rotateCertificates on, and serverTLSBootstrap's serving certificate, requested, approved
//! here, signed by the controller-manager and then served on the kubelet's port.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

const EMBEDDED_NODE: &str = "krs-certs-embedded";
const SERVING_NODE: &str = "krs-certs-serving";

/// A v1 client certificate for `node` signed by the cluster CA: cert PEM, key PEM.
fn v1_node_cert(ca: &Path, dir: &Path, node: &str) -> (String, String) {
    let ca_key = ca.with_extension("key");
    let (key, csr, crt) = (dir.join("v1.key"), dir.join("v1.csr"), dir.join("v1.crt"));
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let p = |p: &Path| p.to_string_lossy().into_owned();
    run(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        &p(&key),
    ]);
    run(&[
        "req",
        "-new",
        "-key",
        &p(&key),
        "-subj",
        &format!("/O=system:nodes/CN=system:node:{node}"),
        "-out",
        &p(&csr),
    ]);
    // No -extfile: a v1 certificate. -set_serial keeps openssl from writing a serial file
    // beside the cluster CA.
    run(&[
        "x509",
        "-req",
        "-in",
        &p(&csr),
        "-CA",
        &p(ca),
        "-CAkey",
        &p(&ca_key),
        "-set_serial",
        "0x5eed",
        "-days",
        "2",
        "-sha256",
        "-out",
        &p(&crt),
    ]);
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in", &p(&crt)])
        .output()
        .expect("openssl x509 -text");
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("Version: 1 (0x0)"),
        "not a v1 certificate"
    );
    (
        std::fs::read_to_string(&crt).unwrap(),
        std::fs::read_to_string(&key).unwrap(),
    )
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// `base` (a kubeconfig from kubelet-kubeconfig.sh) with its embedded pair replaced.
fn with_embedded_pair(base: &str, cert: &str, key: &str) -> String {
    base.lines()
        .map(|l| {
            let indent = &l[..l.len() - l.trim_start().len()];
            if l.trim_start().starts_with("client-certificate-data:") {
                format!("{indent}client-certificate-data: {}", b64(cert))
            } else if l.trim_start().starts_with("client-key-data:") {
                format!("{indent}client-key-data: {}", b64(key))
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn first_cert_der(pem_text: &str) -> Vec<u8> {
    pem::parse_many(pem_text)
        .unwrap()
        .into_iter()
        .find(|p| p.tag() == "CERTIFICATE")
        .expect("a certificate")
        .into_contents()
}

async fn node_ready(client: &kube::Client, node: &str) -> bool {
    let Ok(n) = Api::<Node>::all(client.clone()).get(node).await else {
        return false;
    };
    n.status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

async fn csrs_of(
    client: &kube::Client,
    node: &str,
    signer: &str,
) -> Vec<CertificateSigningRequest> {
    let user = format!("system:node:{node}");
    Api::<CertificateSigningRequest>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.spec.signer_name == signer && c.spec.username.as_deref() == Some(&user))
        .collect()
}

async fn tidy(client: &kube::Client, node: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<Node>::all(client.clone()).delete(node, &dp).await;
    let api = Api::<CertificateSigningRequest>::all(client.clone());
    for signer in [
        "kubernetes.io/kube-apiserver-client-kubelet",
        "kubernetes.io/kubelet-serving",
    ] {
        for csr in csrs_of(client, node, signer).await {
            if let Some(name) = csr.metadata.name {
                let _ = api.delete(&name, &dp).await;
            }
        }
    }
}

// The guard keeps other kubelets of this binary off the runtime meanwhile.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_v1_client_certificate_is_stored_then_rotated() {
    let _guard = serial();
    let env = cluster_env();
    let ca = Path::new(env.get("KRS_CLUSTER_CA").expect("KRS_CLUSTER_CA")).to_path_buf();
    let admin = admin_client().await;
    tidy(&admin, EMBEDDED_NODE).await;

    let mut k = Kubelet::new("certs-embedded");
    k.cgroup_root = "/krs-it-certs".into();
    let base = k.dir.path().join("base.conf");
    node_kubeconfig(EMBEDDED_NODE, &base);
    let (cert, key) = v1_node_cert(&ca, k.dir.path(), EMBEDDED_NODE);
    let kubeconfig = k.dir.path().join("kubelet.conf");
    let base_text = std::fs::read_to_string(&base).unwrap();
    std::fs::write(&kubeconfig, with_embedded_pair(&base_text, &cert, &key)).unwrap();
    let node_ip = env
        .get("KRS_NODE_IP")
        .cloned()
        .unwrap_or("127.0.0.1".into());
    let cert_dir = k.dir.path().join("pki");
    k.start_with(&[
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--node-ip={node_ip}"),
        &format!("--hostname-override={EMBEDDED_NODE}"),
        "--rotate-certificates=true",
    ]);

    // The embedded pair went into the store, and was rotated out at once by a certificate
    // the controller-manager signed for the node (auto-approved: the node renews its own).
    let current = cert_dir.join("kubelet-client-current.pem");
    let embedded = first_cert_der(&cert);
    let rotated = wait_async(
        Duration::from_secs(60),
        "rotated client certificate",
        || {
            let current = current.clone();
            let embedded = embedded.clone();
            async move {
                let text = std::fs::read_to_string(&current).ok()?;
                let der = first_cert_der(&text);
                (der != embedded).then_some(der)
            }
        },
    )
    .await;
    let log = k.log();
    assert!(
        log.contains("Stored the kubeconfig's embedded client certificate"),
        "{}",
        tail(&log, 40)
    );
    assert!(
        log.contains("Rotated the client certificate"),
        "{}",
        tail(&log, 40)
    );
    let (_, parsed) = x509_parser::parse_x509_certificate(&rotated).unwrap();
    let cn = parsed.subject().iter_common_name().next().unwrap();
    assert_eq!(cn.as_str().unwrap(), format!("system:node:{EMBEDDED_NODE}"));
    assert_ne!(parsed.version(), x509_parser::x509::X509Version::V1);
    let link = std::fs::read_link(&current).unwrap();
    assert!(
        link.to_string_lossy().starts_with("kubelet-client-2"),
        "{link:?}"
    );
    let csrs = csrs_of(
        &admin,
        EMBEDDED_NODE,
        "kubernetes.io/kube-apiserver-client-kubelet",
    )
    .await;
    assert!(!csrs.is_empty(), "no CSR by the node");
    // The kubeconfig is left as it was (kubeadm rewrites it later).
    assert_eq!(
        std::fs::read_to_string(&kubeconfig).unwrap(),
        with_embedded_pair(&base_text, &cert, &key)
    );

    // The kubelet goes on with the new certificate: the node turns Ready and stays so.
    wait_async(Duration::from_secs(60), "node Ready", || {
        let admin = admin.clone();
        async move { node_ready(&admin, EMBEDDED_NODE).await.then_some(()) }
    })
    .await;
    let log = k.log();
    assert!(
        !log.contains("API client still uses the previous certificate"),
        "{}",
        tail(&log, 40)
    );

    // A restart finds the store's pair and does not rotate again.
    k.stop();
    let before = std::fs::read_link(&current).unwrap();
    k.start_with(&[
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--node-ip={node_ip}"),
        &format!("--hostname-override={EMBEDDED_NODE}"),
        "--rotate-certificates=true",
    ]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(std::fs::read_link(&current).unwrap(), before);
    k.stop();
    tidy(&admin, EMBEDDED_NODE).await;
}

/// Records the leaf a TLS server presents, trusting anything (the test checks it itself).
#[derive(Debug)]
struct Record(Mutex<Option<Vec<u8>>>);

impl rustls::client::danger::ServerCertVerifier for Record {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        *self.0.lock().unwrap() = Some(end_entity.to_vec());
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        signature: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.verify_tls12_signature(message, cert, signature)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The leaf a new connection to 127.0.0.1:`port` is served; None when the handshake fails.
async fn served(port: u16) -> Option<Vec<u8>> {
    let record = Arc::new(Record(Mutex::new(None)));
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .dangerous()
    .with_custom_certificate_verifier(record.clone())
    .with_no_client_auth();
    let tcp = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(("127.0.0.1", port)),
    )
    .await
    .ok()?
    .ok()?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, tcp),
    )
    .await
    .ok()?
    .ok()?;
    record.0.lock().unwrap().clone()
}

#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_tls_bootstrap_serves_the_approved_certificate() {
    let _guard = serial();
    let env = cluster_env();
    let admin = admin_client().await;
    tidy(&admin, SERVING_NODE).await;
    let node_ip = env
        .get("KRS_NODE_IP")
        .cloned()
        .unwrap_or("127.0.0.1".into());

    let mut k = Kubelet::new("certs-serving");
    k.cgroup_root = "/krs-it-certs".into();
    k.start_as_node(SERVING_NODE, &["--rotate-server-certificates=true"]);
    let cert_dir = k.dir.path().join("pki");
    assert!(
        !cert_dir.join("kubelet.crt").exists(),
        "no self-signed pair"
    );

    // The request: the serving signer, upstream's usages, the node's names.
    let csr = wait_async(Duration::from_secs(60), "serving CSR", || {
        let admin = admin.clone();
        async move {
            csrs_of(&admin, SERVING_NODE, "kubernetes.io/kubelet-serving")
                .await
                .into_iter()
                .next()
        }
    })
    .await;
    // Nothing is served while it waits.
    assert_eq!(served(k.port).await, None, "served before approval");
    let mut usages = csr.spec.usages.clone().unwrap_or_default();
    usages.sort();
    assert_eq!(
        usages,
        ["digital signature", "key encipherment", "server auth"]
    );
    let block = pem::parse(&csr.spec.request.0).unwrap();
    let (_, req) = <x509_parser::certification_request::X509CertificationRequest as x509_parser::prelude::FromDer<_>>::from_der(block.contents()).unwrap();
    let info = &req.certification_request_info;
    let cn = info.subject.iter_common_name().next().unwrap();
    assert_eq!(cn.as_str().unwrap(), format!("system:node:{SERVING_NODE}"));
    let org = info.subject.iter_organization().next().unwrap();
    assert_eq!(org.as_str().unwrap(), "system:nodes");
    // The node name is a DNS SAN (the subject names it only inside a longer CN).
    let der = block.contents();
    let dns_san = [
        &[0x82, SERVING_NODE.len() as u8][..],
        SERVING_NODE.as_bytes(),
    ]
    .concat();
    assert!(
        der.windows(dns_san.len()).any(|w| w == dns_san.as_slice()),
        "no DNS SAN {SERVING_NODE}"
    );

    // Approve it; the controller-manager signs it; the port serves it.
    let name = csr.metadata.name.clone().unwrap();
    let approval = serde_json::json!({"status": {"conditions": [{
        "type": "Approved", "status": "True", "reason": "KrsTest",
        "message": "approved by tests/certs.rs"}]}});
    Api::<CertificateSigningRequest>::all(admin.clone())
        .patch_approval(&name, &PatchParams::default(), &Patch::Merge(&approval))
        .await
        .expect("approve");
    let issued = wait_async(Duration::from_secs(60), "issued certificate", || {
        let admin = admin.clone();
        let name = name.clone();
        async move {
            let c = Api::<CertificateSigningRequest>::all(admin)
                .get(&name)
                .await
                .ok()?;
            let cert = c.status?.certificate?;
            Some(first_cert_der(&String::from_utf8(cert.0).ok()?))
        }
    })
    .await;
    let port = k.port;
    let got = wait_async(Duration::from_secs(30), "served certificate", || {
        let issued = issued.clone();
        async move { served(port).await.filter(|c| *c == issued) }
    })
    .await;
    let (_, parsed) = x509_parser::parse_x509_certificate(&got).unwrap();
    let names = format!("{:?}", parsed.subject_alternative_name());
    assert!(names.contains(SERVING_NODE), "{names}");
    let ip: std::net::IpAddr = node_ip.parse().unwrap();
    let ip_bytes = match ip {
        std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
        std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    assert!(
        names.contains(&format!("{ip_bytes:?}")) || names.contains(&node_ip),
        "{names}"
    );
    let stored = std::fs::read_to_string(cert_dir.join("kubelet-server-current.pem")).unwrap();
    assert_eq!(first_cert_der(&stored), issued);
    let link = std::fs::read_link(cert_dir.join("kubelet-server-current.pem")).unwrap();
    assert!(
        link.to_string_lossy().starts_with("kubelet-server-2"),
        "{link:?}"
    );

    // TTL metric on /metrics (anonymous access is on by default here).
    let (code, body) = https_get(port, "/metrics", &[]).expect("metrics");
    assert_eq!(code, 200);
    let ttl = body
        .lines()
        .find(|l| l.starts_with("kubelet_certificate_manager_server_ttl_seconds "))
        .unwrap_or_else(|| panic!("no ttl metric"));
    let secs: f64 = ttl.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(secs > 3600.0, "{ttl}");

    // A restart serves the stored certificate at once, without a new request.
    k.stop();
    let before = csrs_of(&admin, SERVING_NODE, "kubernetes.io/kubelet-serving")
        .await
        .len();
    k.start_as_node(SERVING_NODE, &["--rotate-server-certificates=true"]);
    assert_eq!(served(k.port).await, Some(issued));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        csrs_of(&admin, SERVING_NODE, "kubernetes.io/kubelet-serving")
            .await
            .len(),
        before
    );
    k.stop();
    tidy(&admin, SERVING_NODE).await;
}
