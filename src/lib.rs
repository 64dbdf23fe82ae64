//! kubelet-rs: a Kubernetes kubelet written in Rust.
//!
//! Data flow (see ARCHITECTURE.md): pod sources (`config`) are merged into updates for the sync
//! loop (`sync`), which drives one worker per pod; workers ask the runtime manager (`runtime`)
//! to converge the pod over the CRI (`cri`), with pod cgroups from `cm`. The PLEG (`pleg`)
//! relists the runtime and wakes workers on change; `status` turns runtime state into API pod
//! status; `server` serves healthz and the read-only API.

pub mod apiclient;
pub mod certificate;
pub mod cli;
pub mod cm;
pub mod config;
pub mod cri;
pub mod events;
pub mod grpc_uds;
pub mod host;
pub mod kubelet;
pub mod metrics;
pub mod names;
pub mod node;
pub mod pleg;
pub mod podresources;
pub mod quantity;
pub mod runtime;
pub mod server;
pub mod stats;
pub mod status;
pub mod sync;
pub mod tasks;
pub mod telemetry;
pub mod yaml;
