//! Why a client certificate could not be obtained or stored, one type for every step so the
//! rotation loop can tell a shutdown from a failure worth retrying.

use std::path::PathBuf;
use std::time::Duration;

use crate::apiclient::ApiClientError;

/// Why a client certificate could not be obtained or stored.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// Reading or writing a file failed.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A kubeconfig could not be read.
    #[error("reading kubeconfig {path}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// kube's reason.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// A kubeconfig lacks what bootstrap or rotation needs.
    #[error("kubeconfig {path}: {reason}")]
    BadKubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// What it lacks.
        reason: String,
    },
    /// No API client could be made.
    #[error(transparent)]
    Client(#[from] ApiClientError),
    /// Making the key or the certificate request failed.
    #[error("generating key or certificate request")]
    Generate(#[from] rcgen::Error),
    /// An API call failed.
    #[error("{what}")]
    Api {
        /// The call.
        what: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
    /// An API call ran past its deadline.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// The call.
        what: String,
        /// The deadline.
        after: Duration,
    },
    /// The CSR was denied or failed.
    #[error("certificate signing request {name} was {condition}: {reason}: {message}")]
    Refused {
        /// The CSR's name.
        name: String,
        /// Denied or Failed.
        condition: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// A CSR of the name ours derives from its key already exists but is not one this node's
    /// key asked for (another signer, other usages or subject, another key, or an expired
    /// certificate), so waiting on it would never give a usable pair.
    #[error("certificate signing request {name} exists but is not compatible: {reason}")]
    IncompatibleCsr {
        /// The CSR's name.
        name: String,
        /// What differs.
        reason: String,
    },
    /// The CSR was not signed in time.
    #[error("certificate signing request {name} not issued within {after:?}")]
    NotIssued {
        /// The CSR's name.
        name: String,
        /// How long was waited.
        after: Duration,
    },
    /// The issued certificate cannot be used.
    #[error("certificate {0}")]
    BadCertificate(String),
    /// The kubelet is shutting down.
    #[error("cancelled")]
    Cancelled,
}
