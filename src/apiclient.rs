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
}

/// A client for the API server in `kubeconfig`. Every request is bounded by `timeout`, except
/// watches, which carry their own server-side timeout and are re-established by their owners.
pub async fn connect(kubeconfig: &Path, timeout: Duration) -> Result<kube::Client, ApiClientError> {
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
    kube::Client::try_from(config).map_err(|source| ApiClientError::Client { path, source })
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
    /// Re-reads the kubeconfig (and the certificate files it names); requests from now on use
    /// new connections. Requests already running, watches included, finish on the old ones.
    pub async fn reload(&self) -> Result<(), ApiClientError> {
        let fresh = connect(&self.kubeconfig, self.timeout).await?;
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
) -> Result<(kube::Client, Reloader), ApiClientError> {
    let inner = connect(kubeconfig, timeout).await?;
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
        let (client, reloader) = reloadable(&dir.path().join("kubeconfig"), Duration::from_secs(5))
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
        reloader.reload().await.unwrap();
        assert_eq!(get().await, new.der);
    }
}
