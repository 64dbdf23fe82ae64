//! Ephemeral containers through the real API server (v1.20.2 with the `EphemeralContainers`
//! gate), on our kubelet joined as a node. Path: the API only; static pods cannot have them.
//!
//! - `kubectl debug -i --target=app` (kubectl 1.20 from the upstream build: kubectl 1.32 sends
//!   the `pods/ephemeralcontainers` request its own way and then fails with `no kind
//!   "EphemeralContainers" is registered` on this apiserver's answer) adds a shell in the
//!   running pod and attaches to it: the shell runs in the pod's sandbox and in the app's
//!   process namespace (`ps` shows the app's `sleep`), its status is Running in
//!   `ephemeralContainerStatuses`, `kubectl exec` into it and `kubectl logs` of it work, and
//!   once it exits (code 3, in a restartPolicy Always pod) it stays Terminated, never
//!   restarted.
//! - A second one is added through the subresource itself (a PUT of the `EphemeralContainers`
//!   object with `kubectl replace --raw`), since `kubectl debug` has no flags for env or volume
//!   mounts: it gets its env var and the pod's emptyDir, and without a target sees only its
//!   own processes.
//! - One targeting a container that does not run (the finished init container) waits with
//!   `CreateContainerConfigError` "unable to find target container setup", as upstream's.
//! - `kubectl debug -it` in a terminal (script(1)) gets a shell with a TTY.
//! - A last one, still running, is stopped with the pod when the pod is deleted.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::DeleteParams;
use serde_json::json;

const NODE: &str = "eph-node";
const POD: &str = "eph-debug";

/// kubectl 1.20, the client that speaks this apiserver's `ephemeralcontainers` subresource.
fn kubectl_1_20(args: &[&str]) -> Command {
    let env = cluster_env();
    let mut cmd = Command::new(common::upstream::bin("kubectl"));
    cmd.arg(format!("--kubeconfig={}", env["KUBECONFIG"]))
        .arg("--request-timeout=30s")
        .arg("--namespace=default")
        .args(args);
    cmd
}

fn run_ok(mut cmd: Command) -> String {
    let out = cmd.output().expect("run kubectl");
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ephemeral_status(p: &Pod, name: &str) -> Option<ContainerStatus> {
    p.status
        .as_ref()?
        .ephemeral_container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == name)
        .cloned()
}

fn running(p: &Pod, name: &str) -> bool {
    ephemeral_status(p, name)
        .and_then(|s| s.state)
        .is_some_and(|st| st.running.is_some())
}

fn exit_code(p: &Pod, name: &str) -> Option<i32> {
    ephemeral_status(p, name)?
        .state?
        .terminated
        .map(|t| t.exit_code)
}

fn short_id(status: &ContainerStatus) -> String {
    let id = status.container_id.clone().expect("a container ID");
    id.split_once("://").map(|(_, id)| id.to_string()).unwrap()
}

/// The OCI spec containerd holds for a container, via its own CLI.
fn oci_spec(id: &str) -> serde_json::Value {
    let out = Command::new("ctr")
        .args(["--address", &containerd_socket(), "-n", "k8s.io"])
        .args(["containers", "info", id])
        .output()
        .expect("ctr containers info");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ctr info JSON");
    info["Spec"].clone()
}

/// What a child prints, line by line, collected in the background.
fn collect(stdout: impl std::io::Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

fn wait_line(lines: &Arc<Mutex<Vec<String>>>, timeout: Duration, f: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if lines.lock().unwrap().iter().any(|l| f(l)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "no such line within {timeout:?}: {:?}",
        lines.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_debug_runs_once_in_the_pod_and_target_namespace() {
    // Before anything starts: a missing kubectl 1.20 fails here, saying how to build it.
    common::upstream::bin("kubectl");
    let (_, pods) = default_pods(&[POD]).await;

    let mut k = Kubelet::started_as_node("ephemeral-containers", NODE);
    let pod: Pod = api_pod(json!({
        "metadata": {"name": POD},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "data", "emptyDir": {}}],
            "initContainers": [{
                "name": "setup",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["true"],
            }],
            "containers": [{
                "name": "app",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "echo from-app > /data/f && exec sleep 3600"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
        },
    }));
    create_pod(&pods, &pod).await;
    let app = wait_async(Duration::from_secs(60), "the app running", || async {
        let p = pods.get(POD).await.ok()?;
        let id = running_container_id(&p)?;
        Some((p, id))
    })
    .await;
    let (app_pod, app_id) = app;
    let app_id = app_id.split_once("://").unwrap().1.to_string();
    let pod_ip = app_pod.status.unwrap().pod_ip.expect("pod IP");

    // kubectl debug -i: creates the ephemeral container, waits until its status says Running
    // and attaches to its stdin/stdout.
    let mut debug = kubectl_1_20(&[
        "debug",
        POD,
        "-i",
        "-c",
        "dbg",
        "--target=app",
        &format!("--image={BUSYBOX}"),
        "--image-pull-policy=IfNotPresent",
        "--",
        "sh",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("kubectl debug");
    let mut shell = debug.stdin.take().unwrap();
    let attached = collect(debug.stdout.take().unwrap());
    // Drained so kubectl never blocks on it.
    let _stderr = collect(debug.stderr.take().unwrap());
    shell.write_all(b"echo ready-$((6*7))\n").unwrap();
    wait_line(&attached, Duration::from_secs(90), |l| l == "ready-42");

    let p = pods.get(POD).await.unwrap();
    let dbg = ephemeral_status(&p, "dbg").expect("dbg in ephemeralContainerStatuses");
    assert!(running(&p, "dbg"), "{dbg:?}");
    assert_eq!(dbg.image, BUSYBOX);
    assert!(dbg.image_id.contains("sha256:"), "{dbg:?}");
    assert_eq!((dbg.restart_count, dbg.ready), (0, false));
    let dbg_id = short_id(&dbg);

    // The pod's sandbox (the same one as the app's), and the app's pid namespace.
    let (app_spec, dbg_spec) = (oci_spec(&app_id), oci_spec(&dbg_id));
    let sandbox = |s: &serde_json::Value| s["annotations"]["io.kubernetes.cri.sandbox-id"].clone();
    assert!(sandbox(&dbg_spec).is_string(), "{dbg_spec}");
    assert_eq!(sandbox(&dbg_spec), sandbox(&app_spec));
    let pid_ns = |s: &serde_json::Value| {
        s["linux"]["namespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["type"] == "pid")
            .cloned()
    };
    let dbg_pid_ns = pid_ns(&dbg_spec).expect("a pid namespace");
    assert!(
        dbg_pid_ns["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("/ns/pid")),
        "joins the target's: {dbg_pid_ns}"
    );
    assert!(pid_ns(&app_spec).unwrap()["path"].is_null());

    // kubectl exec into it: the app's process is there, so is the pod's network.
    let ps = run_ok(kubectl_1_20(&[
        "exec", POD, "-c", "dbg", "--", "ps", "-o", "args",
    ]));
    assert!(ps.lines().any(|l| l.trim() == "sleep 3600"), "{ps}");
    let addrs = run_ok(kubectl_1_20(&[
        "exec", POD, "-c", "dbg", "--", "ip", "-o", "addr",
    ]));
    assert!(addrs.contains(&format!("inet {pod_ip}/")), "{addrs}");

    // Through the attached shell too, then it exits with 3. Stdin stays open until the
    // answer is in: containerd ends an attach whose stdin closes (no stdinOnce here).
    shell.write_all(b"ps -o args\n").unwrap();
    wait_line(&attached, Duration::from_secs(30), |l| {
        l.trim() == "sleep 3600"
    });
    shell.write_all(b"exit 3\n").unwrap();
    drop(shell);
    let deadline = Instant::now() + Duration::from_secs(60);
    while debug.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "kubectl debug did not return");
        std::thread::sleep(Duration::from_millis(200));
    }
    let ended = wait_async(Duration::from_secs(30), "dbg terminated", || async {
        let p = pods.get(POD).await.ok()?;
        exit_code(&p, "dbg").map(|_| p)
    })
    .await;
    assert_eq!(exit_code(&ended, "dbg"), Some(3));
    let logs = run_ok(kubectl_1_20(&["logs", POD, "-c", "dbg"]));
    assert!(
        logs.contains("ready-42") && logs.contains("sleep 3600"),
        "{logs}"
    );

    // Never restarted: well past the first crash-loop backoff (10 s) it is still the same
    // terminated container, and the runtime holds just that one.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let p = pods.get(POD).await.unwrap();
    let after = ephemeral_status(&p, "dbg").unwrap();
    assert_eq!(exit_code(&p, "dbg"), Some(3), "{after:?}");
    assert_eq!((short_id(&after), after.restart_count), (dbg_id.clone(), 0));
    assert!(!running_tasks().contains(&dbg_id));
    let app_now = p
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .clone();
    assert_eq!(app_now.restart_count, 0, "the app was left alone");

    // Through the subresource itself: env and the pod's volume, no target.
    let path = format!("/api/v1/namespaces/default/pods/{POD}/ephemeralcontainers");
    let mut object: serde_json::Value =
        serde_json::from_str(&run_ok(kubectl_1_20(&["get", "--raw", &path]))).unwrap();
    object["ephemeralContainers"]
        .as_array_mut()
        .unwrap()
        .push(json!({
            "name": "env-check",
            "image": BUSYBOX,
            "imagePullPolicy": "IfNotPresent",
            "terminationMessagePolicy": "File",
            "env": [{"name": "GREETING", "value": "hello"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}],
            "command": ["sh", "-c",
                "echo \"$GREETING $(cat /data/f) sees-app=$(ps -o args | grep -c '[s]leep 3600')\""],
        }));
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), object.to_string()).unwrap();
    let file_arg = file.path().display().to_string();
    run_ok(kubectl_1_20(&["replace", "--raw", &path, "-f", &file_arg]));
    wait_async(Duration::from_secs(60), "env-check terminated", || async {
        let p = pods.get(POD).await.ok()?;
        exit_code(&p, "env-check").filter(|c| *c == 0)
    })
    .await;
    let logs = run_ok(kubectl_1_20(&["logs", POD, "-c", "env-check"]));
    assert_eq!(logs.trim(), "hello from-app sees-app=0");

    // A target that does not run (the finished init container): the start fails as
    // upstream's, and the status says why.
    run_ok(kubectl_1_20(&[
        "debug",
        POD,
        "-c",
        "orphan",
        "--target=setup",
        &format!("--image={BUSYBOX}"),
        "--image-pull-policy=IfNotPresent",
        "--",
        "true",
    ]));
    let waiting = wait_async(Duration::from_secs(60), "orphan waiting", || async {
        let p = pods.get(POD).await.ok()?;
        let w = ephemeral_status(&p, "orphan")?.state?.waiting?;
        (w.reason.as_deref() == Some("CreateContainerConfigError")).then_some(w)
    })
    .await;
    assert_eq!(
        waiting.message.as_deref(),
        Some("unable to find target container setup")
    );

    // kubectl debug -it, the way a person runs it: script(1) gives kubectl a terminal, so the
    // container gets a TTY and the shell prompt and echo come through the attach.
    let env = cluster_env();
    let line = format!(
        "{} --kubeconfig={} --namespace=default debug {POD} -it -c tty \
         --image={BUSYBOX} --image-pull-policy=IfNotPresent --target=app -- sh",
        common::upstream::bin("kubectl").display(),
        env["KUBECONFIG"]
    );
    let mut tty = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script");
    let mut keys = tty.stdin.take().unwrap();
    let screen = collect(tty.stdout.take().unwrap());
    wait_async(Duration::from_secs(60), "tty running", || async {
        running(&pods.get(POD).await.ok()?, "tty").then_some(())
    })
    .await;
    // The attach may begin a moment after Running: type until the answer shows.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !screen
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("tty-42 /dev/pts/"))
    {
        assert!(
            Instant::now() < deadline,
            "no answer: {:?}",
            screen.lock().unwrap()
        );
        keys.write_all(b"echo tty-$((6*7)) $(tty)\r").unwrap();
        std::thread::sleep(Duration::from_secs(1));
    }
    keys.write_all(b"exit\r").unwrap();
    let p = wait_async(Duration::from_secs(30), "tty terminated", || async {
        let p = pods.get(POD).await.ok()?;
        exit_code(&p, "tty").map(|_| p)
    })
    .await;
    assert_eq!(exit_code(&p, "tty"), Some(0));
    let _ = tty.kill();
    let _ = tty.wait();

    // One still running when the pod is deleted is stopped with it.
    run_ok(kubectl_1_20(&[
        "debug",
        POD,
        "-c",
        "sleeper",
        &format!("--image={BUSYBOX}"),
        "--image-pull-policy=IfNotPresent",
        "--",
        "sleep",
        "3600",
    ]));
    let p = wait_async(Duration::from_secs(60), "sleeper running", || async {
        let p = pods.get(POD).await.ok()?;
        running(&p, "sleeper").then_some(p)
    })
    .await;
    let sleeper_id = short_id(&ephemeral_status(&p, "sleeper").unwrap());
    assert!(running_tasks().contains(&sleeper_id));
    let _ = pods.delete(POD, &DeleteParams::default()).await;
    wait_async(Duration::from_secs(60), "the pod to go", || async {
        pods.get_opt(POD).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(
        !running_tasks().contains(&sleeper_id),
        "the debug container outlived its pod"
    );
    k.cleanup();
}
