//! Configuration errors end the process with a message that names the culprit.

mod common;

use std::process::Command;

fn kubelet(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubelet"))
        .args(args)
        .output()
        .expect("run kubelet");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn invalid_config_value_exits_non_zero_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 70000\n",
    )
    .unwrap();
    let (code, out) = kubelet(&[&format!("--config={}", cfg.display())]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("healthzPort"), "{out}");
}

#[test]
fn bad_tracing_endpoint_exits_non_zero_with_upstreams_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ntracing:\n  endpoint: https://collector:4317\n  samplingRatePerMillion: 2000000\n",
    )
    .unwrap();
    let (code, out) = kubelet(&[&format!("--config={}", cfg.display())]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("tracing.endpoint: Invalid value: \"https://collector:4317\": unsupported scheme: https."),
        "{out}"
    );
    assert!(
        out.contains("sampling rate per million must be less than or equal to one million"),
        "{out}"
    );
}

/// Upstream decodes leniently after a strict pass fails, so an unknown field is a warning that
/// names it, not a fatal error; here the run then fails on the missing runtime.
#[test]
fn unknown_config_field_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","syncFrequncy":"1m"}"#,
    )
    .unwrap();
    let (code, out) = kubelet(&[
        &format!("--config={}", cfg.display()),
        "--container-runtime-endpoint=unix:///nonexistent/krs.sock",
        &format!("--root-dir={}", dir.path().display()),
        "--runtime-request-timeout=2s",
    ]);
    assert_ne!(code, 0, "{out}");
    let warning = out
        .lines()
        .find(|l| l.contains("syncFrequncy"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(warning.starts_with('W'), "{warning}");
}

#[test]
fn unknown_flag_exits_non_zero_naming_it() {
    let (code, out) = kubelet(&["--no-such-flag=1"]);
    assert_ne!(code, 0);
    assert!(out.contains("no-such-flag"), "{out}");
}

#[test]
fn version_and_help_exit_zero() {
    let (code, out) = kubelet(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("Kubernetes v1."), "{out}");
    let (code, out) = kubelet(&["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--pod-manifest-path",
        "--container-runtime-endpoint",
        "--config",
        "--v",
    ] {
        assert!(out.contains(flag), "help lacks {flag}");
    }
}

/// `--version=raw` names the commit the binary was built from (e2e/run.sh records it with each
/// run), and says "dirty" when its sources differed from that commit.
#[test]
fn raw_version_names_the_commit_built_from() {
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let (code, out) = kubelet(&["--version=raw"]);
    assert_eq!(code, 0, "{out}");
    let Some(head) = git(&["rev-parse", "HEAD"]) else {
        // Built from a source tarball: nothing to name.
        assert!(out.contains("GitCommit:\"\""), "{out}");
        return;
    };
    assert!(out.contains(&format!("GitCommit:\"{head}\"")), "{out}");
    let changed = git(&[
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        "src",
        "proto",
        "build.rs",
        "Cargo.toml",
        "Cargo.lock",
    ])
    .expect("git status");
    let state = if changed.is_empty() { "clean" } else { "dirty" };
    assert!(out.contains(&format!("GitTreeState:\"{state}\"")), "{out}");
}

#[test]
fn unreachable_runtime_exits_non_zero_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = kubelet(&[
        "--container-runtime-endpoint=unix:///nonexistent/krs.sock",
        &format!("--root-dir={}", dir.path().display()),
        "--healthz-port=0",
        "--runtime-request-timeout=2s",
        "--fail-swap-on=false",
    ]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("/nonexistent/krs.sock"), "{out}");
}

/// failCgroupV1 (`--fail-cgroupv1`) refuses a cgroup v1 host with upstream's words, before the
/// runtime is even dialled; on a cgroup v2 host (the VM bed) the same run gets past it and
/// fails on the missing runtime instead.
#[test]
fn fail_cgroup_v1_refuses_a_cgroup_v1_host_only() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = kubelet(&[
        "--fail-cgroupv1=true",
        "--container-runtime-endpoint=unix:///nonexistent/krs.sock",
        &format!("--root-dir={}", dir.path().display()),
        "--runtime-request-timeout=2s",
    ]);
    assert_ne!(code, 0, "{out}");
    let refusal = "kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is in maintenance mode";
    let unified = common::cgroup_v2_host();
    assert_eq!(out.contains(refusal), !unified, "{out}");
    assert_eq!(out.contains("krs.sock"), unified, "{out}");

    // Without it, a v1 host gets upstream's warning and the run goes on to the runtime.
    let (code, out) = kubelet(&[
        "--container-runtime-endpoint=unix:///nonexistent/krs.sock",
        &format!("--root-dir={}", dir.path().display()),
        "--runtime-request-timeout=2s",
    ]);
    assert_ne!(code, 0, "{out}");
    let warning = out.lines().find(|l| {
        l.contains("cgroup v1 support is in maintenance mode, please migrate to cgroup v2")
    });
    assert_eq!(warning.is_some(), !unified, "{out}");
    assert!(warning.is_none_or(|w| w.starts_with('W')), "{out}");
    assert!(out.contains("krs.sock"), "{out}");
}
