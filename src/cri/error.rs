//! Errors of the CRI client.

use std::time::Duration;

/// Everything that can go wrong talking to the runtime.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("invalid CRI endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },

    #[error("failed to connect to CRI endpoint {endpoint:?}")]
    Connect {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },

    #[error("CRI {op} timed out after {after:?}")]
    Timeout { op: &'static str, after: Duration },

    #[error("CRI {op} failed: {}: {}", status.code(), status.message())]
    Status {
        op: &'static str,
        #[source]
        status: tonic::Status,
    },

    /// The runtime answered, but with something the CRI contract forbids
    /// (e.g. an empty id for a freshly created sandbox).
    #[error("CRI {op} returned an invalid response: {reason}")]
    InvalidResponse { op: &'static str, reason: String },
}

impl CriError {
    /// True when the runtime reported that the object does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(tonic::Code::NotFound)
    }

    /// The gRPC status code, if the runtime answered with an error status.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CriError::Status { status, .. } => Some(status.code()),
            _ => None,
        }
    }

    /// The runtime's error message, if it answered with an error status.
    pub fn message(&self) -> Option<&str> {
        match self {
            CriError::Status { status, .. } => Some(status.message()),
            _ => None,
        }
    }
}
