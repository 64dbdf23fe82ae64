//! Image and container garbage collection on the test bed's real containerd. The collectors'
//! periods (5 min, 1 min upstream) are shortened through the kubelet's test-only environment
//! variables so a pass comes within seconds.
//!
//! The image test removes every image of the test containerd that no container uses while it
//! runs (the bed's busybox is in use, its pause image is the sandbox image): run it on a
//! containerd of your own (hack/testbed/containerd.sh start NAME).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const UNUSED_IMAGE: &str = "registry.test/krs-gc-unused:1";
const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

fn ctr(args: &[&str]) -> String {
    let sock = containerd_socket();
    let out = Command::new("ctr")
        .args(["--address", &sock, "-n", "k8s.io"])
        .args(args)
        .output()
        .expect("ctr");
    assert!(
        out.status.success(),
        "ctr {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn image_names() -> BTreeSet<String> {
    ctr(&["images", "ls", "-q"])
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Builds a one-file image nothing uses and imports it under `UNUSED_IMAGE`.
fn import_unused_image(dir: &Path) {
    let root = dir.join("image-root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("hello"), "unused\n").unwrap();
    let tar = dir.join("unused.tar");
    let status = Command::new("python3")
        .arg(repo_root().join("hack/testbed/oci_image.py"))
        .args(["--root", &root.to_string_lossy()])
        .args(["--out", &tar.to_string_lossy()])
        .args(["--name", UNUSED_IMAGE])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("oci_image.py");
    assert!(status.success(), "oci_image.py failed");
    ctr(&["images", "import", &tar.to_string_lossy()]);
    assert!(image_names().contains(UNUSED_IMAGE));
}

/// The pod's containers (not its sandbox) in containerd: (id, running).
fn pod_containers(uid: &str) -> Vec<(String, bool)> {
    let filter = format!(
        "labels.\"io.kubernetes.pod.uid\"=={uid},labels.\"io.cri-containerd.kind\"==container"
    );
    let running = running_tasks();
    ctr(&["containers", "ls", "-q", &filter])
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|id| (id.to_string(), running.iter().any(|r| r == id)))
        .collect()
}

fn metric(k: &Kubelet, series: &str) -> Option<f64> {
    let (code, body) = http_get(k.ro_port, "/metrics")?;
    assert_eq!(code, 200);
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

fn uid_of(pod: &serde_json::Value) -> String {
    pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn image_gc_removes_an_unused_image_and_keeps_used_ones() {
    let _g = serial();
    let mut k = Kubelet::new("gc-images");
    import_unused_image(k.dir.path());
    // Any usage is over a 1% threshold, so every pass tries to free space; images stay at
    // least 15 s, long enough for the pod below to start using its image. A drop-in, so it
    // applies over the harness's own (which turns the image collector off).
    let drop_in = k.drop_ins.join("50-image-gc.conf");
    std::fs::write(
        &drop_in,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\n\
         imageMinimumGCAge: 15s\n",
    )
    .unwrap();
    k.envs
        .push(("KUBELET_RS_TEST_IMAGE_GC_PERIOD".into(), "3s".into()));
    k.write_manifest(
        "user.yaml",
        &pod_yaml("user", "Always", 2, "exec sleep 3600"),
    );
    let started = Instant::now();
    k.start();
    k.wait_pod("user", "running", Duration::from_secs(60), |p| {
        !container_status(p, "main")["state"]["running"].is_null()
    });
    // Nothing goes before it is 15 s old.
    assert!(image_names().contains(UNUSED_IMAGE));
    let gone = wait_for_opt(Duration::from_secs(45), || {
        (!image_names().contains(UNUSED_IMAGE)).then_some(())
    });
    assert!(
        gone.is_some(),
        "the unused image is still there; kubelet log:\n{}",
        tail(&k.log(), 60)
    );
    assert!(
        started.elapsed() >= Duration::from_secs(15),
        "removed before imageMinimumGCAge"
    );
    let names = image_names();
    assert!(
        names.contains(BUSYBOX),
        "the running pod's image was removed"
    );
    assert!(names.contains(PAUSE_IMAGE), "the sandbox image was removed");
    let counted = metric(
        &k,
        "kubelet_image_garbage_collected_total{reason=\"space\"}",
    );
    assert!(counted >= Some(1.0), "metric: {counted:?}");
    // The disk cannot get down to 0% used: the shortfall is a node event.
    let log = k.log();
    assert!(
        log.contains("FreeDiskSpaceFailed")
            && log.contains("Failed to garbage collect required amount of images"),
        "{}",
        tail(&log, 40)
    );
    // The pod's removal must not cost the bed its busybox: the collector goes off first.
    k.stop();
    std::fs::remove_file(&drop_in).unwrap();
    k.cleanup();
    assert!(image_names().contains(BUSYBOX));
}

#[test]
fn dead_containers_are_collected_and_logs_outlive_them() {
    let _g = serial();
    let mut k = Kubelet::new("gc-containers");
    // A pod folder no pod owns (removed while the kubelet was down) goes once it starts.
    let orphan = k.root_dir.join("pods/00000000-0000-0000-0000-00000000dead");
    std::fs::create_dir_all(orphan.join("volumes/kubernetes.io~empty-dir")).unwrap();
    std::fs::write(orphan.join("etc-hosts"), "127.0.0.1 localhost\n").unwrap();
    k.envs
        .push(("KUBELET_RS_TEST_CONTAINER_GC_PERIOD".into(), "2s".into()));
    k.write_manifest(
        "crash.yaml",
        &pod_yaml("crash", "Always", 2, "echo crashing; exit 1"),
    );
    k.write_manifest(
        "steady.yaml",
        &pod_yaml("steady", "Always", 2, "echo steady-output; exec sleep 3600"),
    );
    k.start();
    wait_for(
        Duration::from_secs(15),
        "the orphaned pod folder to go",
        || (!orphan.exists()).then_some(()),
    );

    // A crash-looping container keeps one dead attempt (maximum-dead-containers-per-container
    // 1) beside the current one, however often it restarts.
    let crash = k.wait_pod("crash", "two restarts", Duration::from_secs(90), |p| {
        container_status(p, "main")["restartCount"].as_u64() >= Some(2)
    });
    let crash_uid = uid_of(&crash);
    wait_for(
        Duration::from_secs(15),
        "dead attempts to be collected",
        || {
            let all = pod_containers(&crash_uid);
            let dead = all.iter().filter(|(_, running)| !running).count();
            (dead <= 1 && all.len() <= 2).then_some(())
        },
    );
    // The kept attempt still gives the status its last state.
    let crash = k.pod("crash").expect("crash pod");
    assert!(
        container_status(&crash, "main")["lastState"]["terminated"].is_object(),
        "{crash}"
    );

    // A removed static pod: its logs stay as long as any of its containers does, and both
    // are gone soon after.
    let steady = k.wait_pod("steady", "running", Duration::from_secs(60), |p| {
        !container_status(p, "main")["state"]["running"].is_null()
    });
    let uid = uid_of(&steady);
    let log_dir = k.pod_log_dir(&steady);
    let log = log_dir.join("main/0.log");
    wait_for(Duration::from_secs(10), "the pod's output", || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.contains("steady-output").then_some(())
    });
    assert_eq!(pod_containers(&uid).len(), 1);
    k.remove_manifest("steady.yaml");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The folder first, then the containers: once the folder is seen gone, a later
        // listing must find no container left.
        let dir_present = log_dir.exists();
        let containers = pod_containers(&uid);
        if !dir_present {
            assert!(
                containers.is_empty(),
                "log folder removed while containers remain: {containers:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pod not collected: containers {containers:?}, log dir present\n{}",
            tail(&k.log(), 40)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    k.cleanup();
}
