//! Errors of the CRI client.

use std::time::Duration;

/// Everything that can go wrong talking to the runtime.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The endpoint is not a unix socket the kubelet can dial.
    #[error("invalid CRI endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as configured.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The socket did not accept a gRPC connection.
    #[error("failed to connect to CRI endpoint {endpoint:?}")]
    Connect {
        /// The endpoint as configured.
        endpoint: String,
        /// The transport's error.
        #[source]
        source: tonic::transport::Error,
    },

    /// A call ran past its deadline.
    #[error("CRI {op} timed out after {after:?}")]
    Timeout {
        /// The CRI method.
        op: &'static str,
        /// The deadline it ran past.
        after: Duration,
    },

    /// The runtime answered with a gRPC error.
    #[error("CRI {op} failed: {}: {}", status.code(), status.message())]
    Status {
        /// The CRI method.
        op: &'static str,
        /// The runtime's answer.
        #[source]
        status: tonic::Status,
    },

    /// The runtime answered, but with something the CRI contract forbids
    /// (e.g. an empty id for a freshly created sandbox).
    #[error("CRI {op} returned an invalid response: {reason}")]
    InvalidResponse {
        /// The CRI method.
        op: &'static str,
        /// What the response lacked.
        reason: String,
    },
}

impl CriError {
    /// True when the runtime reported that the object does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(tonic::Code::NotFound)
    }

    /// True when the call or the work it asked for ran out of time (the client's deadline, or
    /// the runtime's own, as ExecSync reports a command that outlived its timeout).
    pub fn is_timeout(&self) -> bool {
        matches!(self, CriError::Timeout { .. })
            || self.code() == Some(tonic::Code::DeadlineExceeded)
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
