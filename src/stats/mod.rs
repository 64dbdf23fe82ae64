//! Node and pod statistics: the Summary API (`/stats/summary`) and what the resource and
//! cadvisor metrics are made of.
//!
//! Sources, as upstream's CRI stats provider uses them: the runtime's ListContainerStats for
//! containers (CPU, memory working set, writable layer), the pod cgroups (see `cm`) for pod CPU
//! and memory, ListPodSandboxStats for pod network when the runtime implements it, else the
//! sandbox process's /proc/<pid>/net/dev; /proc and the node's filesystems for the node;
//! `du`-style walks for logs and volumes. usageNanoCores needs two samples: a sampler task
//! records cumulative CPU every 10 s (like upstream's eviction manager does) and requests read
//! the rate it computed. On cgroup v2 the pressure files (PSI) of every cgroup read, and
//! /proc/pressure for the node, as upstream does under its KubeletPSI gate (on by default).

mod assemble;
pub mod cgroup;
mod collect;
pub mod exposition;
pub mod fs;
pub mod local;
pub mod procfs;
pub mod rate;
mod runtime;
pub mod types;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::cm::CgroupManager;
use crate::cri::{CriError, RuntimeClient};
use crate::status::StatusStore;

pub use assemble::{Collected, ContainerDetail};
pub use types::Summary;

/// How often the sampler records cumulative CPU (upstream's eviction manager period).
pub const SAMPLE_PERIOD: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("runtime: {0}")]
    Cri(#[from] CriError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} timed out after {after:?}")]
    Timeout { what: String, after: Duration },
    #[error("{0}: still running since an earlier request")]
    Busy(String),
    #[error("{0} holds too many files to measure")]
    TooLarge(PathBuf),
    #[error("blocking task failed: {0}")]
    Blocking(String),
}

/// What a collection covers: everything, or only CPU and memory (metrics-server's
/// `only_cpu_and_memory=true`, /metrics/resource and the sampler), which skips filesystems and
/// network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    CpuAndMemory,
    Full,
}

/// Collects node and pod statistics on request. Shared by the API servers and the sampler.
pub struct StatsProvider {
    cri: RuntimeClient,
    cgroups: Arc<CgroupManager>,
    status: Arc<StatusStore>,
    root_dir: PathBuf,
    /// `podLogsDir`, where container logs are measured.
    pod_logs_dir: PathBuf,
    node_name: String,
    /// The cgroup holding every pod ("<cgroupRoot>/kubepods"), with cgroupsPerQOS.
    kubepods: Option<String>,
    rates: rate::CpuRates,
    fs: fs::FsProbe,
    /// Sandbox ID → its pid, for network stats; pruned to live sandboxes.
    pids: Mutex<HashMap<String, i32>>,
    /// Set once the runtime answers ListPodSandboxStats with Unimplemented.
    no_sandbox_stats: AtomicBool,
    /// Pressure stall information on cgroup v2 (upstream's KubeletPSI gate).
    psi: bool,
    /// The pods' claim and inline CSI volumes, and the drivers that measure CSI ones.
    claimed: Option<ClaimedVolumes>,
    /// Their last readings by (pod UID, volume), reused for a while as upstream reuses its
    /// volume stats, so that the Summary, /metrics and /metrics/cadvisor do not each call
    /// every CSI driver; entries of volumes no longer set up are dropped.
    claimed_readings: Mutex<HashMap<(String, String), (std::time::Instant, ClaimedStats)>>,
}

type ClaimedStats = crate::volume::csi::client::VolumeStats;

/// Where the claim and inline CSI volumes the volume manager set up are read from.
#[derive(Clone)]
pub struct ClaimedVolumes {
    pub volumes: std::sync::Arc<crate::volume::in_place::InPlaceVolumes>,
    pub drivers: Option<std::sync::Arc<crate::volume::csi::Drivers>>,
}

impl StatsProvider {
    pub fn new(
        cri: RuntimeClient,
        cgroups: Arc<CgroupManager>,
        status: Arc<StatusStore>,
        root_dir: PathBuf,
        node_name: String,
    ) -> Self {
        let kubepods = cgroups.node_cgroup();
        StatsProvider {
            cri,
            cgroups,
            status,
            root_dir,
            pod_logs_dir: PathBuf::from(crate::pod::paths::POD_LOGS_ROOT),
            node_name,
            kubepods,
            rates: rate::CpuRates::default(),
            fs: fs::FsProbe::default(),
            pids: Mutex::default(),
            no_sandbox_stats: AtomicBool::new(false),
            psi: true,
            claimed: None,
            claimed_readings: Mutex::default(),
        }
    }

    /// Measures the pods' claim and inline CSI volumes too (`volumeStats` with `pvcRef`).
    pub fn with_claimed_volumes(mut self, claimed: ClaimedVolumes) -> Self {
        self.claimed = Some(claimed);
        self
    }

    /// Leaves out pressure stall information (`featureGates: {KubeletPSI: false}`).
    pub fn with_psi(mut self, psi: bool) -> Self {
        self.psi = psi;
        self
    }

    /// Container logs live under `dir` (`podLogsDir`) instead of /var/log/pods.
    pub fn with_pod_logs_dir(mut self, dir: PathBuf) -> Self {
        self.pod_logs_dir = dir;
        self
    }

    /// The Summary as `/stats/summary` serves it; usageNanoCores from the sampler's last rate.
    pub async fn summary(&self, scope: Scope) -> Result<Summary, StatsError> {
        Ok(self.collect(scope, false).await?.summary)
    }

    /// The Summary plus the per-container details the cadvisor metrics need.
    pub async fn collect_full(&self) -> Result<Collected, StatsError> {
        self.collect(Scope::Full, false).await
    }

    /// Records cumulative CPU every [`SAMPLE_PERIOD`] until cancelled, so usageNanoCores is
    /// there when asked for; series of pods and containers that are gone are forgotten.
    /// Keeps the CPU rates current in `tasks`.
    pub fn spawn_sampler(
        self: &Arc<Self>,
        tasks: &mut crate::tasks::Tasks,
        cancel: &CancellationToken,
    ) {
        tasks.background(
            "stats sampler",
            self.clone().run_sampler(cancel.child_token()),
        );
    }

    pub async fn run_sampler(self: Arc<Self>, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(SAMPLE_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let sampled = tokio::select! {
                _ = cancel.cancelled() => return,
                r = self.collect(Scope::CpuAndMemory, true) => r,
            };
            if let Err(err) = sampled {
                debug!(%err, "CPU sample failed");
            }
        }
    }
}
