//! The client against the in-memory fake runtime (round trips, error mapping, deadlines),
//! endpoint handling, and an opt-in check against a real runtime.

use std::time::Duration;

use tonic::Status;

use super::fake::{EXIT_SIGTERM, FakeCri};
use super::{CriError, RuntimeClient, api};

/// Starts a container named `name` (attempt `attempt`) from a local busybox in a fresh
/// sandbox and returns its id.
async fn running_container(cri: &FakeCri, name: &str, attempt: u32) -> String {
    cri.runtime.add_image("busybox:1");
    let sandbox = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: "pod".into(),
            uid: "uid-1".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    };
    let container = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: name.into(),
            attempt,
        }),
        image: Some(api::ImageSpec {
            image: "busybox:1".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let c = &cri.client;
    let sb = c
        .run_pod_sandbox(sandbox.clone(), "")
        .await
        .expect("run sandbox");
    let id = c
        .create_container(&sb, container, sandbox)
        .await
        .expect("create container");
    c.start_container(&id).await.expect("start container");
    id
}

#[tokio::test]
async fn calls_round_trip_through_fake_runtime() {
    let cri = FakeCri::start(Duration::from_secs(5)).await;
    let (fake, client) = (&cri.runtime, &cri.client);

    let v = client.version().await.expect("version");
    assert_eq!(v.version, "v1", "client announces the v1 API");
    assert_eq!(v.runtime_name, "fake");
    assert_eq!(v.runtime_api_version, "v1");

    let id = running_container(&cri, "app", 2).await;
    let status = client.container_status(&id).await.expect("status");
    assert_eq!(status.id, id);
    assert_eq!(status.state(), api::ContainerState::ContainerRunning);
    assert_eq!(
        status.metadata.map(|m| (m.name, m.attempt)),
        Some(("app".to_string(), 2))
    );

    let err = client
        .container_status("nope")
        .await
        .expect_err("not found");
    assert!(err.is_not_found(), "{err}");
    assert_eq!(err.code(), Some(tonic::Code::NotFound));

    // Image calls go over the shared channel to the ImageService.
    let image_id = fake.add_image("busybox:1");
    let img = client
        .image_status("busybox:1")
        .await
        .expect("image status");
    assert_eq!(img.map(|i| i.id), Some(image_id));
    assert!(
        client
            .image_status("absent:1")
            .await
            .expect("image status")
            .is_none()
    );

    // An RPC the fake leaves out reports UNIMPLEMENTED, not a hang.
    let err = client.image_fs_info().await.expect_err("unimplemented");
    assert_eq!(err.code(), Some(tonic::Code::Unimplemented));

    // Contract violations are caught, not passed on.
    fake.omit_next_sandbox_id();
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

    // Runtime errors keep their gRPC code.
    fake.fail_next("Version", Status::unavailable("injected"));
    let err = client.version().await.expect_err("injected");
    assert!(
        matches!(err, CriError::Status { op: "Version", .. }),
        "{err}"
    );
    assert_eq!(err.code(), Some(tonic::Code::Unavailable));
}

#[tokio::test]
async fn slow_handler_yields_timeout() {
    let cri = FakeCri::start(Duration::from_millis(200)).await;
    let (fake, client) = (&cri.runtime, &cri.client);
    let id = running_container(&cri, "app", 0).await;

    fake.delay("ExecSync", Duration::from_secs(3600));
    let started = std::time::Instant::now();
    let err = client
        .exec_sync(&id, vec!["sleep".into()], Duration::from_millis(100))
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

    // StopContainer's deadline grows with the grace period: a stop the runtime takes 1 s
    // over times out without grace, but completes with a 2 s grace.
    fake.delay("StopContainer", Duration::from_secs(1));
    let err = client
        .stop_container(&id, 0)
        .await
        .expect_err("no grace: client timeout only");
    assert!(
        matches!(
            err,
            CriError::Timeout {
                op: "StopContainer",
                after,
            } if after == Duration::from_millis(200)
        ),
        "{err}"
    );
    client
        .stop_container(&id, 2)
        .await
        .expect("stop within grace + timeout");
    fake.clear_delay("StopContainer");
    let timeouts: Vec<_> = fake
        .calls_of("StopContainer")
        .into_iter()
        .map(|c| c.timeout)
        .collect();
    assert_eq!(timeouts, vec![Some(0), Some(2)]);
    let status = client.container_status(&id).await.expect("status");
    assert_eq!(status.state(), api::ContainerState::ContainerExited);
    assert_eq!(status.exit_code, EXIT_SIGTERM);
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
