//! The fake served over a real unix socket, so tests go through the kubelet's own client.

use std::time::Duration;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::Request;

use super::FakeRuntime;
use crate::cri::RuntimeClient;
use crate::cri::api::image_service_server::ImageServiceServer;
use crate::cri::api::runtime_service_server::RuntimeServiceServer;

impl FakeRuntime {
    /// A server interceptor keeping each request's `traceparent`.
    fn trace_capture(&self) -> impl tonic::service::Interceptor + Clone + use<> {
        let fake = self.clone();
        move |req: Request<()>| {
            if let Some(tp) = req
                .metadata()
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
            {
                fake.lock().traceparents.push(tp.to_string());
            }
            Ok(req)
        }
    }
}

/// A [`FakeRuntime`] served on a unix socket in its own temporary directory, with a
/// connected client. Dropping it stops the server.
pub struct FakeCri {
    pub runtime: FakeRuntime,
    pub client: RuntimeClient,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl FakeCri {
    /// Serves a fresh fake; `timeout` is the client's per-call deadline.
    pub async fn start(timeout: Duration) -> FakeCri {
        let dir = tempfile::tempdir().expect("tempdir for the fake CRI socket");
        let sock = dir.path().join("cri.sock");
        let listener = UnixListener::bind(&sock).expect("bind the fake CRI socket");
        let runtime = FakeRuntime::default();
        let stop = CancellationToken::new();
        let server = tonic::transport::Server::builder()
            .add_service(RuntimeServiceServer::with_interceptor(
                runtime.clone(),
                runtime.trace_capture(),
            ))
            .add_service(ImageServiceServer::with_interceptor(
                runtime.clone(),
                runtime.trace_capture(),
            ))
            .serve_with_incoming_shutdown(
                UnixListenerStream::new(listener),
                stop.clone().cancelled_owned(),
            );
        tokio::spawn(async move {
            if let Err(e) = server.await {
                tracing::warn!(err = %e, "fake CRI server failed");
            }
        });
        let endpoint = format!("unix://{}", sock.display());
        let client = RuntimeClient::connect(&endpoint, "", timeout)
            .await
            .expect("connect to the fake CRI");
        FakeCri {
            runtime,
            client,
            stop,
            _dir: dir,
        }
    }
}

impl Drop for FakeCri {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
