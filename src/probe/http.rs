//! httpGet probes, with upstream's rules: HTTPS without verifying the certificate, the
//! `kube-probe/<major>.<minor>` User-Agent and `Accept: */*` unless the probe sets them,
//! redirects followed (at most 10) only to the same host, and any status from 200 to 399 a
//! success. The whole probe, redirects included, fits in its timeout.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Outcome, cap_output};

const MAX_REDIRECTS: usize = 10;
/// Upstream reads at most this much of a response body.
const MAX_BODY: usize = 10 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl Target {
    /// The target of an httpGet probe or hook; the host defaults to the pod's IP.
    pub fn of(h: &k8s_openapi::api::core::v1::HTTPGetAction, pod_ip: &str, port: u16) -> Self {
        let mut path = h.path.clone().unwrap_or_default();
        if !path.starts_with('/') {
            path.insert(0, '/');
        }
        Target {
            https: h.scheme.as_deref() == Some("HTTPS"),
            host: h
                .host
                .clone()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| pod_ip.to_string()),
            port,
            path,
            headers: h
                .http_headers
                .iter()
                .flatten()
                .map(|hh| (hh.name.clone(), hh.value.clone()))
                .collect(),
        }
    }

    fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!(
            "{scheme}://{}{}",
            super::join_host_port(&self.host, self.port),
            self.path
        )
    }
}

pub fn user_agent() -> String {
    let v = crate::config::KUBELET_VERSION.trim_start_matches('v');
    let mut parts = v.split('.');
    let major = parts.next().unwrap_or("1");
    let minor = parts.next().unwrap_or("0");
    format!("kube-probe/{major}.{minor}")
}

/// Accepts any certificate: upstream's probes skip verification (pods serve self-signed
/// certificates on their health ports).
#[derive(Debug)]
struct AcceptAnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_connector() -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
                .with_no_client_auth()
        });
    match config {
        Ok(c) => tokio_rustls::TlsConnector::from(Arc::new(c)),
        // The ring provider always supports the default versions; this is unreachable, but
        // a probe must not panic.
        Err(_) => tokio_rustls::TlsConnector::from(Arc::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
        )),
    }
}

/// Why a GET got no answer, worded as Go's HTTP client words it (probe output and hook events
/// carry it).
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// The HTTP exchange itself failed.
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("{0}")]
    Request(#[from] http::Error),
    #[error("dial tcp {addr}: {source}")]
    Dial {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{host}: {reason}")]
    ServerName { host: String, reason: String },
    #[error("tls handshake with {addr}: {source}")]
    Tls {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("Get \"{url}\": {source}")]
    Get {
        url: String,
        #[source]
        source: Box<GetError>,
    },
    #[error("Get \"{url}\": stopped after {MAX_REDIRECTS} redirects")]
    Redirects { url: String },
    #[error("Get \"{url}\": context deadline exceeded")]
    Timeout { url: String },
}

struct Response {
    status: u16,
    location: Option<String>,
    body: Vec<u8>,
}

async fn exchange<S>(io: S, target: &Target) -> Result<Response, GetError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    let conn = tokio::spawn(conn);
    let mut req = http::Request::builder().method("GET").uri(&target.path);
    let has = |name: &str| {
        target
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case(name))
    };
    if !has("host") {
        req = req.header("Host", super::join_host_port(&target.host, target.port));
    }
    if !has("user-agent") {
        req = req.header("User-Agent", user_agent());
    }
    if !has("accept") {
        req = req.header("Accept", "*/*");
    }
    for (k, v) in &target.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req.body(http_body_util::Empty::<bytes::Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut body = Vec::new();
    let mut incoming = resp.into_body();
    while body.len() < MAX_BODY {
        match incoming.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    body.extend_from_slice(data);
                }
            }
            Some(Err(e)) => return Err(e.into()),
            None => break,
        }
    }
    conn.abort();
    Ok(Response {
        status,
        location,
        body,
    })
}

async fn get_once(target: &Target) -> Result<Response, GetError> {
    let addr = super::join_host_port(&target.host, target.port);
    let tcp = match tokio::net::TcpStream::connect(&addr).await {
        Ok(tcp) => tcp,
        Err(source) => return Err(GetError::Dial { addr, source }),
    };
    if !target.https {
        return exchange(tcp, target).await;
    }
    let name = rustls::pki_types::ServerName::try_from(target.host.clone()).map_err(|e| {
        GetError::ServerName {
            host: target.host.clone(),
            reason: e.to_string(),
        }
    })?;
    let tls = match tls_connector().connect(name, tcp).await {
        Ok(tls) => tls,
        Err(source) => return Err(GetError::Tls { addr, source }),
    };
    exchange(tls, target).await
}

/// Where a redirect leads: `None` when it leaves the host (upstream then stops following).
fn follow(from: &Target, location: &str) -> Option<Target> {
    if location.starts_with('/') {
        return Some(Target {
            path: location.to_string(),
            ..from.clone()
        });
    }
    let (https, rest) = if let Some(r) = location.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = location.strip_prefix("http://") {
        (false, r)
    } else {
        // Relative to the current path's folder.
        let base = from.path.rsplit_once('/').map_or("", |(b, _)| b);
        return Some(Target {
            path: format!("{base}/{location}"),
            ..from.clone()
        });
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
            (h.to_string(), p.parse().ok()?)
        }
        _ => (authority.to_string(), if https { 443 } else { 80 }),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    (host == from.host).then(|| Target {
        https,
        host,
        port,
        path: path.to_string(),
        headers: from.headers.clone(),
    })
}

/// What a GET came back with, after the redirects it may follow.
enum Answer {
    Status(u16, String),
    /// A redirect to another host: upstream stops there and counts it a success.
    LeftHost(String),
}

async fn get(target: Target) -> Result<Answer, GetError> {
    let mut current = target;
    for _ in 0..=MAX_REDIRECTS {
        let resp = get_once(&current).await.map_err(|e| GetError::Get {
            url: current.url(),
            source: Box::new(e),
        })?;
        let body = cap_output(&resp.body);
        if (300..400).contains(&resp.status)
            && let Some(loc) = resp.location.as_deref()
        {
            match follow(&current, loc) {
                Some(next) => {
                    current = next;
                    continue;
                }
                None => return Ok(Answer::LeftHost(body)),
            }
        }
        return Ok(Answer::Status(resp.status, body));
    }
    Err(GetError::Redirects { url: current.url() })
}

async fn probe(target: Target) -> (Outcome, String) {
    match get(target).await {
        Err(e) => (Outcome::Failure, e.to_string()),
        Ok(Answer::LeftHost(body)) => (
            Outcome::Success,
            format!("Probe terminated redirects, Response body: {body}"),
        ),
        Ok(Answer::Status(status, body)) if (200..400).contains(&status) => {
            (Outcome::Success, body)
        }
        Ok(Answer::Status(status, _)) => (
            Outcome::Failure,
            format!("HTTP probe failed with statuscode: {status}"),
        ),
    }
}

/// A GET for a lifecycle hook: any answer will do, only failing to get one is an error.
pub async fn hook_get(target: Target, timeout: Duration) -> Result<(), GetError> {
    let url = target.url();
    match tokio::time::timeout(timeout, get(target)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(GetError::Timeout { url }),
    }
}

pub async fn run(target: Target, timeout: Duration) -> (Outcome, String) {
    let url = target.url();
    match tokio::time::timeout(timeout, probe(target)).await {
        Ok(r) => r,
        Err(_) => (
            Outcome::Failure,
            format!(
                "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot-per-connection HTTP server answering each path as `routes` says, and
    /// recording the requests it saw.
    async fn serve(
        routes: Vec<(&'static str, &'static str)>,
    ) -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).into_owned();
                let path = req.split(' ').nth(1).unwrap_or("").to_string();
                log.lock().unwrap().push(req);
                let answer = routes
                    .iter()
                    .find(|(p, _)| *p == path)
                    .map(|(_, a)| *a)
                    .unwrap_or("404 Not Found\r\n");
                let (status, headers) = answer.split_once("\r\n").unwrap_or((answer, ""));
                let reply = format!(
                    "HTTP/1.1 {status}\r\n{headers}Content-Length: 2\r\nConnection: close\r\n\r\nok"
                );
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        (port, seen)
    }

    fn target(port: u16, path: &str) -> Target {
        Target {
            https: false,
            host: "127.0.0.1".into(),
            port,
            path: path.into(),
            headers: vec![("X-Custom".into(), "1".into())],
        }
    }

    #[tokio::test]
    async fn statuses_redirects_and_headers() {
        let (port, seen) = serve(vec![
            ("/ok", "200 OK\r\n"),
            ("/moved", "302 Found\r\nLocation: /ok\r\n"),
            ("/away", "302 Found\r\nLocation: http://192.0.2.1:9/x\r\n"),
            ("/loop", "302 Found\r\nLocation: /loop\r\n"),
            ("/bad", "500 Internal Server Error\r\n"),
        ])
        .await;
        let t = Duration::from_secs(2);
        assert_eq!(
            run(target(port, "/ok"), t).await,
            (Outcome::Success, "ok".into())
        );
        // Header names are case-insensitive; hyper sends them in lower case.
        let req = seen.lock().unwrap()[0].to_ascii_lowercase();
        assert!(req.contains("user-agent: kube-probe/1.34\r\n"), "{req}");
        assert!(req.contains("accept: */*\r\n"), "{req}");
        assert!(req.contains("x-custom: 1\r\n"), "{req}");
        assert_eq!(run(target(port, "/moved"), t).await.0, Outcome::Success);
        let (o, why) = run(target(port, "/away"), t).await;
        assert_eq!(o, Outcome::Success, "another host ends the redirects");
        assert!(why.starts_with("Probe terminated redirects"), "{why}");
        let (o, why) = run(target(port, "/loop"), t).await;
        assert_eq!(o, Outcome::Failure);
        assert!(why.contains("stopped after 10 redirects"), "{why}");
        assert_eq!(
            run(target(port, "/bad"), t).await,
            (
                Outcome::Failure,
                "HTTP probe failed with statuscode: 500".into()
            )
        );
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed_port = closed.local_addr().unwrap().port();
        drop(closed);
        let (o, why) = run(target(closed_port, "/"), t).await;
        assert_eq!(o, Outcome::Failure);
        assert!(why.contains("dial tcp"), "{why}");
    }

    #[test]
    fn redirect_targets() {
        let from = target(8080, "/a/b");
        assert_eq!(follow(&from, "/c").unwrap().path, "/c");
        assert_eq!(follow(&from, "c").unwrap().path, "/a/c");
        let abs = follow(&from, "https://127.0.0.1:8443/z").unwrap();
        assert_eq!((abs.https, abs.port, abs.path.as_str()), (true, 8443, "/z"));
        assert!(follow(&from, "http://example.invalid/").is_none());
    }
}
