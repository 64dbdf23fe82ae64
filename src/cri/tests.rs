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

/// Runtimes on strict HTTP/2 servers (h2 refuses a socket path) see the authority
/// upstream's kubelet sends: `localhost`.
#[tokio::test]
async fn the_client_presents_localhost_as_its_authority() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runtime.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let server = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        // An empty SETTINGS frame, then the client's preface and frames up to its HEADERS.
        conn.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
        let mut preface = [0u8; 24];
        conn.read_exact(&mut preface).await.unwrap();
        loop {
            let mut head = [0u8; 9];
            conn.read_exact(&mut head).await.unwrap();
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            conn.read_exact(&mut payload).await.unwrap();
            if head[3] == 0x1 {
                let fields = crate::grpc_uds::hpack::Decoder::new(1 << 20)
                    .decode(&payload)
                    .unwrap();
                return fields
                    .into_iter()
                    .find(|f| f.name == b":authority")
                    .map(|f| String::from_utf8(f.value).unwrap());
            }
        }
    });
    let client = RuntimeClient::connect(
        &path.display().to_string(),
        &path.display().to_string(),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    // The call fails (the server never answers); only its headers matter.
    let _ = client.version().await;
    let authority = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("no HEADERS within 5 s")
        .unwrap();
    assert_eq!(authority.as_deref(), Some("localhost"));
}

#[tokio::test]
async fn calls_carry_the_callers_trace_context() {
    use opentelemetry::trace::TraceContextExt;
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::layer::SubscriberExt;

    let config = crate::config::TracingConfiguration {
        endpoint: None,
        sampling_rate_per_million: Some(1_000_000),
    };
    let pipeline = crate::telemetry::trace::pipeline(&config, "node").expect("pipeline");
    let subscriber = tracing_subscriber::registry().with(pipeline.layer());
    let _default = tracing::subscriber::set_default(subscriber);
    let cri = FakeCri::start(Duration::from_secs(5)).await;

    let span = tracing::info_span!(target: crate::telemetry::trace::TARGET, "syncPod");
    let trace_id = span.context().span().span_context().trace_id();
    let parent_id = span.context().span().span_context().span_id();
    cri.client
        .version()
        .instrument(span.clone())
        .await
        .expect("version");
    cri.client
        .version()
        .await
        .expect("version outside any span");

    let seen = cri.runtime.traceparents();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        !seen[1].contains(&trace_id.to_string()),
        "a call outside the sync starts a trace of its own: {seen:?}"
    );
    let parts: Vec<&str> = seen[0].split('-').collect();
    assert_eq!(parts[0], "00");
    assert_eq!(parts[1], trace_id.to_string(), "the sync's trace");
    assert_ne!(
        parts[2],
        parent_id.to_string(),
        "the parent is the call's own client span, not the sync"
    );
    assert_eq!(parts[3], "01", "sampled");
}
