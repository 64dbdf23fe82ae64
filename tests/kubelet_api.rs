//! The kubelet API end to end: kubectl logs, exec, attach and port-forward, and the stats and
//! metrics endpoints, all through the real API server, which reaches this kubelet on its
//! authenticated port with its kubelet-client certificate.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

const API_NODE: &str = "krs-api-node";

fn run(args: &[&str]) -> Output {
    let out = kubectl(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl");
    eprintln!(
        "kubectl {}: {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout_of(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "kubectl {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Reads `child`'s stdout lines until `done` says so or `timeout` passes; then kills it.
fn read_until(
    mut child: Child,
    timeout: Duration,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + timeout;
    let mut lines = Vec::new();
    while !done(&lines) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

/// A restart-always static pod running `script`, with `extra` lines for its container.
fn static_pod(name: &str, script: &str, extra: &str) -> String {
    pod_yaml(name, "Always", 1, script) + extra
}

fn mirror(name: &str) -> String {
    format!("{name}-{API_NODE}")
}

/// The API server's own client certificate for kubelets, to call the kubelet directly.
fn kubelet_client_cert() -> (String, String) {
    let env = cluster_env();
    let pki = format!("{}/pki", env["KRS_CLUSTER_DIR"]);
    (
        format!("{pki}/apiserver-kubelet-client.crt"),
        format!("{pki}/apiserver-kubelet-client.key"),
    )
}

/// (status code, seconds taken) of a GET straight to the kubelet's port.
fn kubelet_get(port: u16, path: &str) -> (u16, f64) {
    let (cert, key) = kubelet_client_cert();
    let started = Instant::now();
    let out = Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "20",
        ])
        .args(["--cert", &cert, "--key", &key])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl");
    let code = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (code, started.elapsed().as_secs_f64())
}

fn restarts(p: &Pod) -> i32 {
    first_status(p).map_or(0, |c| c.restart_count)
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_exec_attach_port_forward_and_stats() {
    let client = admin_client().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut k = Kubelet::new("api");
    k.write_manifest(
        "talker.yaml",
        &static_pod(
            "talker",
            "i=0; while true; do i=$((i+1)); echo line-$i; sleep 1; done",
            "",
        ),
    );
    k.write_manifest(
        "crasher.yaml",
        &static_pod("crasher", "echo crash-run; sleep 2; exit 1", ""),
    );
    k.write_manifest(
        "web.yaml",
        &static_pod(
            "web",
            "mkdir -p /www && echo hello-from-httpd > /www/index.html && exec httpd -f -p 8080 -h /www",
            "    ports:\n    - containerPort: 8080\n",
        ),
    );
    let auth = webhook_auth_flags();
    k.start_as_node(
        API_NODE,
        &auth.iter().map(String::as_str).collect::<Vec<_>>(),
    );

    for name in ["talker", "web"] {
        let full = mirror(name);
        wait_async(
            Duration::from_secs(90),
            &format!("{full} running"),
            || async { pods.get_opt(&full).await.ok().flatten().filter(running) },
        )
        .await;
    }
    wait_async(Duration::from_secs(90), "crasher restarted", || async {
        pods.get_opt(&mirror("crasher"))
            .await
            .ok()
            .flatten()
            .filter(|p| restarts(p) >= 1)
    })
    .await;
    let talker = mirror("talker");
    // Let a few lines accumulate.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // kubectl logs, with its options.
    let all = stdout_of(&["logs", &talker]);
    assert!(all.lines().any(|l| l == "line-1"), "{all}");
    let tail = stdout_of(&["logs", &talker, "--tail=2"]);
    assert_eq!(tail.lines().count(), 2, "{tail}");
    assert!(tail.lines().all(|l| l.starts_with("line-")), "{tail}");
    let stamped = stdout_of(&["logs", &talker, "--timestamps", "--tail=1"]);
    let (ts, text) = stamped.trim().split_once(' ').expect("timestamped line");
    assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{stamped}");
    assert!(text.starts_with("line-"), "{stamped}");
    let since = stdout_of(&["logs", &talker, "--since=1h"]);
    assert!(since.lines().any(|l| l == "line-1"), "{since}");
    let recent = stdout_of(&["logs", &talker, "--since=2s"]);
    assert!(
        !recent.lines().any(|l| l == "line-1"),
        "--since=2s returned the first line: {recent}"
    );
    let follow = kubectl(&["logs", "-f", "--tail=1", &talker])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let followed = read_until(follow, Duration::from_secs(15), |l| l.len() >= 3);
    assert!(followed.len() >= 3, "follow gave {followed:?}");
    let previous = stdout_of(&["logs", &mirror("crasher"), "--previous"]);
    assert!(previous.contains("crash-run"), "{previous}");

    // kubectl exec: output, stdin, exit codes.
    let hi = stdout_of(&["exec", &talker, "--", "echo", "hi"]);
    assert_eq!(hi.trim(), "hi");
    let mut cat = kubectl(&["exec", "-i", &talker, "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    cat.stdin
        .take()
        .unwrap()
        .write_all(b"from-stdin\n")
        .unwrap();
    let out = cat.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "from-stdin");
    let failed = run(&["exec", &talker, "--", "sh", "-c", "exit 3"]);
    assert_eq!(failed.status.code(), Some(3));

    // kubectl attach sees the running process's output.
    let attach = kubectl(&["attach", &talker, "-c", "main"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let attached = read_until(attach, Duration::from_secs(20), |l| {
        l.iter().any(|x| x.starts_with("line-"))
    });
    assert!(
        attached.iter().any(|x| x.starts_with("line-")),
        "attach gave {attached:?}"
    );

    // kubectl port-forward to the pod's httpd.
    let mut forward = kubectl(&["port-forward", &format!("pod/{}", mirror("web")), ":8080"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(forward.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    // "Forwarding from 127.0.0.1:NNNNN -> 8080"
    let local: u16 = first
        .split_whitespace()
        .nth(2)
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("port-forward said {first:?}"));
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", local)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut page = String::new();
    let _ = conn.read_to_string(&mut page);
    let _ = forward.kill();
    let _ = forward.wait();
    assert!(page.contains("hello-from-httpd"), "{page}");

    // Stats and metrics through the API server's node proxy.
    let summary: serde_json::Value = serde_json::from_str(&stdout_of(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{API_NODE}/proxy/stats/summary"),
    ]))
    .unwrap();
    assert_eq!(summary["node"]["nodeName"], API_NODE);
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap_or(0)
            > 0
    );
    let talker_stats = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == talker.as_str())
        .unwrap_or_else(|| panic!("no stats for {talker}: {summary}"));
    assert_eq!(talker_stats["containers"][0]["name"], "main");
    let resource = stdout_of(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{API_NODE}/proxy/metrics/resource"),
    ]);
    assert!(
        resource
            .lines()
            .any(|l| l.starts_with("container_memory_working_set_bytes{")
                && l.contains(&format!("pod=\"{talker}\""))),
        "{resource}"
    );
    let metrics = stdout_of(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{API_NODE}/proxy/metrics"),
    ]);
    assert!(metrics.contains("kubelet_running_pods"), "{metrics}");
    // The API server's calls above were counted by path, stream ones as long-running.
    let counted = |path: &str, long: &str| {
        metrics.lines().any(|l| {
            l.starts_with("kubelet_http_requests_total{")
                && l.contains(&format!("path=\"{path}\""))
                && l.contains("server_type=\"readwrite\"")
                && l.contains(&format!("long_running=\"{long}\""))
        })
    };
    assert!(counted("containerLogs", "false"), "{metrics}");
    assert!(counted("exec", "true"), "{metrics}");

    // A missing pod or container is a 404, at once.
    for path in [
        "/containerLogs/default/no-such-pod/main",
        &format!("/containerLogs/default/{talker}/no-such-container"),
        "/exec/default/no-such-pod/main?command=true&output=1",
    ] {
        let (code, took) = kubelet_get(k.port, path);
        assert_eq!(code, 404, "{path}");
        assert!(took < 5.0, "{path} took {took}s");
    }

    k.cleanup();
}
