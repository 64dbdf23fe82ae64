//! kubelet-rs: a Kubernetes kubelet written in Rust.
//!
//! Data flow (see the README's Layout): pod sources (`sources`) are merged into updates for
//! the sync loop (`sync`), which drives one worker per pod; workers ask the runtime manager
//! (`runtime`) to converge the pod over the CRI (`cri`), with pod cgroups from `cm`. The PLEG
//! (`pleg`) relists the runtime and wakes workers on change; `status` turns runtime state into
//! API pod status; `gc` collects what pods leave behind (dead containers, sandboxes, logs,
//! unused images, orphaned pod folders); `server` and `podresources` serve what the kubelet
//! knows. `kubelet` wires it all together.
//!
//! The library exists for the `kubelet` binary and the integration tests: only what they use is
//! public.

mod apiclient;
mod certificate;
mod cli;
mod cm;
mod config;
mod cri;
mod events;
mod eviction;
mod expansion;
mod fieldpath;
mod gc;
mod grpc_uds;
mod host;
mod inflight;
mod kubelet;
mod logrotate;
mod metrics;
mod names;
mod node;
mod nodeshutdown;
mod oom;
mod pki;
mod pleg;
mod pluginmanager;
mod pod;
mod podinputs;
mod podresources;
mod probe;
mod prober;
mod quantity;
mod runtime;
mod server;
mod sources;
mod startup;
mod stats;
mod status;
mod sync;
mod sys;
mod tasks;
mod telemetry;
mod volume;
mod yaml;

pub use cli::{CliError, parse};
pub use config::Settings;
pub use kubelet::{KubeletError, run};
pub use telemetry::trace::{Pipeline as TracePipeline, TraceError, pipeline as trace_pipeline};
pub use telemetry::{TelemetryError, init_logging};

/// Parts the integration tests drive on their own, without a whole kubelet.
pub mod testing {
    pub use crate::apiclient::{ApiClientError, connect};
    pub use crate::certificate::{CertError, bootstrap_if_needed, rotate_once};
    pub use crate::cm::devicemanager::api as deviceplugin;
    pub use crate::cri::{CriError, connect_channel};
    pub use crate::pluginmanager::registration::api as pluginregistration;
    pub use crate::podinputs::tokens::TokenCache;
    pub use crate::podresources::api as podresources;
    pub use crate::volume::csi::api as csi;
}
