//! CSI: the kubelet's side of the Container Storage Interface. Drivers announce themselves
//! through the plugin manager (`crate::pluginmanager`); `registration` checks and records them,
//! publishes what they say about the node (`nodeinfo`: the CSINode object and the Node's
//! annotation and topology labels), and `drivers` tells the volume manager where each one
//! listens. `client` speaks to a driver's Identity and Node services.

pub mod api;
pub mod client;
pub mod drivers;
pub mod mount;
pub mod nodeinfo;
pub mod registration;
pub mod usage;
mod version;

pub use drivers::Drivers;
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
