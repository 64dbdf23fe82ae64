//! CSI: the kubelet's side of the Container Storage Interface. Drivers announce themselves
//! through the plugin manager (`crate::pluginmanager`); `registration` checks and records them,
//! publishes what they say about the node (`nodeinfo`: the CSINode object and the Node's
//! annotation and topology labels), and `drivers` tells the volume manager where each one
//! listens. `client` speaks to a driver's Identity and Node services; `mount` stages,
//! publishes and tears down, `expand` grows a published volume, `usage` reads its stats.

pub mod api;
pub mod block;
pub mod client;
pub mod drivers;
pub mod expand;
pub mod mount;
pub mod nodeinfo;
pub mod registration;
pub mod usage;
mod version;

pub use drivers::Drivers;

/// The volume context key of the service account tokens a driver asked for.
pub const SERVICE_ACCOUNT_TOKENS: &str = "csi.storage.k8s.io/serviceAccount.tokens";
pub use registration::Registration;

/// What went wrong talking to a driver or publishing it.
#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    #[error("failed to dial {endpoint}: {source}")]
    Dial {
        endpoint: String,
        #[source]
        source: crate::grpc_uds::DialError,
    },
    /// As grpc-go words a failed call, which drivers' users know.
    #[error("rpc error: code = {:?} desc = {}", .status.code(), .status.message())]
    Call {
        op: &'static str,
        #[source]
        status: tonic::Status,
    },
    #[error("{op} timed out after {after:?}")]
    Timeout {
        op: &'static str,
        after: std::time::Duration,
    },
    #[error("{0}")]
    Api(String),
    #[error("{0}")]
    Invalid(String),
}

/// Upstream prefixes the CSI plugin's messages with its name; users search for them.
fn log_prefix(msg: impl std::fmt::Display) -> String {
    format!("kubernetes.io/csi: {msg}")
}
