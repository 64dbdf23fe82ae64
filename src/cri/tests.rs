//! Round trips through an in-process fake runtime on a unix socket.

use std::path::Path;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::api::image_service_server::{ImageService, ImageServiceServer};
use super::api::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use super::{CriError, RuntimeClient, api};

/// Answers Version and ContainerStatus; StopContainer sleeps for the
/// requested grace period; ExecSync sleeps "forever" to exercise timeouts.
struct FakeRuntime;

#[tonic::async_trait]
impl RuntimeService for FakeRuntime {
    async fn version(
        &self,
        request: Request<api::VersionRequest>,
    ) -> Result<Response<api::VersionResponse>, Status> {
        Ok(Response::new(api::VersionResponse {
            version: request.into_inner().version,
            runtime_name: "fake".into(),
            runtime_version: "0.0.1".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn container_status(
        &self,
        request: Request<api::ContainerStatusRequest>,
    ) -> Result<Response<api::ContainerStatusResponse>, Status> {
        let id = request.into_inner().container_id;
        if id != "c1" {
            return Err(Status::not_found(format!("container {id} not found")));
        }
        Ok(Response::new(api::ContainerStatusResponse {
            status: Some(api::ContainerStatus {
                id,
                metadata: Some(api::ContainerMetadata {
                    name: "app".into(),
                    attempt: 2,
                }),
                state: api::ContainerState::ContainerRunning as i32,
                ..Default::default()
            }),
            info: Default::default(),
        }))
    }

    async fn stop_container(
        &self,
        request: Request<api::StopContainerRequest>,
    ) -> Result<Response<api::StopContainerResponse>, Status> {
        let grace = u64::try_from(request.into_inner().timeout).unwrap_or(0);
        tokio::time::sleep(Duration::from_secs(grace)).await;
        Ok(Response::new(api::StopContainerResponse {}))
    }

    async fn exec_sync(
        &self,
        _request: Request<api::ExecSyncRequest>,
    ) -> Result<Response<api::ExecSyncResponse>, Status> {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(Response::new(api::ExecSyncResponse::default()))
    }

    async fn run_pod_sandbox(
        &self,
        _request: Request<api::RunPodSandboxRequest>,
    ) -> Result<Response<api::RunPodSandboxResponse>, Status> {
        // Violates the contract on purpose: no id.
        Ok(Response::new(api::RunPodSandboxResponse::default()))
    }
}

struct FakeImages;

#[tonic::async_trait]
impl ImageService for FakeImages {
    async fn image_status(
        &self,
        request: Request<api::ImageStatusRequest>,
    ) -> Result<Response<api::ImageStatusResponse>, Status> {
        let name = request
            .into_inner()
            .image
            .map(|s| s.image)
            .unwrap_or_default();
        let image = (name == "busybox:1").then(|| api::Image {
            id: "sha256:abc".into(),
            repo_tags: vec![name],
            size: 1234,
            ..Default::default()
        });
        Ok(Response::new(api::ImageStatusResponse {
            image,
            info: Default::default(),
        }))
    }
}

/// Serves the fakes on `sock` until `stop` is cancelled.
async fn serve(sock: &Path, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    let listener = match UnixListener::bind(sock) {
        Ok(l) => l,
        Err(e) => panic!("bind {}: {e}", sock.display()),
    };
    tokio::spawn(async move {
        let result = tonic::transport::Server::builder()
            .add_service(RuntimeServiceServer::new(FakeRuntime))
            .add_service(ImageServiceServer::new(FakeImages))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), stop.cancelled_owned())
            .await;
        if let Err(e) = result {
            panic!("fake CRI server failed: {e}");
        }
    })
}

async fn client_for(sock: &Path, timeout: Duration) -> RuntimeClient {
    let endpoint = format!("unix://{}", sock.display());
    match RuntimeClient::connect(&endpoint, "", timeout).await {
        Ok(c) => c,
        Err(e) => panic!("connect {endpoint}: {e}"),
    }
}

#[tokio::test]
async fn calls_round_trip_through_fake_runtime() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("cri.sock");
    let stop = CancellationToken::new();
    let server = serve(&sock, stop.clone()).await;
    let client = client_for(&sock, Duration::from_secs(5)).await;

    let v = client.version().await.expect("version");
    assert_eq!(v.version, "v1", "client announces the v1 API");
    assert_eq!(v.runtime_name, "fake");
    assert_eq!(v.runtime_api_version, "v1");

    let status = client.container_status("c1").await.expect("status");
    assert_eq!(status.id, "c1");
    assert_eq!(status.state(), api::ContainerState::ContainerRunning);
    assert_eq!(status.metadata.map(|m| m.attempt), Some(2));

    let err = client
        .container_status("nope")
        .await
        .expect_err("not found");
    assert!(err.is_not_found(), "{err}");
    assert_eq!(err.code(), Some(tonic::Code::NotFound));

    // Image calls go over the shared channel to the ImageService.
    let img = client
        .image_status("busybox:1")
        .await
        .expect("image status");
    assert_eq!(img.map(|i| i.id), Some("sha256:abc".to_string()));
    assert!(
        client
            .image_status("absent:1")
            .await
            .expect("image status")
            .is_none()
    );

    // An RPC the fake leaves out reports UNIMPLEMENTED, not a hang.
    let err = client.list_images().await.expect_err("unimplemented");
    assert_eq!(err.code(), Some(tonic::Code::Unimplemented));

    // Contract violations are caught, not passed on.
    let err = client
        .run_pod_sandbox(api::PodSandboxConfig::default(), "")
        .await
        .expect_err("empty id");
    assert!(
        matches!(
            err,
            CriError::InvalidResponse {
                op: "RunPodSandbox",
                ..
            }
        ),
        "{err}"
    );

    drop(client);
    stop.cancel();
    server.await.expect("server task");
}

#[tokio::test]
async fn slow_handler_yields_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("cri.sock");
    let stop = CancellationToken::new();
    let server = serve(&sock, stop.clone()).await;
    let client = client_for(&sock, Duration::from_millis(200)).await;

    let started = std::time::Instant::now();
    let err = client
        .exec_sync("c1", vec!["sleep".into()], Duration::from_millis(100))
        .await
        .expect_err("must time out");
    match err {
        CriError::Timeout { op, after } => {
            assert_eq!(op, "ExecSync");
            // Deadline is the exec timeout plus the client timeout.
            assert_eq!(after, Duration::from_millis(300));
        }
        other => panic!("expected Timeout, got {other}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // The client stays usable after a timed-out call.
    client.version().await.expect("version after timeout");

    // StopContainer's deadline grows with the grace period: a 1 s grace
    // with a 200 ms client timeout completes instead of timing out.
    client
        .stop_container("c1", 1)
        .await
        .expect("stop within grace + timeout");

    drop(client);
    stop.cancel();
    server.await.expect("server task");
}

#[tokio::test]
async fn connect_to_missing_socket_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("absent.sock");
    let endpoint = format!("unix://{}", sock.display());
    let err = RuntimeClient::connect(&endpoint, "", Duration::from_secs(2))
        .await
        .expect_err("no server");
    assert!(matches!(err, CriError::Connect { .. }), "{err}");
    assert_eq!(err.code(), None);
}

#[tokio::test]
async fn connect_rejects_bad_endpoint() {
    let err = RuntimeClient::connect("tcp://127.0.0.1:1", "", Duration::from_secs(1))
        .await
        .expect_err("tcp unsupported");
    assert!(matches!(err, CriError::InvalidEndpoint { .. }), "{err}");
}

#[test]
fn auth_config_debug_hides_secrets() {
    let auth = api::AuthConfig {
        username: "me".into(),
        password: "hunter2".into(),
        auth: "bWU6aHVudGVyMg==".into(),
        server_address: "registry.local".into(),
        identity_token: String::new(),
        registry_token: "tok".into(),
    };
    let shown = format!("{auth:?}");
    assert!(
        shown.contains("me") && shown.contains("registry.local"),
        "{shown}"
    );
    for secret in ["hunter2", "bWU6aHVudGVyMg==", "tok\""] {
        assert!(!shown.contains(secret), "{secret} leaked in {shown}");
    }
}

/// Talks to a real runtime when `KUBELET_RS_CRI_TEST_ENDPOINT` names one,
/// e.g. a throw-away containerd on a temp socket. Read-only calls only.
#[tokio::test]
#[ignore = "needs a running CRI runtime"]
async fn real_runtime_read_only_calls() {
    let Ok(endpoint) = std::env::var("KUBELET_RS_CRI_TEST_ENDPOINT") else {
        eprintln!("KUBELET_RS_CRI_TEST_ENDPOINT not set; skipping");
        return;
    };
    let client = RuntimeClient::connect(&endpoint, "", Duration::from_secs(10))
        .await
        .expect("connect");
    let v = client.version().await.expect("Version");
    println!("Version: {v:?}");
    assert_eq!(v.runtime_api_version, "v1");
    let s = client.status(false).await.expect("Status");
    println!("Status: {:?}", s.status);
    let images = client.list_images().await.expect("ListImages");
    println!("ListImages: {} images", images.len());
    let fs = client.image_fs_info().await.expect("ImageFsInfo");
    println!("ImageFsInfo: {fs:?}");
    let pods = client.list_pod_sandbox(None).await.expect("ListPodSandbox");
    let ctrs = client.list_containers(None).await.expect("ListContainers");
    println!("sandboxes: {}, containers: {}", pods.len(), ctrs.len());
    let missing = client
        .image_status("kubelet-rs.invalid/none:0")
        .await
        .expect("ImageStatus");
    assert!(missing.is_none());
    let err = client
        .container_status("does-not-exist")
        .await
        .expect_err("absent");
    assert!(err.is_not_found(), "{err}");
}
