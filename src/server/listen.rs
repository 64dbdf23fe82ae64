//! The accept loop every API port shares: each connection in its own task, TLS first when
//! the port has it, then HTTP/1.1 (upgrades included) or HTTP/2 into the axum router. Like
//! upstream's servers it bounds what a silent client can hold: the TLS handshake, a request's
//! headers and an idle connection all time out; upgraded streams do not.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::{debug, info, warn};

use super::ServerError;
use super::auth::x509::PeerCertificates;
use super::idle;

/// A client that connects and says nothing must not hold a task forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for a request's headers to arrive once a connection is open or idle.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long stopping waits for requests in flight before dropping their connections.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until cancelled, over TLS when `tls` is given.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    router: Router,
    cancel: CancellationToken,
) -> Result<(), ServerError> {
    serve_closing_idle(listener, tls, router, cancel, idle::IDLE_TIMEOUT).await
}

pub(super) async fn serve_closing_idle(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    router: Router,
    cancel: CancellationToken,
    idle_timeout: Duration,
) -> Result<(), ServerError> {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let acceptor = tls.map(TlsAcceptor::from);
    info!(%addr, tls = acceptor.is_some(), "Serving");
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, remote)) => {
                    conns.spawn(serve_connection(
                        acceptor.clone(),
                        tcp,
                        remote,
                        router.clone(),
                        cancel.clone(),
                        idle_timeout,
                    ));
                }
                // Out of file descriptors and the like: pause rather than spin.
                Err(err) => {
                    warn!(%addr, %err, "Accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        debug!(%addr, left = conns.len(), "Dropping connections still open");
        conns.abort_all();
    }
    Ok(())
}

async fn serve_connection(
    acceptor: Option<TlsAcceptor>,
    tcp: TcpStream,
    remote: SocketAddr,
    router: Router,
    cancel: CancellationToken,
    idle_timeout: Duration,
) {
    // Small writes (TLS records, stream frames) must not wait for the peer's delayed ACK:
    // with Nagle on, every request/response turn can stall ~40 ms. Go servers disable it too.
    let _ = tcp.set_nodelay(true);
    let Some(acceptor) = acceptor else {
        let peer = PeerCertificates(Arc::new(Vec::new()));
        return serve_http(tcp, peer, remote, router, cancel, idle_timeout).await;
    };
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
    let stream = tokio::select! {
        _ = cancel.cancelled() => return,
        r = handshake => match r {
            Ok(Ok(s)) => s,
            Ok(Err(err)) => {
                debug!(%remote, %err, "TLS handshake failed");
                return;
            }
            Err(_) => {
                debug!(%remote, "TLS handshake timed out");
                return;
            }
        },
    };
    let peer = PeerCertificates(Arc::new(
        stream
            .get_ref()
            .1
            .peer_certificates()
            .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
            .unwrap_or_default(),
    ));
    serve_http(stream, peer, remote, router, cancel, idle_timeout).await;
}

async fn serve_http<IO>(
    io: IO,
    peer: PeerCertificates,
    remote: SocketAddr,
    router: Router,
    cancel: CancellationToken,
    idle_timeout: Duration,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = idle::Activity::new();
    let tracker = activity.clone();
    let service = tower::service_fn(move |mut req: axum::http::Request<hyper::body::Incoming>| {
        let in_flight = tracker.begin();
        req.extensions_mut().insert(peer.clone());
        req.extensions_mut().insert(ConnectInfo(remote));
        let req = req.map(axum::body::Body::new);
        let router = router.clone();
        async move {
            let resp = router.oneshot(req).await?;
            Ok::<_, std::convert::Infallible>(resp.map(|body| idle::Tracked::wrap(body, in_flight)))
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let conn =
        builder.serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service));
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(err) = r {
                debug!(%remote, %err, "Connection ended with an error");
            }
        }
        _ = cancel.cancelled() => {
            conn.as_mut().graceful_shutdown();
            if let Err(err) = conn.await {
                debug!(%remote, %err, "Connection ended with an error while stopping");
            }
        }
        _ = idle::idle(&activity, idle_timeout) => {
            debug!(%remote, "Closing an idle connection");
            conn.as_mut().graceful_shutdown();
            // A client that never sent a request may not take part in a graceful close
            // either; dropping the connection closes the socket.
            if let Ok(Err(err)) = tokio::time::timeout(DRAIN_TIMEOUT, conn).await {
                debug!(%remote, %err, "Idle connection ended with an error");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn plain_ports_answer_and_drop_silent_clients() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let router = Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
        tokio::spawn(serve_closing_idle(
            listener,
            None,
            router,
            cancel.clone(),
            Duration::from_secs(1),
        ));

        let mut asking = TcpStream::connect(addr).await.unwrap();
        asking
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        asking.read_to_string(&mut answer).await.unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"),
            "{answer}"
        );

        // Before, the read-only and healthz ports kept such a connection for ever.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut buf = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(15), silent.read_to_end(&mut buf)).await;
        assert!(closed.is_ok(), "a silent connection was kept open");
        cancel.cancel();
    }
}
