//! gRPC on unix sockets. Servers (pod-resources now; device-plugin later) answer every client
//! the way upstream's Go servers do, whatever `:authority` the client sends (see `rewrite`):
//! serve with `incoming(listener)` in place of the listener. Clients (the runtime, plugins)
//! open their channels with `dial`.

mod dial;
pub(crate) mod hpack;
mod huffman;
mod rewrite;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::BytesMut;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::server::{Connected, UdsConnectInfo};
use tracing::debug;

pub use dial::{DialError, dial};

/// Bytes read from the socket per call; a frame larger than this simply takes several reads.
const READ_CHUNK: usize = 16 * 1024;

/// The accepted connections of `listener`, each with its request authorities made acceptable.
pub fn incoming(listener: UnixListener) -> impl Stream<Item = io::Result<TolerantStream>> {
    UnixListenerStream::new(listener).map(|conn| conn.map(TolerantStream::new))
}

/// A server-side connection whose inbound bytes pass through a `rewrite::Rewriter`.
#[derive(Debug)]
pub struct TolerantStream {
    inner: UnixStream,
    rewriter: rewrite::Rewriter,
    /// Received bytes the rewriter has not consumed yet (an incomplete frame).
    raw: BytesMut,
    /// Rewritten bytes not yet handed to the server.
    ready: BytesMut,
    eof: bool,
}

impl TolerantStream {
    pub fn new(inner: UnixStream) -> Self {
        TolerantStream {
            inner,
            rewriter: rewrite::Rewriter::default(),
            raw: BytesMut::new(),
            ready: BytesMut::new(),
            eof: false,
        }
    }
}

impl AsyncRead for TolerantStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.ready.is_empty() {
                let n = this.ready.len().min(buf.remaining());
                buf.put_slice(&this.ready.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut chunk_buf = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut chunk_buf))?;
            let filled = chunk_buf.filled();
            if filled.is_empty() {
                // A frame cut short stays unsent; the server sees the connection end.
                this.eof = true;
                continue;
            }
            this.raw.extend_from_slice(filled);
            let before = this.rewriter.rewritten;
            this.rewriter
                .process(&mut this.raw, &mut this.ready)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if this.rewriter.rewritten > before && before == 0 {
                debug!(
                    "Replacing an unparseable :authority from a unix-socket gRPC client with localhost"
                );
            }
        }
    }
}

impl AsyncWrite for TolerantStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl Connected for TolerantStream {
    type ConnectInfo = UdsConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
