//! Container log rotation against the real containerd: a chatty busybox container's log is
//! rotated every monitor interval once it passes `--container-log-max-size`; rotated files sit
//! next to it with upstream's names (older ones gzipped, the newest plain), never more than
//! `--container-log-max-files` in all; the current file stays small; /containerLogs keeps
//! serving fresh lines, and a follower reads across rotations without losing or repeating a
//! line; removing the pod takes the rotated files along. Through the test control plane,
//! `kubectl logs` shows the current file's lines, as upstream's kubelet serves them.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const MAX_SIZE: u64 = 64 * 1024;
const MAX_FILES: usize = 4;
const INTERVAL_SECS: u64 = 3;
/// The script prints at most this many lines a second (100, then a 0.1 s sleep).
const MAX_LINES_PER_SEC: u64 = 1000;
/// Longest line in the file: CRI prefix (timestamp, stream, tag) plus the text.
const MAX_LINE: u64 = 40 + 16 + 80;

const SCRIPT: &str = "i=0; pad=$(printf '%080d' 0); while true; do j=0; \
    while [ $j -lt 100 ]; do i=$((i+1)); j=$((j+1)); echo \"line-$i $pad\"; done; \
    sleep 0.1; done";

/// The rotated files of `log` that are in use, as upstream counts them: no `.tmp`, and no
/// plain file whose `.gz` already exists (a compression that is finishing).
fn rotated(log: &Path) -> Vec<String> {
    let dir = log.parent().unwrap();
    let prefix = format!("{}.", log.file_name().unwrap().to_string_lossy());
    let mut all: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    all.sort();
    let twins: Vec<String> = all.clone();
    all.retain(|n| !n.ends_with(".tmp") && !twins.contains(&format!("{n}.gz")));
    all
}

/// `<log>.YYYYMMDD-hhmmss` or the same with `.gz`.
fn well_named(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("0.log.") else {
        return false;
    };
    let stamp = rest.strip_suffix(".gz").unwrap_or(rest);
    stamp.len() == 15
        && stamp.as_bytes()[8] == b'-'
        && stamp
            .bytes()
            .enumerate()
            .all(|(i, b)| i == 8 || b.is_ascii_digit())
}

/// The `line-N` numbers in CRI-format (or plain) log text, in order.
fn numbers(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| {
            let at = l.find("line-")?;
            l[at + 5..].split_whitespace().next()?.parse().ok()
        })
        .collect()
}

fn container_logs(port: u16, query: &str) -> (u16, String) {
    https_get(
        port,
        &format!("/containerLogs/default/chatty-{NODE}/main?{query}"),
        &[],
    )
    .expect("GET /containerLogs")
}

#[test]
fn chatty_container_logs_rotate_and_stay_readable() {
    let _serial = serial();
    let mut k = Kubelet::new("logrotate");
    k.write_manifest("chatty.yaml", &pod_yaml("chatty", "Always", 1, SCRIPT));
    k.start_with(&[
        &format!("--container-log-max-size={}Ki", MAX_SIZE / 1024),
        &format!("--container-log-max-files={MAX_FILES}"),
        &format!("--container-log-monitor-interval={INTERVAL_SECS}s"),
        "--container-log-max-workers=2",
    ]);
    let pod = k.wait_pod("chatty", "running", Duration::from_secs(60), |p| {
        container_status(p, "main")["state"]["running"].is_object()
    });
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let log: PathBuf = k
        .pod_logs_dir
        .join(format!("default_chatty-{NODE}_{uid}/main/0.log"));

    // Watch the folder through several rotations.
    let bound = MAX_SIZE + (INTERVAL_SECS + 2) * MAX_LINES_PER_SEC * MAX_LINE;
    let mut seen = std::collections::BTreeSet::new();
    let mut settled = false;
    let mut largest = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && !(settled && seen.len() > MAX_FILES + 1) {
        let files = rotated(&log);
        assert!(
            files.len() < MAX_FILES,
            "more than {MAX_FILES} files with the current one: {files:?}"
        );
        assert!(files.iter().all(|f| well_named(f)), "{files:?}");
        if let Ok(m) = std::fs::metadata(&log) {
            largest = largest.max(m.len());
            assert!(
                m.len() < bound,
                "current log {} bytes, bound {bound}",
                m.len()
            );
        }
        seen.extend(files.iter().map(|f| f.trim_end_matches(".gz").to_string()));
        // Settled: full, the newest rotated file plain, the older ones compressed.
        if let Some((newest, older)) = files.split_last() {
            settled |= files.len() == MAX_FILES - 1
                && !newest.ends_with(".gz")
                && older.iter().all(|f| f.ends_with(".gz"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let files = rotated(&log);
    eprintln!(
        "rotations seen: {}, largest current log: {largest} bytes (bound {bound})",
        seen.len()
    );
    assert!(
        settled && seen.len() > MAX_FILES + 1,
        "rotations seen: {seen:?}, settled: {settled}, now: {files:?}\nkubelet log tail:\n{}",
        tail(&k.log(), 40)
    );

    // A compressed rotation holds the container's earlier lines, in CRI format.
    let dir = log.parent().unwrap();
    let gz = files
        .iter()
        .find(|f| f.ends_with(".gz"))
        .expect("a compressed rotation");
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(dir.join(gz)).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let old = numbers(&text);
    assert!(!old.is_empty() && text.contains(" stdout F line-"), "{gz}");

    // /containerLogs reads the current file: lines newer than any rotated one, still coming.
    let newest_rotated = std::fs::read_to_string(dir.join(files.last().unwrap())).unwrap();
    let rotated_last = *numbers(&newest_rotated)
        .last()
        .expect("lines in the newest rotation");
    let (code, body) = container_logs(k.port, "tailLines=5");
    assert_eq!(code, 200, "{body}");
    let first = numbers(&body);
    assert_eq!(first.len(), 5, "{body}");
    assert!(
        first[0] > rotated_last,
        "{first:?} vs rotated {rotated_last}"
    );
    std::thread::sleep(Duration::from_secs(INTERVAL_SECS + 1));
    let (_, body) = container_logs(k.port, "tailLines=5");
    let later = numbers(&body);
    assert!(later.last() > first.last(), "{later:?} after {first:?}");

    // A follower goes from file to file as they rotate, losing and repeating nothing.
    let started = Instant::now();
    let followed = Command::new("curl")
        .args(["-sk", "--max-time", &(2 * INTERVAL_SECS + 2).to_string()])
        .arg(format!(
            "https://127.0.0.1:{}/containerLogs/default/chatty-{NODE}/main?follow=true&tailLines=1",
            k.port
        ))
        .output()
        .expect("curl");
    assert!(started.elapsed() >= Duration::from_secs(2 * INTERVAL_SECS));
    let lines = numbers(&String::from_utf8_lossy(&followed.stdout));
    assert!(
        lines.len() > (MAX_SIZE / MAX_LINE) as usize,
        "followed {} lines",
        lines.len()
    );
    let gaps: Vec<(u64, u64)> = lines
        .windows(2)
        .filter(|w| w[1] != w[0] + 1)
        .map(|w| (w[0], w[1]))
        .collect();
    assert!(
        gaps.is_empty(),
        "the follower skipped or repeated: {gaps:?}"
    );
    eprintln!(
        "followed lines {}..={} without a gap",
        lines.first().unwrap_or(&0),
        lines.last().unwrap_or(&0)
    );

    // Removing the pod removes its log folder, rotated files included.
    k.remove_manifest("chatty.yaml");
    let folder = dir.parent().unwrap().to_path_buf();
    wait_for(Duration::from_secs(60), "pod log folder removed", || {
        (!folder.exists()).then_some(())
    });
    k.cleanup();
}

/// Upstream checks these two when it builds its log manager, after connecting to the runtime.
#[test]
fn bad_rotation_settings_stop_the_kubelet_with_upstreams_message() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let sock = containerd_socket();
    for (flag, message) in [
        (
            "--container-log-max-files=1",
            "failed to initialize container log manager: invalid MaxFiles 1, must be > 1",
        ),
        (
            "--container-log-max-size=1500m",
            "failed to initialize container log manager: failed to parse container log max size \"1500m\": invalid max log size",
        ),
    ] {
        // `timeout` in case the kubelet wrongly starts: it must not run on.
        let out = Command::new("timeout")
            .arg("30")
            .arg(env!("CARGO_BIN_EXE_kubelet"))
            .args([
                &format!("--container-runtime-endpoint=unix://{sock}"),
                &format!("--root-dir={}", dir.path().join("root").display()),
                &format!(
                    "--cgroup-root={}",
                    std::env::var("KRS_IT_CGROUP_ROOT").unwrap_or_else(|_| "/krs-it".into())
                ),
                "--healthz-port=0",
                "--read-only-port=0",
                &format!("--port={}", free_port()),
                "--fail-swap-on=false",
                flag,
            ])
            .output()
            .expect("run kubelet");
        // The log quotes the error, escaping its quotes.
        let text = (String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout))
            .replace("\\\"", "\"");
        assert_eq!(out.status.code(), Some(1), "{flag}: {text}");
        assert!(text.contains(message), "{flag}: {text}");
    }
}

const API_NODE: &str = "krs-logrotate-node";

/// The current log of the static pod `chatty` on `node` under `pod_logs`, once the kubelet has
/// made it.
fn find_log(pod_logs: &Path, node: &str) -> PathBuf {
    wait_for(Duration::from_secs(90), "the chatty pod's log", || {
        std::fs::read_dir(pod_logs)
            .ok()?
            .flatten()
            .find(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("default_chatty-{node}_"))
            })
            .map(|e| e.path().join("main/0.log"))
            .filter(|p| p.exists())
    })
}

#[test]
fn kubectl_logs_shows_the_current_file_after_rotation() {
    let _serial = serial();
    let mut k = Kubelet::new("logrotate-api");
    k.write_manifest("chatty.yaml", &pod_yaml("chatty", "Always", 1, SCRIPT));
    let mut flags = webhook_auth_flags();
    flags.extend([
        format!("--container-log-max-size={}Ki", MAX_SIZE / 1024),
        format!("--container-log-max-files={MAX_FILES}"),
        format!("--container-log-monitor-interval={INTERVAL_SECS}s"),
    ]);
    k.start_as_node(
        API_NODE,
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let log = find_log(&k.pod_logs_dir, API_NODE);
    wait_for(Duration::from_secs(60), "two rotations", || {
        (rotated(&log).len() >= 2).then_some(())
    });
    let mirror = format!("chatty-{API_NODE}");
    wait_for(Duration::from_secs(60), "the mirror pod", || {
        let out = kubectl(&["get", "pod", &mirror]).output().ok()?;
        out.status.success().then_some(())
    });

    // The newest rotated file stays plain until the next rotation, seconds away.
    let files = rotated(&log);
    let newest = std::fs::read_to_string(log.parent().unwrap().join(files.last().unwrap()))
        .unwrap_or_default();
    let rotated_last = numbers(&newest).last().copied().unwrap_or(0);
    assert!(rotated_last > 0, "{files:?}");
    let out = kubectl(&["logs", &mirror, "--tail=5"])
        .output()
        .expect("kubectl logs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = numbers(&text);
    assert_eq!(shown.len(), 5, "{text}");
    assert!(
        shown[0] > rotated_last,
        "{shown:?} vs rotated {rotated_last}"
    );
    // The whole log is the current file only: it starts after the newest rotation.
    let out = kubectl(&["logs", &mirror]).output().expect("kubectl logs");
    let all = numbers(&String::from_utf8_lossy(&out.stdout));
    assert!(
        all.first().is_some_and(|n| *n > rotated_last),
        "first line {:?}, newest rotation ends at {rotated_last}",
        all.first()
    );
    eprintln!(
        "kubectl logs: lines {:?}..={:?}, newest rotated file ends at {rotated_last}",
        all.first(),
        all.last()
    );
    k.cleanup();
}
