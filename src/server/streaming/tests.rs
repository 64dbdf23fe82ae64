//! The streaming routes end to end: request checks and lookups against an in-memory pod (no
//! runtime needed), and an opt-in run against a real containerd covering /run, exec, attach
//! and port-forward through the proxy over WebSocket, plus the SPDY upgrade.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

use crate::cri::RuntimeClient;
use crate::server::ServerState;

const NS: &str = "krs-stream";
const POD: &str = "stream";
const UID: &str = "uid-stream-1";
const STEP: Duration = Duration::from_secs(20);

fn pod(uid: &str, container_id: &str) -> (Pod, PodStatus) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": POD, "namespace": NS, "uid": uid},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }))
    .expect("pod");
    let status: PodStatus = serde_json::from_value(json!({
        "containerStatuses": [{
            "name": "app", "image": "busybox", "imageID": "", "ready": true,
            "restartCount": 0, "containerID": format!("containerd://{container_id}"),
        }],
    }))
    .expect("status");
    (pod, status)
}

fn state_with(cri: RuntimeClient, pods: &[(Pod, PodStatus)]) -> ServerState {
    let state = ServerState::for_tests(cri);
    for (p, s) in pods {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        state.status.set(&uid, Arc::new(p.clone()), s.clone());
    }
    state
}

async fn call(state: ServerState, method: &str, uri: &str, ws: bool) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(uri);
    if ws {
        req = req
            .header("connection", "Upgrade")
            .header("upgrade", "websocket");
    }
    let resp = super::routes()
        .with_state(state)
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn requests_are_checked_before_the_runtime_is_asked() {
    let state = state_with(RuntimeClient::unreachable(), &[pod(UID, "c1")]);
    let s = || state.clone();

    // /run is POST only.
    let (code, _) = call(s(), "GET", "/run/krs-stream/stream/app?cmd=ls", false).await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
    let (code, body) = call(s(), "POST", "/run/krs-stream/nope/app?cmd=ls", false).await;
    assert_eq!(
        (code, body.as_str()),
        (StatusCode::NOT_FOUND, "pod does not exist")
    );
    let (code, body) = call(s(), "POST", "/run/krs-stream/stream/x/app2?cmd=ls", false).await;
    assert_eq!(
        (code, body.as_str()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "container not found (\"app2\")"
        )
    );

    // Stream flags are checked first, even for an unknown pod.
    for verb in ["GET", "POST"] {
        let (code, body) = call(s(), verb, "/exec/krs-stream/nope/app?command=ls", false).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{verb}");
        assert_eq!(body, "you must specify at least 1 of stdin, stdout, stderr");
    }
    let (code, _) = call(s(), "GET", "/exec/krs-stream/nope/app?output=1", false).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = call(s(), "POST", "/exec/krs-stream/nope/u/app?output=1", false).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, body) = call(s(), "GET", "/exec/krs-stream/stream/gone?output=1", false).await;
    assert_eq!(
        (code, body.as_str()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "container not found (\"gone\")"
        )
    );

    let (code, body) = call(
        s(),
        "GET",
        "/attach/krs-stream/stream/other-uid/app?output=1",
        false,
    )
    .await;
    assert_eq!(
        (code, body.as_str()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "pod stream_krs-stream not found"
        )
    );
    let (code, body) = call(s(), "GET", "/attach/krs-stream/stream/gone?output=1", false).await;
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body, "container gone not found in pod stream_krs-stream");

    // WebSocket port-forward names its ports in the query; SPDY does not.
    let (code, body) = call(s(), "GET", "/portForward/krs-stream/stream", true).await;
    assert_eq!(
        (code, body.as_str()),
        (
            StatusCode::BAD_REQUEST,
            "query parameter \"port\" is required"
        )
    );
    let (code, _) = call(s(), "GET", "/portForward/krs-stream/stream?port=0", true).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let (code, body) = call(s(), "POST", "/portForward/krs-stream/nope", false).await;
    assert_eq!(
        (code, body.as_str()),
        (StatusCode::NOT_FOUND, "pod does not exist")
    );
    let (code, body) = call(
        s(),
        "GET",
        "/portForward/krs-stream/stream/other?port=80",
        true,
    )
    .await;
    assert_eq!(
        (code, body.as_str()),
        (StatusCode::NOT_FOUND, "pod not found")
    );
}

// ---------------------------------------------------------------------------------------------
// Against a real containerd.
// ---------------------------------------------------------------------------------------------

/// A hand-rolled WebSocket client, enough for the channel.k8s.io protocols.
pub(super) mod ws {
    use super::*;

    pub const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

    /// Reads a response head (through the blank line) byte by byte, so nothing after it is
    /// consumed.
    pub async fn read_head(sock: &mut TcpStream) -> String {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            let n = tokio::time::timeout(STEP, sock.read(&mut b))
                .await
                .expect("response head in time")
                .expect("read");
            assert_eq!(
                n,
                1,
                "closed inside the head: {}",
                String::from_utf8_lossy(&head)
            );
            head.push(b[0]);
        }
        String::from_utf8(head).expect("utf-8 head")
    }

    /// Sends a handshake to `path` and returns the socket and the response head.
    pub async fn connect(
        addr: std::net::SocketAddr,
        path: &str,
        protocol: &str,
    ) -> (TcpStream, String) {
        let mut sock = TcpStream::connect(addr).await.expect("connect");
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n\
             Sec-WebSocket-Protocol: {protocol}\r\n\r\n"
        );
        sock.write_all(req.as_bytes()).await.expect("write");
        let head = read_head(&mut sock).await;
        (sock, head)
    }

    /// One frame: (opcode, payload); None at EOF.
    pub async fn read_frame(sock: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
        let mut h = [0u8; 2];
        sock.read_exact(&mut h).await.ok()?;
        let opcode = h[0] & 0x0f;
        let masked = h[1] & 0x80 != 0;
        let len = match h[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                sock.read_exact(&mut b).await.ok()?;
                u64::from(u16::from_be_bytes(b))
            }
            127 => {
                let mut b = [0u8; 8];
                sock.read_exact(&mut b).await.ok()?;
                u64::from_be_bytes(b)
            }
            n => u64::from(n),
        };
        let mut mask = [0u8; 4];
        if masked {
            sock.read_exact(&mut mask).await.ok()?;
        }
        let mut payload = vec![0u8; usize::try_from(len).ok()?];
        sock.read_exact(&mut payload).await.ok()?;
        if masked {
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= mask[i % 4];
            }
        }
        Some((opcode, payload))
    }

    /// A masked binary frame, as clients must send.
    pub async fn write_frame(sock: &mut TcpStream, payload: &[u8]) {
        let mask = [0x11u8, 0x22, 0x33, 0x44];
        let mut frame = vec![0x82];
        assert!(payload.len() < 126, "short frames only");
        frame.push(0x80 | payload.len() as u8);
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        sock.write_all(&frame).await.expect("write frame");
    }

    /// Every channel's data (the first byte of each data frame names the channel) until the
    /// server closes. `frames` keeps each frame too, in order.
    pub async fn collect(sock: &mut TcpStream) -> (HashMap<u8, Vec<u8>>, Vec<(u8, Vec<u8>)>) {
        let mut channels: HashMap<u8, Vec<u8>> = HashMap::new();
        let mut frames = Vec::new();
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            let frame = tokio::time::timeout_at(deadline, read_frame(sock))
                .await
                .expect("server closes the stream in time");
            match frame {
                None | Some((0x8, _)) => break,
                Some((_, payload)) if payload.is_empty() => {}
                Some((_, payload)) => {
                    channels
                        .entry(payload[0])
                        .or_default()
                        .extend_from_slice(&payload[1..]);
                    frames.push((payload[0], payload[1..].to_vec()));
                }
            }
        }
        (channels, frames)
    }
}

fn text(channels: &HashMap<u8, Vec<u8>>, ch: u8) -> String {
    String::from_utf8_lossy(channels.get(&ch).map_or(&[][..], |v| v)).into_owned()
}

struct RealPod {
    cri: RuntimeClient,
    sandbox: String,
    container: String,
    _logs: tempfile::TempDir,
}

async fn start_real_pod(cri: RuntimeClient, uid: &str) -> RealPod {
    use crate::cri::api;
    let logs = tempfile::tempdir().expect("log dir");
    let labels: HashMap<String, String> = [
        ("io.kubernetes.pod.uid", uid),
        ("io.kubernetes.pod.name", POD),
        ("io.kubernetes.pod.namespace", NS),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let sandbox_cfg = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: POD.into(),
            uid: uid.into(),
            namespace: NS.into(),
            attempt: 0,
        }),
        hostname: POD.into(),
        log_directory: logs.path().to_string_lossy().into_owned(),
        labels: labels.clone(),
        linux: Some(api::LinuxPodSandboxConfig::default()),
        ..Default::default()
    };
    let sandbox = cri
        .run_pod_sandbox(sandbox_cfg.clone(), "")
        .await
        .expect("RunPodSandbox");
    let container_cfg = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: "docker.io/library/busybox:1.36".into(),
            ..Default::default()
        }),
        command: vec!["sh".into(), "-c".into()],
        args: vec!["nc -ll -p 8080 -e echo hi & exec sleep 600".into()],
        log_path: "app.log".into(),
        labels,
        linux: Some(api::LinuxContainerConfig::default()),
        ..Default::default()
    };
    let container = cri
        .create_container(&sandbox, container_cfg, sandbox_cfg)
        .await
        .expect("CreateContainer");
    cri.start_container(&container)
        .await
        .expect("StartContainer");
    RealPod {
        cri,
        sandbox,
        container,
        _logs: logs,
    }
}

impl RealPod {
    async fn remove(self) {
        let _ = self.cri.stop_container(&self.container, 0).await;
        let _ = self.cri.remove_container(&self.container).await;
        let _ = self.cri.stop_pod_sandbox(&self.sandbox).await;
        let _ = self.cri.remove_pod_sandbox(&self.sandbox).await;
    }
}

async fn post(addr: std::net::SocketAddr, path: &str) -> (String, Vec<u8>) {
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    sock.write_all(req.as_bytes()).await.expect("write");
    let head = ws::read_head(&mut sock).await;
    let mut body = Vec::new();
    tokio::time::timeout(STEP, sock.read_to_end(&mut body))
        .await
        .expect("body in time")
        .expect("read body");
    (head, body)
}

/// Runs with `cargo test --lib streaming -- --ignored` once KRS_CONTAINERD_SOCK names a
/// test-bed containerd (`hack/testbed/containerd.sh start NAME`, then `images.sh NAME`).
#[tokio::test]
#[ignore = "needs the test bed's containerd (KRS_CONTAINERD_SOCK) with its images"]
async fn real_runtime_run_exec_attach_and_port_forward() {
    let Ok(sock) = std::env::var("KRS_CONTAINERD_SOCK") else {
        panic!("KRS_CONTAINERD_SOCK is not set");
    };
    let cri = RuntimeClient::connect(&format!("unix://{sock}"), "", Duration::from_secs(30))
        .await
        .expect("connect to containerd");
    let uid = format!("krs-stream-{}", std::process::id());
    let real = start_real_pod(cri.clone(), &uid).await;
    let state = state_with(cri, &[pod(&uid, &real.container)]);

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = super::routes().with_state(state);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    // The checks run in their own task so that a failing one still lets the pod be removed.
    let checks = tokio::spawn(async move { exercise(addr, &uid).await });
    let abort = checks.abort_handle();
    let result = tokio::time::timeout(Duration::from_secs(120), checks).await;
    abort.abort();
    server.abort();
    real.remove().await;
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Ok(Err(e)) => panic!("checks did not finish: {e}"),
        Err(_) => panic!("the real-runtime checks did not finish in time"),
    }
}

async fn exercise(addr: std::net::SocketAddr, uid: &str) {
    let base = format!("{NS}/{POD}");

    // /run: ExecSync, stdout then stderr in the body.
    let (head, body) = post(addr, &format!("/run/{base}/app?cmd=echo%20hello")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    assert_eq!(body, b"hello\n");
    let (head, body) = post(addr, &format!("/run/{base}/{uid}/app?cmd=false")).await;
    assert!(head.starts_with("HTTP/1.1 500"), "{head}");
    assert_eq!(
        String::from_utf8_lossy(&body),
        "command 'false' exited with 1: "
    );
    eprintln!("/run: ok");

    // /exec over WebSocket (v4.channel.k8s.io): stdout on channel 1, status on channel 3.
    let path = format!("/exec/{base}/app?command=echo&command=hello&output=1");
    let (mut sock, head) = ws::connect(addr, &path, "v4.channel.k8s.io").await;
    let lower = head.to_ascii_lowercase();
    assert!(lower.starts_with("http/1.1 101"), "{head}");
    assert!(
        lower.contains("sec-websocket-protocol: v4.channel.k8s.io"),
        "{head}"
    );
    let (channels, _) = ws::collect(&mut sock).await;
    assert_eq!(text(&channels, 1), "hello\n");
    let status: serde_json::Value =
        serde_json::from_str(&text(&channels, 3)).expect("status JSON on channel 3");
    assert_eq!(status["status"], "Success", "{status}");
    eprintln!("/exec echo over WebSocket: ok");

    // stdin in, stdout out, through the same spliced connection.
    let path = format!("/exec/{base}/{uid}/app?command=head&command=-n1&input=1&output=1");
    let (mut sock, head) = ws::connect(addr, &path, "v4.channel.k8s.io").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    ws::write_frame(&mut sock, b"\x00ping\n").await;
    let (channels, _) = ws::collect(&mut sock).await;
    assert_eq!(text(&channels, 1), "ping\n");
    eprintln!("/exec stdin over WebSocket: ok");

    // stderr and a failing exit code.
    let path = format!(
        "/exec/{base}/app?command=sh&command=-c&command=echo+oops+%3E%262%3B+exit+3&output=1&error=1"
    );
    let (mut sock, _) = ws::connect(addr, &path, "v4.channel.k8s.io").await;
    let (channels, _) = ws::collect(&mut sock).await;
    assert_eq!(text(&channels, 2), "oops\n");
    let status: serde_json::Value = serde_json::from_str(&text(&channels, 3)).expect("status");
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "3", "{status}");
    eprintln!("/exec exit code over WebSocket: ok");

    // A plain request reaches the runtime but is refused for want of an upgrade.
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET /exec/{base}/app?command=true&output=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    sock.write_all(req.as_bytes()).await.expect("write");
    let head = ws::read_head(&mut sock).await;
    assert!(head.starts_with("HTTP/1.1 500"), "{head}");

    // SPDY: the runtime accepts the upgrade through the proxy and picks the newest protocol.
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST /exec/{base}/app?command=true&output=1 HTTP/1.1\r\nHost: {addr}\r\n\
         Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\
         X-Stream-Protocol-Version: v3.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
    );
    sock.write_all(req.as_bytes()).await.expect("write");
    let head = ws::read_head(&mut sock).await.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: spdy/3.1"), "{head}");
    assert!(
        head.contains("x-stream-protocol-version: v4.channel.k8s.io"),
        "{head}"
    );
    drop(sock);
    eprintln!("/exec SPDY upgrade: ok");

    // /attach: the runtime takes the upgrade (the container prints nothing by itself).
    let (sock, head) = ws::connect(
        addr,
        &format!("/attach/{base}/app?output=1"),
        "v4.channel.k8s.io",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    drop(sock);
    eprintln!("/attach over WebSocket: ok");

    // /portForward over WebSocket: data and error channels per port, each opened by the port
    // number (little endian), then what the container's server sends.
    let path = format!("/portForward/{base}?port=8080");
    let (mut sock, head) = ws::connect(addr, &path, "v4.channel.k8s.io").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let (channels, frames) = ws::collect(&mut sock).await;
    let port = 8080u16.to_le_bytes().to_vec();
    let first = |ch: u8| {
        frames
            .iter()
            .find(|(c, _)| *c == ch)
            .map(|(_, d)| d.clone())
    };
    assert_eq!(first(0), Some(port.clone()), "{frames:?}");
    assert_eq!(first(1), Some(port.clone()), "{frames:?}");
    let data = channels.get(&0).cloned().unwrap_or_default();
    assert_eq!(&data[2..], b"hi\n", "{frames:?}");
    assert_eq!(
        channels.get(&1),
        Some(&port),
        "no forwarding error: {frames:?}"
    );
    eprintln!("/portForward over WebSocket: ok");
}
