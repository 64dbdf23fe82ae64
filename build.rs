//! Generates the gRPC bindings: the CRI (runtime.v1), the kubelet's pod-resources (v1 and
//! v1alpha1), plugin registration (pluginregistration), the CSI Node and Identity services
//! (csi.v1) and the device plugin API (deviceplugin v1beta1), and
//! stamps the binary with the commit it is built from, as upstream's `--version=raw` shows
//! (GitCommit, GitTreeState).
//!
//! The .proto is parsed by `protox` (pure Rust) so building never needs a
//! system `protoc`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the binary is compiled from: a tree that differs from the commit in these is "dirty".
const SOURCES: &[&str] = &["src", "proto", "build.rs", "Cargo.toml", "Cargo.lock"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    stamp_git_commit();
    let proto_root = Path::new("proto");
    let api = proto_root.join("runtime/v1/api.proto");
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-changed=build.rs");

    let fds = protox::compile([&api], [proto_root])?;
    tonic_prost_build::configure()
        .build_client(true)
        // The server side serves in-process fake runtimes in tests.
        .build_server(true)
        // Unimplemented RPCs answer UNIMPLEMENTED, so a fake only writes
        // the handful of methods a test needs.
        .generate_default_stubs(true)
        // Registry credentials must never reach a log through `{:?}`;
        // src/cri/mod.rs supplies a redacting Debug instead.
        .skip_debug(["runtime.v1.AuthConfig"])
        .compile_fds(fds)?;

    let podresources = proto_root.join("podresources/v1/api.proto");
    let podresources_alpha = proto_root.join("podresources/v1alpha1/api.proto");
    let fds = protox::compile([&podresources, &podresources_alpha], [proto_root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;

    // The kubelet is the client of both; the servers serve the tests' own CSI driver.
    let registration = proto_root.join("pluginregistration/v1/api.proto");
    let csi = proto_root.join("csi/v1/csi.proto");
    let fds = protox::compile([&registration, &csi], [proto_root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .generate_default_stubs(true)
        // Volume secrets must never reach a log through `{:?}`; src/volume/csi/api.rs
        // supplies a redacting Debug instead.
        .skip_debug([
            "csi.v1.NodeStageVolumeRequest",
            "csi.v1.NodePublishVolumeRequest",
            "csi.v1.NodeExpandVolumeRequest",
        ])
        .compile_fds(fds)?;

    // The kubelet serves Registration and is the client of DevicePlugin; the other halves
    // serve and drive the tests' own device plugin.
    let deviceplugin = proto_root.join("deviceplugin/v1beta1/api.proto");
    let fds = protox::compile([&deviceplugin], [proto_root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .generate_default_stubs(true)
        .compile_fds(fds)?;
    Ok(())
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// KRS_GIT_COMMIT (empty outside a git checkout, as in a source tarball) and KRS_GIT_TREE_STATE
/// ("clean", "dirty" or empty), read at run time by `--version=raw` and so by whoever records
/// which build a run used (e2e/run.sh).
fn stamp_git_commit() {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    let mut state = String::new();
    if !commit.is_empty() {
        // --no-optional-locks: a plain status may rewrite .git/index, which must not look
        // like a change to cargo.
        let mut args = vec![
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
        ];
        args.extend(SOURCES);
        state = match git(&args) {
            Some(changes) if changes.is_empty() => "clean".into(),
            Some(_) => "dirty".into(),
            None => String::new(),
        };
        // A commit or a checkout changes HEAD or the branch; an edit changes the sources
        // themselves. Only files that exist: cargo reruns the script for a missing one every time.
        if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) {
            let branch = git(&["symbolic-ref", "-q", "HEAD"]);
            let files = ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref());
            for path in files.map(|f| dir.join(f)).filter(|p| p.is_file()) {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
        for source in SOURCES {
            println!("cargo:rerun-if-changed={source}");
        }
    }
    println!("cargo:rustc-env=KRS_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=KRS_GIT_TREE_STATE={state}");
}
