//! The pod-resources socket answers clients of other gRPC stacks with their default options:
//! Python's grpcio (grpc C-core) sends the percent-encoded socket path as `:authority`, which
//! an HTTP/2 server that checks authorities refuses. Upstream's kubelet answers it; so must we.
//!
//! The client runs in a virtual environment made by `hack/testbed/grpcio-venv.sh` (grpcio from
//! PyPI); `$KRS_GRPCIO_PYTHON` names its python when the test command made it already.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn grpcio_python() -> String {
    if let Ok(python) = std::env::var("KRS_GRPCIO_PYTHON")
        && std::path::Path::new(&python).exists()
    {
        return python;
    }
    let out = Command::new("bash")
        .arg(repo_root().join("hack/testbed/grpcio-venv.sh"))
        .output()
        .expect("running grpcio-venv.sh");
    assert!(
        out.status.success(),
        "grpcio-venv.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn python_grpcio_client_with_default_options_lists_the_pod() {
    let _g = serial();
    let python = grpcio_python();
    let mut k = Kubelet::new("podres-grpcio");
    k.write_manifest(
        "agent.yaml",
        &pod_yaml("monitored", "Always", 2, "exec sleep 3600"),
    );
    k.start();
    let pod = k.wait_pod("monitored", "running", Duration::from_secs(60), |p| {
        phase(p) == "Running"
    });
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();

    let socket = k.root_dir.join("pod-resources/kubelet.sock");
    let out = Command::new(&python)
        .arg(repo_root().join("tests/grpc/podresources_client.py"))
        .arg(repo_root())
        .arg(&socket)
        .args(["default", &name])
        .output()
        .expect("running the Python client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: Value = serde_json::from_str(&stdout).expect("client output is JSON");
    let entry = serde_json::json!({
        "namespace": "default",
        "name": name,
        "containers": ["main"],
    });
    let listed = reply["list"]
        .as_array()
        .unwrap_or_else(|| panic!("List failed: {reply}"));
    assert!(listed.contains(&entry), "pod missing from List: {reply}");
    assert_eq!(reply["get"], serde_json::json!([entry]), "Get: {reply}");
    assert_eq!(
        reply["allocatable"],
        serde_json::json!({"devices": 0}),
        "GetAllocatableResources: {reply}"
    );
    k.cleanup();
}
