//! The client side: a gRPC channel to a server on a unix socket (the runtime, plugins).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// Why no channel could be opened.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("{0}")]
    Connect(#[source] tonic::transport::Error),
    #[error("no connection within {0:?}")]
    Timeout(Duration),
}

/// Opens a channel to the server on `socket`, waiting at most `timeout` for the connection
/// (socket connect plus HTTP/2 handshake).
pub async fn dial(socket: &Path, timeout: Duration) -> Result<Channel, DialError> {
    let path: Arc<PathBuf> = Arc::new(socket.to_path_buf());
    // The connector ignores the URI and dials the socket; the URI only gives the
    // `:authority`, and `localhost` is what grpc-go (so upstream's kubelet) sends to a unix
    // socket, the one value every Go server accepts.
    let ep = Endpoint::from_static("http://localhost").connect_timeout(timeout);
    let connector = tower::service_fn(move |_: Uri| {
        let path = Arc::clone(&path);
        async move {
            let stream = tokio::net::UnixStream::connect(path.as_path()).await?;
            Ok::<_, std::io::Error>(TokioIo::new(stream))
        }
    });
    match tokio::time::timeout(timeout, ep.connect_with_connector(connector)).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => Err(DialError::Connect(e)),
        Err(_) => Err(DialError::Timeout(timeout)),
    }
}
