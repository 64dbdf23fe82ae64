//! Talking to the container runtime over the CRI (runtime.v1) gRPC API.
//!
//! [`api`] holds the generated protobuf types plus client and server stubs;
//! [`RuntimeClient`] is the kubelet's typed client with per-call deadlines.

mod client;
mod endpoint;
mod error;
mod metrics;

#[cfg(test)]
pub mod fake;
#[cfg(test)]
mod tests;

pub use client::{RuntimeClient, connect_channel};
pub use endpoint::parse_endpoint;
pub use error::CriError;

/// Generated CRI types, `runtime_service_client`/`image_service_client` and
/// `runtime_service_server`/`image_service_server`.
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    rustdoc::all,
    unreachable_pub
)]
pub mod api {
    tonic::include_proto!("runtime.v1");
}

impl std::fmt::Debug for api::AuthConfig {
    /// Credentials are blanked so an `AuthConfig` can never leak into logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn redact(s: &str) -> &'static str {
            if s.is_empty() { "" } else { "<redacted>" }
        }
        f.debug_struct("AuthConfig")
            .field("username", &self.username)
            .field("password", &redact(&self.password))
            .field("auth", &redact(&self.auth))
            .field("server_address", &self.server_address)
            .field("identity_token", &redact(&self.identity_token))
            .field("registry_token", &redact(&self.registry_token))
            .finish()
    }
}
