//! The API server connection, built from the kubeconfig the kubelet was given. Only a client is
//! made here; what the kubelet does with it lives with the parts that own each object (node
//! status, pod sources, pod status).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Why no API client could be made from a kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum ApiClientError {
    /// The kubeconfig could not be read or understood.
    #[error("reading kubeconfig {path}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: String,
        /// kube's reason.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig was read but names no usable server or credentials.
    #[error("building an API client from {path}")]
    Client {
        /// The kubeconfig file.
        path: String,
        /// kube's reason.
        #[source]
        source: kube::Error,
    },
    /// The client certificate or its key cannot be read or do not belong together.
    #[error("client certificate for {path}: {what}")]
    Identity {
        /// The kubeconfig file.
        path: String,
        /// Where the certificate came from, and why it is unusable.
        what: String,
    },
}

/// Where the client's certificate and key come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// Whatever the kubeconfig holds or names.
    Kubeconfig,
    /// These files instead (they may be one file holding both): the certificate store's
    /// current pair once rotation owns the certificate, as upstream's rotating transport
    /// takes the certificate manager's pair over the kubeconfig's.
    Files {
        /// The certificate (chain) PEM.
        cert: PathBuf,
        /// The private key PEM.
        key: PathBuf,
    },
}

/// A client for the API server in `kubeconfig`. Every request is bounded by `timeout`, except
/// watches, which carry their own server-side timeout and are re-established by their owners.
pub async fn connect(kubeconfig: &Path, timeout: Duration) -> Result<kube::Client, ApiClientError> {
    connect_with(kubeconfig, timeout, &Identity::Kubeconfig).await
}

/// Like [`connect`], presenting the client certificate `identity` names.
pub async fn connect_with(
    kubeconfig: &Path,
    timeout: Duration,
    identity: &Identity,
) -> Result<kube::Client, ApiClientError> {
    let path = kubeconfig.display().to_string();
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|source| {
        ApiClientError::Kubeconfig {
            path: path.clone(),
            source,
        }
    })?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|source| ApiClientError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
    config.connect_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    // Watches hold a response open for minutes; they set timeoutSeconds below this.
    config.read_timeout = Some(Duration::from_secs(330));
    let pair = match identity {
        Identity::Kubeconfig => kubeconfig_identity(&config.auth_info),
        Identity::Files { cert, key } => read_pair(cert, key).map(Some),
    }
    .map_err(|what| ApiClientError::Identity {
        path: path.clone(),
        what,
    })?;
    // kube's own builder hands the pair to rustls, which refuses v1 certificates; it also
    // owns the error for proxies, which this build does not support.
    let Some((cert_pem, key_pem)) = pair.filter(|_| config.proxy_url.is_none()) else {
        return kube::Client::try_from(config)
            .map_err(|source| ApiClientError::Client { path, source });
    };
    let provider = rustls::crypto::ring::default_provider();
    let key = crate::pki::certified_key_from_pem(&cert_pem, &key_pem, &provider).map_err(|e| {
        ApiClientError::Identity {
            path: path.clone(),
            what: e.to_string(),
        }
    })?;
    let auth = &mut config.auth_info;
    auth.client_certificate = None;
    auth.client_certificate_data = None;
    auth.client_key = None;
    auth.client_key_data = None;
    build_client(config, Arc::new(key)).map_err(|source| ApiClientError::Client { path, source })
}

/// Certificate PEM and key PEM.
type PemPair = (Vec<u8>, Vec<u8>);

fn read_pair(cert: &Path, key: &Path) -> Result<PemPair, String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    Ok((read(cert)?, read(key)?))
}

/// The certificate and key PEM the kubeconfig's user holds inline or names, if any.
fn kubeconfig_identity(auth: &kube::config::AuthInfo) -> Result<Option<PemPair>, String> {
    use base64::Engine;
    use secrecy::ExposeSecret;
    let decode = |what: &str, data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| format!("{what}: {e}"))
    };
    let cert = match (&auth.client_certificate_data, &auth.client_certificate) {
        (Some(d), _) => Some(decode("client-certificate-data", d)?),
        (None, Some(f)) => Some(std::fs::read(f).map_err(|e| format!("{f}: {e}"))?),
        (None, None) => None,
    };
    let key = match (&auth.client_key_data, &auth.client_key) {
        (Some(d), _) => Some(decode("client-key-data", d.expose_secret())?),
        (None, Some(f)) => Some(std::fs::read(f).map_err(|e| format!("{f}: {e}"))?),
        (None, None) => None,
    };
    match (cert, key) {
        (Some(c), Some(k)) => Ok(Some((c, k))),
        (None, None) => Ok(None),
        (Some(_), None) => Err("client certificate without a client key".into()),
        (None, Some(_)) => Err("client key without a client certificate".into()),
    }
}

/// Always presents one certificate, whatever CAs the server hints at (as Go's client does
/// with a single configured certificate).
#[derive(Debug)]
struct FixedClientCert(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for FixedClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// kube's default client stack (base URI, retries, credentials, extra headers over a
/// timed-out HTTPS connector), with the TLS client identity given here.
fn build_client(
    config: kube::Config,
    identity: Arc<rustls::sign::CertifiedKey>,
) -> Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt;
    let mut tls = config.rustls_client_config()?;
    tls.client_auth_cert_resolver = Arc::new(FixedClientCert(identity));
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let builder = match config.tls_server_name.as_deref() {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.to_string()).map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    let https = builder.enable_http1().wrap_connector(http);
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client =
        hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(http_client);
    Ok(kube::Client::new(service, config.default_namespace))
}

/// Swaps the connection underneath every clone of a [`reloadable`] client. After client
/// certificate rotation the old connections still present the old certificate, which the API
/// server stops accepting when it expires; a fresh inner client handshakes with the new one.
#[derive(Clone)]
pub struct Reloader {
    current: Arc<RwLock<kube::Client>>,
    kubeconfig: PathBuf,
    timeout: Duration,
}

impl Reloader {
    /// Re-reads the kubeconfig and the certificate `identity` names; requests from now on use
    /// new connections. Requests already running, watches included, finish on the old ones.
    pub async fn reload(&self, identity: &Identity) -> Result<(), ApiClientError> {
        let fresh = connect_with(&self.kubeconfig, self.timeout, identity).await?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }
}

/// Sends each request through whichever inner client is current.
#[derive(Clone)]
struct Current(Arc<RwLock<kube::Client>>);

impl tower::Service<http::Request<kube::client::Body>> for Current {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let inner = self.0.read().unwrap_or_else(|e| e.into_inner()).clone();
        Box::pin(async move { inner.send(request).await })
    }
}

/// Like [`connect`], plus a handle that makes every clone of the client reconnect with the
/// kubeconfig's current credentials.
pub async fn reloadable(
    kubeconfig: &Path,
    timeout: Duration,
    identity: &Identity,
) -> Result<(kube::Client, Reloader), ApiClientError> {
    let inner = connect_with(kubeconfig, timeout, identity).await?;
    let namespace = inner.default_namespace().to_string();
    let current = Arc::new(RwLock::new(inner));
    let client = kube::Client::new(Current(current.clone()), namespace);
    let reloader = Reloader {
        current,
        kubeconfig: kubeconfig.to_path_buf(),
        timeout,
    };
    Ok((client, reloader))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair,
    };
    use std::io::{BufRead, BufReader, Write};
    use std::sync::mpsc;

    struct Pair {
        cert: String,
        key: String,
        der: Vec<u8>,
    }

    fn leaf(ca: &CertifiedIssuer<'_, KeyPair>, cn: &str, san: &str, client: bool) -> Pair {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![san.to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        let cert = params.signed_by(&key, ca).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }

    /// A TLS server demanding client certificates; sends the DER of each one it sees.
    fn start_server(ca_der: Vec<u8>, server: &Pair) -> (u16, mpsc::Receiver<Vec<u8>>) {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_der.into()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
            .build()
            .unwrap();
        start_server_with(verifier, server)
    }

    /// A TLS server asking for client certificates with `verifier`; sends the DER of each
    /// one it sees.
    fn start_server_with(
        verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
        server: &Pair,
    ) -> (u16, mpsc::Receiver<Vec<u8>>) {
        let chain = vec![rustls::pki_types::CertificateDer::from(server.der.clone())];
        let key = rustls::pki_types::PrivateKeyDer::try_from(
            pem::parse(&server.key).unwrap().contents().to_vec(),
        )
        .unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder()
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key)
                .unwrap(),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                let conn = rustls::ServerConnection::new(config.clone()).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let mut reader = BufReader::new(&mut tls);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                if let Some(cert) = tls.conn.peer_certificates().and_then(|c| c.first()) {
                    let _ = tx.send(cert.to_vec());
                }
                let _ = tls.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                );
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        (port, rx)
    }

    #[tokio::test]
    async fn reload_presents_the_new_client_certificate() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "test-ca");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let server = leaf(&ca, "server", "127.0.0.1", false);
        let old = leaf(&ca, "system:node:a", "a", true);
        let new = leaf(&ca, "system:node:a", "a", true);
        let (port, seen) = start_server(ca.der().to_vec(), &server);

        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("ca.pem", &ca.pem());
        write("client.pem", &old.cert);
        write("client.key", &old.key);
        let d = dir.path().display();
        write(
            "kubeconfig",
            &format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority: {d}/ca.pem\nusers:\n- name: u\n  user:\n    client-certificate: {d}/client.pem\n    client-key: {d}/client.key\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
            ),
        );
        let (client, reloader) = reloadable(
            &dir.path().join("kubeconfig"),
            Duration::from_secs(5),
            &Identity::Kubeconfig,
        )
        .await
        .unwrap();
        let get = || async {
            let req = http::Request::get("/version").body(Vec::new()).unwrap();
            client.request_text(req).await.unwrap();
            seen.recv_timeout(Duration::from_secs(5)).unwrap()
        };
        assert_eq!(get().await, old.der);
        // New files alone change nothing: the client read its certificate when built.
        write("client.pem", &new.cert);
        write("client.key", &new.key);
        assert_eq!(get().await, old.der);
        reloader.reload(&Identity::Kubeconfig).await.unwrap();
        assert_eq!(get().await, new.der);
    }

    #[tokio::test]
    async fn v1_client_certificate_and_v1_ca_from_an_embedded_kubeconfig() {
        use crate::pki::testing::{TestCa, pem_of};
        use base64::Engine;
        let _ = rustls::crypto::ring::default_provider().install_default();
        // What `openssl x509 -req` without -extfile makes: a v1 CA and v1 client certificate.
        let ca = TestCa::v1("v1-ca");
        let (server_der, server_key) = ca.v3_leaf("server", "127.0.0.1", false);
        let server = Pair {
            cert: pem_of("CERTIFICATE", &server_der),
            key: server_key.serialize_pem(),
            der: server_der,
        };
        let (client_der, client_key) = ca.v1_leaf("system:node:a", Some("system:nodes"));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (port, seen) =
            start_server_with(crate::server::tls::request_client_cert(provider), &server);
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubelet.conf");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
                b64(&ca.pem),
                b64(&pem_of("CERTIFICATE", &client_der)),
                b64(&client_key.serialize_pem()),
            ),
        )
        .unwrap();
        let client = connect(&kubeconfig, Duration::from_secs(5)).await.unwrap();
        let req = http::Request::get("/version").body(Vec::new()).unwrap();
        client.request_text(req).await.unwrap();
        assert_eq!(
            seen.recv_timeout(Duration::from_secs(5)).unwrap(),
            client_der
        );

        // A key that is not the certificate's is refused at once, as Go's X509KeyPair does.
        let other = rcgen::KeyPair::generate().unwrap();
        let identity = Identity::Files {
            cert: dir.path().join("c.pem"),
            key: dir.path().join("k.pem"),
        };
        std::fs::write(dir.path().join("c.pem"), pem_of("CERTIFICATE", &client_der)).unwrap();
        std::fs::write(dir.path().join("k.pem"), other.serialize_pem()).unwrap();
        let err = connect_with(&kubeconfig, Duration::from_secs(5), &identity)
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("does not match"), "{err}");
    }
}
