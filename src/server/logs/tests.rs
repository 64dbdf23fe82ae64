//! The log endpoints through the router, over a status store holding a pod and the in-memory
//! CRI runtime, as a client of the kubelet API sees them.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodSpec, PodStatus,
};
use tower::ServiceExt;

use super::routes_with_root;
use crate::cri::api;
use crate::cri::fake::FakeCri;
use crate::server::ServerState;

const LINES: &str = "2024-01-01T00:00:01Z stdout F hello\n\
                     2024-01-01T00:00:02Z stderr P wor\n\
                     2024-01-01T00:00:02Z stderr F ld\n";

struct Bed {
    fake: FakeCri,
    router: Router,
    container_id: String,
    log: std::path::PathBuf,
    dir: tempfile::TempDir,
}

/// A running container `app` of pod default/web whose log holds LINES, and /logs/ over
/// `<tmp>/varlog`.
async fn bed() -> Bed {
    let fake = FakeCri::start(Duration::from_secs(5)).await;
    let dir = tempfile::tempdir().unwrap();
    fake.runtime.add_image("busybox");
    let sandbox_config = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: "web".into(),
            namespace: "default".into(),
            uid: "uid-1".into(),
            attempt: 0,
        }),
        log_directory: dir.path().join("pods").to_string_lossy().into_owned(),
        ..Default::default()
    };
    let sandbox = fake
        .client
        .run_pod_sandbox(sandbox_config.clone(), "")
        .await
        .unwrap();
    let config = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        }),
        log_path: "app/0.log".into(),
        ..Default::default()
    };
    let id = fake
        .client
        .create_container(&sandbox, config, sandbox_config)
        .await
        .unwrap();
    fake.client.start_container(&id).await.unwrap();
    let log = dir.path().join("pods/app/0.log");
    std::fs::write(&log, LINES).unwrap();

    let state = ServerState::for_tests(fake.client.clone());
    let mut pod = Pod::default();
    pod.metadata.name = Some("web".into());
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some("uid-1".into());
    pod.spec = Some(PodSpec {
        containers: vec![Container {
            name: "app".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let status = PodStatus {
        container_statuses: Some(vec![ContainerStatus {
            name: "app".into(),
            container_id: Some(format!("containerd://{id}")),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    };
    state.status.set("uid-1", Arc::new(pod), status);

    let varlog = dir.path().join("varlog");
    std::fs::create_dir_all(varlog.join("pods/x")).unwrap();
    std::fs::write(varlog.join("syslog"), "node log line\n").unwrap();
    std::fs::write(varlog.join("a <b>.log"), "odd name\n").unwrap();
    let router = routes_with_root(varlog).with_state(state);
    Bed {
        fake,
        router,
        container_id: id,
        log,
        dir,
    }
}

async fn get(router: &Router, uri: &str) -> (StatusCode, axum::http::HeaderMap, String) {
    let req = Request::get(uri).body(Body::empty()).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), router.clone().oneshot(req))
        .await
        .expect("no answer within 10s")
        .unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = tokio::time::timeout(Duration::from_secs(10), axum::body::to_bytes(body, 1 << 20))
        .await
        .expect("body not finished within 10s")
        .unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

#[tokio::test]
async fn container_log_content() {
    let b = bed().await;
    let (status, headers, body) = get(&b.router, "/containerLogs/default/web/app").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(headers[header::CONTENT_TYPE], "text/plain");
    assert_eq!(body, "hello\nworld\n");

    let (status, _, body) = get(
        &b.router,
        "/containerLogs/default/web/app?tailLines=2&timestamps=true&limitBytes=40",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        "2024-01-01T00:00:02.000000000Z wor2024-01-01T00:00:02.000000000Z ld\n"[..40]
    );

    let (_, _, body) = get(
        &b.router,
        "/containerLogs/default/web/app?sinceTime=2024-01-01T00:00:02Z",
    )
    .await;
    assert_eq!(body, "world\n");
}

#[tokio::test]
async fn unknown_pod_or_container_is_404() {
    let b = bed().await;
    let (status, _, body) = get(&b.router, "/containerLogs/default/nope/app").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, "pod \"nope\" does not exist\n");
    let (status, _, body) = get(&b.router, "/containerLogs/other/web/app").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _, body) = get(&b.router, "/containerLogs/default/web/db").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, "container \"db\" not found in pod \"web\"\n");
}

#[tokio::test]
async fn bad_parameters() {
    let b = bed().await;
    for (query, want) in [
        ("tailLines=ten", StatusCode::BAD_REQUEST),
        ("sinceTime=yesterday", StatusCode::BAD_REQUEST),
        ("limitBytes=", StatusCode::BAD_REQUEST),
        ("tailLines=-1", StatusCode::UNPROCESSABLE_ENTITY),
        ("limitBytes=0", StatusCode::UNPROCESSABLE_ENTITY),
        ("sinceSeconds=0", StatusCode::UNPROCESSABLE_ENTITY),
        (
            "sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("stream=Stdout", StatusCode::BAD_REQUEST),
        ("previous=true", StatusCode::BAD_REQUEST),
    ] {
        let (status, _, body) = get(
            &b.router,
            &format!("/containerLogs/default/web/app?{query}"),
        )
        .await;
        assert_eq!(status, want, "{query}: {body}");
        assert!(!body.trim().is_empty(), "{query}: no message");
    }
    let (_, _, body) = get(&b.router, "/containerLogs/default/web/app?previous=1").await;
    assert_eq!(
        body,
        "previous terminated container \"app\" in pod \"web\" not found\n"
    );
}

#[tokio::test]
async fn runtime_without_the_container_is_a_bad_request() {
    let b = bed().await;
    b.fake
        .runtime
        .fail_next("ContainerStatus", tonic::Status::not_found("gone"));
    let (status, _, body) = get(&b.router, "/containerLogs/default/web/app").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        format!(
            "unable to retrieve container logs for containerd://{}\n",
            b.container_id
        )
    );
}

#[tokio::test]
async fn a_missing_log_file_is_a_bad_request() {
    let b = bed().await;
    std::fs::remove_file(&b.log).unwrap();
    let (status, _, body) = get(&b.router, "/containerLogs/default/web/app").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.starts_with("failed to open log file"), "{body}");
}

async fn next(
    s: &mut axum::body::BodyDataStream,
) -> Option<Result<axum::body::Bytes, axum::Error>> {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("nothing within 5s")
}

#[tokio::test]
async fn follow_streams_until_the_container_exits() {
    let b = bed().await;
    let req = Request::get("/containerLogs/default/web/app?follow=true")
        .body(Body::empty())
        .unwrap();
    let resp = b.router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body().into_data_stream();
    let first = next(&mut body).await.unwrap().unwrap();
    assert_eq!(&first[..], b"hello\nworld\n");

    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&b.log)
        .unwrap();
    std::io::Write::write_all(&mut f, b"2024-01-01T00:00:03Z stdout F more\n").unwrap();
    let more = next(&mut body).await.unwrap().unwrap();
    assert_eq!(&more[..], b"more\n");

    assert!(b.fake.runtime.exit_container(&b.container_id, 0));
    assert!(
        next(&mut body).await.is_none(),
        "the stream goes on after the container exited"
    );
    drop(b.dir);
}

#[tokio::test]
async fn node_logs_listing_and_files() {
    let b = bed().await;
    let (status, headers, body) = get(&b.router, "/logs/").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
    assert_eq!(
        body,
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n\
         <a href=\"a%20%3Cb%3E.log\">a &lt;b&gt;.log</a>\n\
         <a href=\"pods/\">pods/</a>\n\
         <a href=\"syslog\">syslog</a>\n\
         </pre>\n"
    );
    let (status, headers, body) = get(&b.router, "/logs/syslog").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "node log line\n");
    assert_eq!(headers[header::CONTENT_TYPE], "text/plain; charset=utf-8");
    assert_eq!(headers[header::CONTENT_LENGTH], "14");

    let (status, headers, _) = get(&b.router, "/logs/pods?x=1").await;
    assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(headers[header::LOCATION], "pods/?x=1");
    let (status, headers, _) = get(&b.router, "/logs/syslog/").await;
    assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(headers[header::LOCATION], "../syslog");
    let (status, headers, _) = get(&b.router, "/logs").await;
    assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(headers[header::LOCATION], "/logs/");
    let (status, _, body) = get(&b.router, "/logs/pods/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("<a href=\"x/\">x/</a>"), "{body}");
    let (status, _, body) = get(&b.router, "/logs/missing.log").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, "404 page not found\n");
}

#[tokio::test]
async fn node_logs_never_leave_the_root() {
    let b = bed().await;
    let varlog = b.dir.path().join("varlog");
    std::fs::write(b.dir.path().join("secret"), "top secret\n").unwrap();
    std::os::unix::fs::symlink(b.dir.path().join("secret"), varlog.join("out")).unwrap();
    std::os::unix::fs::symlink(varlog.join("syslog"), varlog.join("in")).unwrap();
    std::os::unix::fs::symlink(b.dir.path(), varlog.join("updir")).unwrap();

    for uri in [
        "/logs/../secret",
        "/logs/pods/../../secret",
        "/logs/%2e%2e/secret",
        "/logs/pods/%2E%2E%2F..%2Fsecret",
    ] {
        let (status, _, body) = get(&b.router, uri).await;
        assert!(
            status == StatusCode::NOT_FOUND || status == StatusCode::BAD_REQUEST,
            "{uri}: {status}"
        );
        assert!(!body.contains("top secret"), "{uri} escaped");
    }
    for uri in ["/logs/out", "/logs/updir/secret", "/logs/updir/"] {
        let (status, _, body) = get(&b.router, uri).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri}: {body}");
        assert!(!body.contains("top secret"));
    }
    let (status, _, body) = get(&b.router, "/logs/in").await;
    assert_eq!(status, StatusCode::OK, "a symlink inside the root is fine");
    assert_eq!(body, "node log line\n");
}

#[tokio::test]
async fn large_file_is_streamed_whole() {
    let b = bed().await;
    let big: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(b.dir.path().join("varlog/big.log"), &big).unwrap();
    let req = Request::get("/logs/big.log").body(Body::empty()).unwrap();
    let resp = b.router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut chunks = 0;
    let mut got = Vec::new();
    let mut s = resp.into_body().into_data_stream();
    while let Some(c) = s.next().await {
        chunks += 1;
        got.extend_from_slice(&c.unwrap());
    }
    assert!(chunks > 1, "sent in one piece");
    assert_eq!(got.len(), big.len());
    assert!(Path::new(&b.log).exists());
}
