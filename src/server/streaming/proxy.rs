//! The upgrade proxy: the client's request goes to the runtime's streaming URL with all its
//! headers, and when the runtime switches protocols the two connections are spliced, so any
//! protocol (SPDY/3.1, the channel.k8s.io WebSocket ones) passes byte for byte.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, Uri, header};
use axum::response::IntoResponse;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::errors::StreamError;
use super::options::is_upgrade_request;

/// How long a refused upgrade's body may take to arrive, as upstream allows.
const ERROR_BODY_DEADLINE: Duration = Duration::from_secs(10);
/// The most of a refused upgrade's body relayed to the client.
const ERROR_BODY_LIMIT: usize = 1 << 20;

const X_FORWARDED_FOR: &str = "x-forwarded-for";
/// How long the other side of a stream may take to finish once one side is done.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Sends `req` to `target` and answers with the runtime's response. `timeout` bounds the
/// connect and the wait for the runtime's response head; an upgraded connection has no time
/// limit and lasts until either side closes (and the other has had a moment to finish).
pub async fn forward(
    mut req: Request,
    target: &Uri,
    timeout: Duration,
) -> Result<axum::response::Response, StreamError> {
    if !is_upgrade_request(req.headers()) {
        return Err(StreamError::UpgradeRequired);
    }
    let client_upgrade = hyper::upgrade::on(&mut req);
    let backend_req = backend_request(&req, target)?;
    let addr = authority(target)?;

    let tcp = tokio::time::timeout(timeout, TcpStream::connect(&addr))
        .await
        .map_err(|_| StreamError::Dial(format!("connect to {addr} timed out after {timeout:?}")))?
        .map_err(|e| StreamError::Dial(format!("dial tcp {addr}: {e}")))?;
    // Interactive streams are many small frames; Nagle would hold each behind an ACK.
    let _ = tcp.set_nodelay(true);
    let mut resp = tokio::time::timeout(timeout, send(tcp, backend_req))
        .await
        .map_err(|_| {
            StreamError::BackendResponse(format!("no response within {timeout:?} from {addr}"))
        })??;

    let status = resp.status();
    if status == StatusCode::SWITCHING_PROTOCOLS {
        let backend_upgrade = hyper::upgrade::on(&mut resp);
        let mut answer = Response::new(Body::empty());
        *answer.status_mut() = status;
        *answer.headers_mut() = resp.headers().clone();
        tokio::spawn(splice(client_upgrade, backend_upgrade, target.clone()));
        return Ok(answer);
    }
    if status.as_u16() < 400 {
        return Err(StreamError::NotUpgraded(status.as_u16()));
    }
    tracing::debug!(%status, %target, "runtime refused the stream; relaying its answer");
    Ok(relay(resp).await)
}

/// `host:port` to dial for `target`.
fn authority(target: &Uri) -> Result<String, StreamError> {
    let host = target
        .host()
        .ok_or_else(|| StreamError::Dial(format!("no host in {target}")))?;
    Ok(format!("{host}:{}", target.port_u16().unwrap_or(80)))
}

/// The client's request re-aimed at the runtime: same method and headers (Host included, with
/// the client's address added to X-Forwarded-For), the runtime URL's path and query, no body.
fn backend_request(req: &Request, target: &Uri) -> Result<hyper::Request<Body>, StreamError> {
    let path = target
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let mut headers = req.headers().clone();
    // An upgrade request carries no body; framing headers would promise one.
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(header::TRANSFER_ENCODING);
    if !headers.contains_key(header::HOST)
        && let Some(host) = target
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        headers.insert(header::HOST, host);
    }
    if let Some(ConnectInfo(peer)) = req.extensions().get::<ConnectInfo<SocketAddr>>() {
        append_forwarded_for(&mut headers, peer.ip());
    }
    let mut out = hyper::Request::new(Body::empty());
    *out.method_mut() = req.method().clone();
    *out.uri_mut() = path
        .parse()
        .map_err(|_| StreamError::Dial(format!("bad path in {target}")))?;
    *out.headers_mut() = headers;
    Ok(out)
}

/// Appends to the last X-Forwarded-For ("a, b") or starts one.
fn append_forwarded_for(headers: &mut HeaderMap, ip: std::net::IpAddr) {
    let prior: Vec<String> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    let value = if prior.is_empty() {
        ip.to_string()
    } else {
        format!("{}, {ip}", prior.join(", "))
    };
    if let Ok(v) = HeaderValue::from_str(&value) {
        headers.insert(X_FORWARDED_FOR, v);
    }
}

/// One HTTP/1.1 exchange on `tcp`; the connection task stays alive to hand the socket over
/// when the runtime upgrades it.
async fn send(
    tcp: TcpStream,
    req: hyper::Request<Body>,
) -> Result<hyper::Response<hyper::body::Incoming>, StreamError> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| StreamError::BackendResponse(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(err) = conn.with_upgrades().await {
            tracing::debug!(%err, "runtime streaming connection ended with an error");
        }
    });
    sender
        .send_request(req)
        .await
        .map_err(|e| StreamError::BackendResponse(e.to_string()))
}

/// The runtime's refusal (status, headers, body) passed on as it is.
async fn relay(resp: hyper::Response<hyper::body::Incoming>) -> axum::response::Response {
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(
        ERROR_BODY_DEADLINE,
        axum::body::to_bytes(Body::new(body), ERROR_BODY_LIMIT),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_default();
    let mut headers = parts.headers;
    // The body is re-framed here.
    for name in [
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::CONNECTION,
    ] {
        headers.remove(name);
    }
    let mut out = (parts.status, body).into_response();
    out.headers_mut().extend(headers);
    out
}

/// Copies bytes both ways between the upgraded client and runtime connections. When one side
/// is done the other gets an end of stream and a short grace to finish: closing a socket with
/// the peer's last frames unread would reset the connection and lose data already sent.
async fn splice(client: OnUpgrade, backend: OnUpgrade, target: Uri) {
    let (client, backend) = match tokio::try_join!(client, backend) {
        Ok(pair) => pair,
        Err(err) => {
            tracing::warn!(%err, %target, "stream upgrade did not complete");
            return;
        }
    };
    let (mut client_rx, mut client_tx) = tokio::io::split(TokioIo::new(client));
    let (mut backend_rx, mut backend_tx) = tokio::io::split(TokioIo::new(backend));
    tracing::debug!(%target, "stream connected");
    let runtime_done = tokio::select! {
        r = pump(&mut client_rx, &mut backend_tx) => {
            tracing::debug!(%target, result = ?r, "client side of the stream ended");
            if r.is_err() {
                return;
            }
            false
        }
        r = pump(&mut backend_rx, &mut client_tx) => {
            tracing::debug!(%target, result = ?r, "runtime side of the stream ended");
            if r.is_err() {
                return;
            }
            true
        }
    };
    let finish = async {
        if runtime_done {
            // The runtime has nothing more to say; what the client still sends goes nowhere.
            client_tx.shutdown().await?;
            pump(&mut client_rx, &mut tokio::io::sink()).await
        } else {
            backend_tx.shutdown().await?;
            pump(&mut backend_rx, &mut client_tx).await
        }
    };
    let _ = tokio::time::timeout(CLOSE_GRACE, finish).await;
}

/// Copies `from` to `to` until `from` ends, passing each read on at once.
async fn pump<R, W>(from: &mut R, to: &mut W) -> std::io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0u64;
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(total);
        }
        to.write_all(&buf[..n]).await?;
        to.flush().await?;
        total += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::any;
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::net::TcpListener;

    use super::super::tests::ws::read_head;

    const STEP: Duration = Duration::from_secs(10);

    /// Serves a router whose every request is proxied to `target`.
    async fn proxy_to(target: String) -> SocketAddr {
        let target: Uri = target.parse().unwrap();
        let app = Router::new().route(
            "/{*rest}",
            any(move |req: Request| {
                let target = target.clone();
                async move {
                    match forward(req, &target, STEP).await {
                        Ok(r) => r,
                        Err(e) => e.into_response(),
                    }
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await;
        });
        addr
    }

    /// What the runtime stand-in does after its answer.
    #[derive(Clone, Copy)]
    enum Then {
        /// Echo until the client's end of stream, then send these bytes and close.
        Echo(&'static [u8]),
        /// Close at once.
        Close,
    }

    /// A runtime stand-in: reads one request head, sends it back on `heads`, answers with
    /// `answer`, then does `then`.
    async fn fake_runtime(
        answer: &'static str,
        then: Then,
    ) -> (SocketAddr, tokio::sync::mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut sock = BufReader::new(sock);
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if sock.read_line(&mut line).await.unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        head.push_str(&line);
                    }
                    let _ = tx.send(head).await;
                    let mut sock = sock.into_inner();
                    if sock.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    let Then::Echo(last_words) = then else {
                        return;
                    };
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = sock.read(&mut buf).await {
                        if n == 0 || sock.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = sock.write_all(last_words).await;
                });
            }
        });
        (addr, rx)
    }

    async fn read_exact_in_time(sock: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        tokio::time::timeout(STEP, sock.read_exact(&mut buf))
            .await
            .expect("data in time")
            .expect("read");
        buf
    }

    const UPGRADE_REQUEST: &str = "POST /exec/ns/pod/c?command=sh&output=1 HTTP/1.1\r\n\
        Host: kubelet.test:10250\r\n\
        Connection: Upgrade\r\n\
        Upgrade: SPDY/3.1\r\n\
        X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\
        X-Stream-Protocol-Version: v3.channel.k8s.io\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
        Sec-WebSocket-Version: 13\r\n\
        Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\
        Content-Length: 0\r\n\r\n";

    #[tokio::test]
    async fn upgrade_is_forwarded_and_bytes_pass_both_ways() {
        // The runtime sends a first frame right behind its 101, in the same write.
        let (runtime, mut heads) = fake_runtime(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
             X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\nhello",
            Then::Echo(b"bye"),
        )
        .await;
        let proxy = proxy_to(format!("http://{runtime}/exec/tok3n?x=1")).await;

        let mut sock = TcpStream::connect(proxy).await.unwrap();
        sock.write_all(UPGRADE_REQUEST.as_bytes()).await.unwrap();
        let head = read_head(&mut sock).await.to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 101"), "{head}");
        assert!(head.contains("upgrade: spdy/3.1"), "{head}");
        assert!(
            head.contains("x-stream-protocol-version: v4.channel.k8s.io"),
            "{head}"
        );
        assert_eq!(read_exact_in_time(&mut sock, 5).await, b"hello");

        let sent = tokio::time::timeout(STEP, heads.recv())
            .await
            .unwrap()
            .unwrap();
        let lower = sent.to_ascii_lowercase();
        assert!(
            sent.starts_with("POST /exec/tok3n?x=1 HTTP/1.1\r\n"),
            "request line uses the runtime URL's path: {sent}"
        );
        for want in [
            "host: kubelet.test:10250",
            "connection: upgrade",
            "upgrade: spdy/3.1",
            "x-stream-protocol-version: v4.channel.k8s.io",
            "x-stream-protocol-version: v3.channel.k8s.io",
            "sec-websocket-key: dghlihnhbxbszsbub25jzq==",
            "sec-websocket-version: 13",
            "sec-websocket-protocol: v4.channel.k8s.io",
            "x-forwarded-for: 127.0.0.1",
        ] {
            assert!(lower.contains(want), "missing {want:?} in {sent}");
        }

        // Client to runtime and back through the spliced connections.
        for msg in [&b"ping"[..], &[0u8, 1, 2, 255, 254][..]] {
            sock.write_all(msg).await.unwrap();
            assert_eq!(read_exact_in_time(&mut sock, msg.len()).await, msg);
        }

        // The client's end of stream reaches the runtime, and what the runtime still sends
        // then reaches the client before the connection closes.
        sock.shutdown().await.unwrap();
        let mut rest = Vec::new();
        tokio::time::timeout(STEP, sock.read_to_end(&mut rest))
            .await
            .expect("closed in time")
            .expect("read");
        assert_eq!(rest, b"bye");
    }

    #[tokio::test]
    async fn the_runtime_closing_ends_the_client_connection() {
        let (runtime, _heads) = fake_runtime(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\ndone",
            Then::Close,
        )
        .await;
        let proxy = proxy_to(format!("http://{runtime}/exec/t")).await;
        let mut sock = TcpStream::connect(proxy).await.unwrap();
        sock.write_all(UPGRADE_REQUEST.as_bytes()).await.unwrap();
        let head = read_head(&mut sock).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        let mut rest = Vec::new();
        tokio::time::timeout(STEP, sock.read_to_end(&mut rest))
            .await
            .expect("end of stream in time")
            .expect("read");
        assert_eq!(rest, b"done");
        // The client's last words after the runtime left are taken, not refused.
        sock.write_all(b"late frame").await.unwrap();
    }

    #[tokio::test]
    async fn runtime_refusal_is_relayed() {
        let (runtime, _heads) = fake_runtime(
            "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nX-Why: token\r\n\
             Content-Length: 13\r\n\r\ntoken expired",
            Then::Close,
        )
        .await;
        let proxy = proxy_to(format!("http://{runtime}/exec/old")).await;
        let mut sock = TcpStream::connect(proxy).await.unwrap();
        sock.write_all(UPGRADE_REQUEST.as_bytes()).await.unwrap();
        let head = read_head(&mut sock).await.to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 403"), "{head}");
        assert!(head.contains("x-why: token"), "{head}");
        assert!(head.contains("content-length: 13"), "{head}");
        assert_eq!(read_exact_in_time(&mut sock, 13).await, b"token expired");
    }

    #[tokio::test]
    async fn a_success_without_upgrade_is_an_error() {
        let (runtime, _heads) = fake_runtime(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            Then::Close,
        )
        .await;
        let proxy = proxy_to(format!("http://{runtime}/exec/t")).await;
        let mut sock = TcpStream::connect(proxy).await.unwrap();
        sock.write_all(UPGRADE_REQUEST.as_bytes()).await.unwrap();
        let head = read_head(&mut sock).await;
        assert!(head.starts_with("HTTP/1.1 500"), "{head}");
        let want = b"invalid upgrade response: status code 200\n";
        assert_eq!(read_exact_in_time(&mut sock, want.len()).await, want);
    }

    #[tokio::test]
    async fn plain_requests_and_dead_runtimes_are_500() {
        let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead_addr = dead.local_addr().unwrap();
        drop(dead);
        let proxy = proxy_to(format!("http://{dead_addr}/exec/t")).await;

        let mut sock = TcpStream::connect(proxy).await.unwrap();
        sock.write_all(b"GET /exec/ns/pod/c HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let head = read_head(&mut sock).await;
        assert!(head.starts_with("HTTP/1.1 500"), "{head}");
        assert_eq!(
            read_exact_in_time(&mut sock, 25).await,
            b"Upgrade request required\n"
        );

        let mut sock = TcpStream::connect(proxy).await.unwrap();
        sock.write_all(UPGRADE_REQUEST.as_bytes()).await.unwrap();
        let head = read_head(&mut sock).await;
        assert!(head.starts_with("HTTP/1.1 500"), "{head}");
        let body = read_exact_in_time(&mut sock, 21).await;
        assert_eq!(body, b"error dialing backend");
    }
}
