//! Generates the gRPC bindings: the CRI (runtime.v1) and the kubelet's pod-resources (v1).
//!
//! The .proto is parsed by `protox` (pure Rust) so building never needs a
//! system `protoc`.

use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
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
    let fds = protox::compile([&podresources], [proto_root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
