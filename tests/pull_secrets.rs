//! imagePullSecrets reach the registry: a pod's docker-config secret becomes the CRI pull's
//! AuthConfig, which containerd presents to a registry on loopback that demands Basic auth.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use common::*;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const NODE: &str = "krs-pull-node";
const SECRET: &str = "krs-registry-creds";
const POD: &str = "krs-private-image";
const USER: &str = "krs-user";
const PASSWORD: &str = "krs-pass";

/// A registry that wants Basic auth for everything and has no images: enough to see which
/// credentials a pull presents. Records each request's path and Authorization header.
/// (path, Authorization header) of every request the registry got.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

fn start_registry() -> (u16, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind registry");
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string();
            let mut auth = String::new();
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line.trim().is_empty() => break,
                    Ok(_) => {
                        if let Some((k, v)) = line.split_once(':')
                            && k.eq_ignore_ascii_case("authorization")
                        {
                            auth = v.trim().to_string();
                        }
                    }
                }
            }
            record.lock().unwrap().push((path, auth.clone()));
            let expected = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
            );
            let reply = if auth == expected {
                let body = r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"no such image"}]}"#;
                format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"krs\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
            };
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    (port, seen)
}

/// Tells the test bed's containerd to reach this registry over plain HTTP; removed on drop.
struct HostsEntry(PathBuf);

impl HostsEntry {
    fn plain_http(port: u16) -> Self {
        let sock = containerd_socket();
        let dir = std::path::Path::new(&sock)
            .parent()
            .expect("socket dir")
            .join("certs.d")
            .join(format!("127.0.0.1:{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("http://127.0.0.1:{port}");
        std::fs::write(
            dir.join("hosts.toml"),
            format!(
                "server = \"{url}\"\n\n[host.\"{url}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
            ),
        )
        .unwrap();
        HostsEntry(dir)
    }
}

impl Drop for HostsEntry {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pull_secret_credentials_reach_the_registry() {
    let (client, pods) = default_pods(&[]).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let _ = pods
        .delete(POD, &DeleteParams::default().grace_period(0))
        .await;
    let _ = secrets.delete(SECRET, &DeleteParams::default()).await;

    let (port, seen) = start_registry();
    let _hosts = HostsEntry::plain_http(port);
    let registry = format!("127.0.0.1:{port}");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let config = json!({"auths": {registry.clone(): {"auth": auth}}}).to_string();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": SECRET},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let mut k = Kubelet::started_as_node("pull-secrets", NODE);
    let pod: Pod = api_pod(json!({
        "metadata": {"name": POD},
        "spec": {
            "nodeName": NODE,
            "imagePullSecrets": [{"name": SECRET}],
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": format!("{registry}/private/app:1")}],
        },
    }));
    create_pod(&pods, &pod).await;

    let expected = format!("Basic {auth}");
    wait_async(
        Duration::from_secs(60),
        "the registry to see the secret's credentials",
        || async {
            let hit = seen
                .lock()
                .unwrap()
                .iter()
                .any(|(path, a)| path.starts_with("/v2/private/app/") && *a == expected);
            hit.then_some(())
        },
    )
    .await;
    // The image does not exist, so the pull still fails, as the pod's status says.
    let reason = wait_async(Duration::from_secs(60), "ErrImagePull", || async {
        let p = pods.get(POD).await.ok()?;
        waiting_reason(&p).filter(|r| r == "ErrImagePull" || r == "ImagePullBackOff")
    })
    .await;
    assert!(reason.contains("Image"), "{reason}");

    pods.delete(POD, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    secrets
        .delete(SECRET, &DeleteParams::default())
        .await
        .unwrap();
    k.cleanup();
}
