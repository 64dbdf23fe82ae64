//! The authenticated API port's TLS: the rustls configuration (serving certificate, versions,
//! suites, client certificates requested but not required). server::listen serves over it.

pub mod cert;
pub mod options;

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
use tracing::warn;

use crate::certificate::dynamic::DynamicCert;
use crate::config::KubeletConfiguration;
pub use cert::ServingCertFiles;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("unknown tls version {0:?}")]
    UnknownVersion(String),
    #[error(
        "none of the cipher suites {0} is implemented by rustls (only ECDHE with AES-GCM or ChaCha20-Poly1305)"
    )]
    UnsupportedCipher(String),
    #[error("Cipher suite {0} not supported or doesn't exist")]
    UnknownCipher(String),
    #[error("tlsCurvePreferences {0:?}: none is supported (23 P-256, 24 P-384, 29 X25519)")]
    UnsupportedCurve(Vec<i32>),
    #[error("serving certificate: {0}")]
    ServingCert(String),
    #[error("generating the self-signed serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("writing the self-signed serving certificate")]
    Write(#[from] crate::certificate::CertError),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Accepts any client certificate at the handshake, proving only that the client holds its
/// key; whether the chain is trusted is decided per request by the x509 authenticator. That
/// is upstream's RequestClientCert: an untrusted certificate gets 401, not a TLS failure, and
/// the CA file can be reloaded without rebuilding the TLS configuration. The key is read from
/// the certificate by our own parser, so v1 certificates work as with Go.
struct RequestClientCert {
    provider: Arc<CryptoProvider>,
}

impl fmt::Debug for RequestClientCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RequestClientCert")
    }
}

impl ClientCertVerifier for RequestClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    // No CA names are sent: clients then offer whatever certificate they have, which is what
    // a reloadable CA needs (the names would go stale after a rotation).
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crate::pki::verify_handshake_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
            false,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crate::pki::verify_handshake_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
            true,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The handshake side of upstream's RequestClientCert, for servers in tests too.
pub(crate) fn request_client_cert(provider: Arc<CryptoProvider>) -> Arc<dyn ClientCertVerifier> {
    Arc::new(RequestClientCert { provider })
}

/// The ring provider cut down to the configured suites and curves.
fn provider(cfg: &KubeletConfiguration, tls13_only: bool) -> Result<CryptoProvider, TlsError> {
    let mut p = rustls::crypto::ring::default_provider();
    if let Some(tls12) = options::tls12_suites(&cfg.tls_cipher_suites)? {
        if tls13_only {
            warn!("TLS 1.3 cipher suites are not configurable, ignoring tlsCipherSuites");
        } else {
            p.cipher_suites
                .retain(|s| s.version() == &rustls::version::TLS13 || tls12.contains(s));
        }
    }
    if let Some(groups) = options::kx_groups(&cfg.tls_curve_preferences)? {
        p.kx_groups = groups;
    }
    Ok(p)
}

/// The authenticated port's TLS: its configuration, the certificate it serves (replaceable
/// while it runs) and the files that certificate came from, for /configz (upstream shows the
/// generated pair's paths; with serverTLSBootstrap it shows the configured values).
pub struct ServingTls {
    pub config: Arc<ServerConfig>,
    pub cert: Arc<DynamicCert>,
    pub files: Option<ServingCertFiles>,
}

/// The server configuration. The certificate is, as upstream picks it: with
/// `serverTLSBootstrap` the serving certificate store's (none until the first is issued),
/// else `tlsCertFile`/`tlsPrivateKeyFile` followed as they change, else the self-signed pair.
pub fn server_config(
    cfg: &KubeletConfiguration,
    cert_dir: &std::path::Path,
    host: &str,
    ips: &[IpAddr],
) -> Result<ServingTls, TlsError> {
    let mut versions = options::versions(&cfg.tls_min_version)?;
    let provider = provider(cfg, versions == options::TLS13_ONLY)?;
    // Only TLS 1.3 names were listed: nothing is left to speak TLS 1.2 with.
    if !provider
        .cipher_suites
        .iter()
        .any(|s| s.version() == &rustls::version::TLS12)
    {
        versions = options::TLS13_ONLY;
    }
    let provider = Arc::new(provider);
    let (cert, files) = if cfg.server_tls_bootstrap {
        let initial = crate::certificate::serving::initial_pair(
            cert_dir,
            &cfg.tls_cert_file,
            &cfg.tls_private_key_file,
        );
        (DynamicCert::fixed(initial), None)
    } else {
        let serving = cert::serving_cert(
            &cfg.tls_cert_file,
            &cfg.tls_private_key_file,
            cert_dir,
            host,
            ips,
        )?;
        let cert = if cfg.tls_cert_file.is_empty() {
            let key = crate::pki::certified_key(serving.chain, serving.key, &provider)
                .map_err(|e| TlsError::ServingCert(e.to_string()))?;
            DynamicCert::fixed(Some(key))
        } else {
            DynamicCert::watching(serving.files.cert.clone(), serving.files.key.clone())
                .map_err(|e| TlsError::ServingCert(e.to_string()))?
        };
        (cert, Some(serving.files))
    };
    let cert = Arc::new(cert);
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(versions)?;
    let builder = if cfg.authentication.x509.client_ca_file.is_empty() {
        builder.with_no_client_auth()
    } else {
        builder.with_client_cert_verifier(request_client_cert(provider))
    };
    let mut config = builder.with_cert_resolver(cert.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(ServingTls {
        config: Arc::new(config),
        cert,
        files,
    })
}

/// Serves `router` over TLS until `cancel`; then lets requests in flight finish for a short
/// while. Every connection runs in its own task; upgraded connections (exec, attach,
/// port-forward) leave hyper's hands and have no timeout here.
/// End to end over TLS through server::listen, the accept loop every port uses.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::auth::x509::PeerCertificates;
    use axum::Extension;
    use axum::Router;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
    use rustls::pki_types::{PrivateKeyDer, ServerName};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio_util::sync::CancellationToken;

    fn config(
        dir: &std::path::Path,
        client_ca: bool,
    ) -> (Arc<ServerConfig>, CertificateDer<'static>) {
        let mut cfg = KubeletConfiguration::legacy_flag_defaults();
        if client_ca {
            // Any file will do: the handshake does not read it (the authenticator does).
            cfg.authentication.x509.client_ca_file = "/nonexistent".into();
        }
        let serving = server_config(&cfg, dir, "node-a", &[]).unwrap();
        let (tls, files) = (serving.config, serving.files.unwrap());
        let pem = std::fs::read(&files.cert).unwrap();
        use rustls::pki_types::pem::PemObject;
        let ca = CertificateDer::pem_slice_iter(&pem)
            .nth(1)
            .unwrap()
            .unwrap();
        (tls, ca)
    }

    /// One HTTP/1.1 GET over TLS to 127.0.0.1, trusting `ca`, optionally with a client cert.
    async fn get(port: u16, ca: CertificateDer<'static>, client_cert: bool) -> String {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let client = if client_cert {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name = DistinguishedName::new();
            p.distinguished_name.push(DnType::CommonName, "someone");
            let cert = p.self_signed(&key).unwrap();
            let key = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
            builder
                .with_client_auth_cert(vec![cert.der().clone()], key)
                .unwrap()
        } else {
            builder.with_no_client_auth()
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut tls = connector.connect(name, tcp).await.unwrap();
        tls.write_all(b"GET /who HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        tls.read_to_string(&mut out).await.unwrap_or_default();
        out
    }

    #[tokio::test]
    async fn serves_over_tls_with_optional_client_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let (tls, ca) = config(dir.path(), true);
        async fn who(Extension(p): Extension<PeerCertificates>) -> String {
            format!("certs={}", p.0.len())
        }
        let router = Router::new().route("/who", axum::routing::get(who));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cancel = CancellationToken::new();
        let server = tokio::spawn(crate::server::listen::serve(
            listener,
            Some(tls),
            router,
            cancel.clone(),
        ));

        let with = get(port, ca.clone(), true).await;
        assert!(with.starts_with("HTTP/1.1 200"), "{with}");
        assert!(with.ends_with("certs=1"), "{with}");
        let without = get(port, ca, false).await;
        assert!(without.ends_with("certs=0"), "{without}");

        cancel.cancel();
        let stopped = tokio::time::timeout(Duration::from_secs(10), server).await;
        assert!(matches!(stopped, Ok(Ok(Ok(())))), "server stops on cancel");
    }

    #[tokio::test]
    async fn idle_connections_are_closed() {
        let dir = tempfile::tempdir().unwrap();
        let (tls, ca) = config(dir.path(), false);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cancel = CancellationToken::new();
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(crate::server::listen::serve_closing_idle(
            listener,
            Some(tls),
            router,
            cancel.clone(),
            Duration::from_secs(1),
        ));
        // HTTP/2 by ALPN, then silence: not even the connection preface.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        client.alpn_protocols = vec![b"h2".to_vec()];
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .unwrap();
        let mut buf = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(15), tls.read_to_end(&mut buf)).await;
        assert!(closed.is_ok(), "an idle connection was kept open");
        cancel.cancel();
    }

    #[test]
    fn tls13_only_names_leave_only_tls13() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = KubeletConfiguration::legacy_flag_defaults();
        cfg.tls_cipher_suites = vec!["TLS_AES_128_GCM_SHA256".into()];
        let p = provider(&cfg, false).unwrap();
        assert!(
            p.cipher_suites
                .iter()
                .all(|s| s.version() == &rustls::version::TLS13)
        );
        assert!(server_config(&cfg, dir.path(), "n", &[]).is_ok());
        cfg.tls_min_version = "VersionTLS11".into();
        assert!(server_config(&cfg, dir.path(), "n", &[]).is_ok());
        cfg.tls_min_version = "VersionTLS99".into();
        assert!(matches!(
            server_config(&cfg, dir.path(), "n", &[]),
            Err(TlsError::UnknownVersion(_))
        ));
    }

    /// Records the certificate a server presents, trusting anything.
    #[derive(Debug)]
    struct Record(std::sync::Mutex<Option<Vec<u8>>>);

    impl rustls::client::danger::ServerCertVerifier for Record {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            *self.0.lock().unwrap() = Some(end_entity.to_vec());
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            rustls::crypto::ring::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    /// The leaf a new TLS connection to `port` is served, or None when the handshake fails.
    async fn served(port: u16) -> Option<Vec<u8>> {
        let record = Arc::new(Record(std::sync::Mutex::new(None)));
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(record.clone())
        .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .ok()?;
        record.0.lock().unwrap().clone()
    }

    async fn serve_on_loopback(tls: Arc<ServerConfig>) -> (u16, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cancel = CancellationToken::new();
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(crate::server::listen::serve(
            listener,
            Some(tls),
            router,
            cancel.clone(),
        ));
        (port, cancel)
    }

    #[tokio::test]
    async fn rewritten_tls_cert_files_reach_new_connections() {
        use crate::pki::testing::{TestCa, pem_of};
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::v3("ca");
        let write = |v1: bool| {
            let (der, key) = if v1 {
                ca.v1_leaf("node-a", None)
            } else {
                ca.v3_leaf("node-a", "127.0.0.1", false)
            };
            std::fs::write(dir.path().join("k.pem"), key.serialize_pem()).unwrap();
            std::fs::write(dir.path().join("c.pem"), pem_of("CERTIFICATE", &der)).unwrap();
            der
        };
        // A v1 serving certificate is served (upstream's LoadX509KeyPair takes it).
        let first = write(true);
        let mut cfg = KubeletConfiguration::legacy_flag_defaults();
        cfg.tls_cert_file = dir.path().join("c.pem").to_string_lossy().into();
        cfg.tls_private_key_file = dir.path().join("k.pem").to_string_lossy().into();
        let serving = server_config(&cfg, dir.path(), "node-a", &[]).unwrap();
        let (port, cancel) = serve_on_loopback(serving.config).await;
        assert_eq!(served(port).await, Some(first));
        let second = write(false);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(served(port).await, Some(second));
        cancel.cancel();
    }

    #[tokio::test]
    async fn server_tls_bootstrap_serves_nothing_until_a_certificate_is_set() {
        use crate::pki::testing::TestCa;
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = KubeletConfiguration::legacy_flag_defaults();
        cfg.server_tls_bootstrap = true;
        let serving = server_config(&cfg, dir.path(), "node-a", &[]).unwrap();
        assert!(serving.files.is_none());
        assert!(
            !dir.path().join("kubelet.crt").exists(),
            "no self-signed pair"
        );
        let (port, cancel) = serve_on_loopback(serving.config).await;
        assert_eq!(served(port).await, None);
        let ca = TestCa::v3("ca");
        let (der, key) = ca.v3_leaf("system:node:node-a", "127.0.0.1", false);
        let pair = crate::pki::certified_key(
            vec![der.clone().into()],
            PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            &rustls::crypto::ring::default_provider(),
        )
        .unwrap();
        serving.cert.set(pair);
        assert_eq!(served(port).await, Some(der));
        cancel.cancel();
    }
}
