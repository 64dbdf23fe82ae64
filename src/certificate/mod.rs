//! Kubelet client certificates: TLS bootstrap (a bootstrap token buys the first certificate
//! through a CertificateSigningRequest) and rotation (the current certificate buys the next one
//! before it expires), as upstream's pkg/kubelet/certificate.
//!
//! Rotation writes new files and repoints the `-current` symlink, then tells the kubelet's
//! client to reconnect: a kube::Client reads its certificate once, when built.

mod bootstrap;
mod client;
mod csr;
pub mod dynamic;
mod error;
mod kubeconfig;
mod rotation;
pub mod serving;
pub mod store;
#[cfg(test)]
mod testing;
mod validity;

// The serving side and bootstrap's helpers reach the CSR round trip and the rotation schedule
// through here, as they did before these parts had files of their own.
pub use client::{ClientSettings, ConnectError, bootstrap_if_needed, connect};
pub(crate) use csr::{CsrName, CsrRequest, check_pair, node_csr_for, request_certificate};
pub use error::CertError;
pub use rotation::rotate_once;
pub(crate) use rotation::{jitter, rotation_deadline};
use validity::certs_unexpired;

pub const SIGNER_NAME: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Upstream requests these three for the kubelet's client certificate whatever the key type.
pub const USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];

/// The organization of every node certificate's subject.
const NODE_ORGANIZATION: &str = "system:nodes";
