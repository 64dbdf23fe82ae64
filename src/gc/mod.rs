//! Garbage collection of what pods leave behind: images (`images`), dead containers, sandboxes
//! and pod log folders (`select` decides, `containers` acts, `logs` touches the files), and
//! orphaned pod folders (`pod_dirs`). Each collector decides from the runtime's own listing
//! and from which pods the sync loop still has (`known`).
//!
//! `spawn` starts the loops and returns the collectors, which the eviction manager may also
//! call on demand.

pub mod containers;
pub mod images;
pub mod known;
mod logs;
pub mod pod_dirs;
pub mod select;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cri::{CriError, RuntimeClient};
use crate::events::EventRecorder;
use crate::pleg::RuntimePods;
use crate::status::StatusStore;
use crate::volume::VolumeManager;

pub use containers::ContainerGc;
pub use images::{ImageGc, ImagePolicy};
pub use known::KnownPods;
pub use select::ContainerPolicy;

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("{op}: {source}")]
    Cri {
        op: &'static str,
        #[source]
        source: CriError,
    },
    #[error("the runtime reports no image filesystem")]
    NoImageFs,
    #[error("image filesystem {path}: {reason}")]
    ImageFsStats { path: PathBuf, reason: String },
    #[error("invalid capacity 0 on image filesystem")]
    InvalidCapacity,
    // Upstream's wording: the FreeDiskSpaceFailed event carries this message.
    #[error(
        "Failed to garbage collect required amount of images. Attempted to free {wanted} bytes, but only found {freed} bytes eligible to free."
    )]
    NotEnoughFreed { wanted: u64, freed: u64 },
    #[error(
        "wanted to free {wanted} bytes, but freed {freed} bytes space with errors in image deletion: {errors}"
    )]
    ImageRemoval {
        wanted: u64,
        freed: u64,
        errors: String,
    },
    #[error(
        "wanted to free images older than {max_age}, encountered errors in image deletion: {errors}"
    )]
    OldImageRemoval { max_age: String, errors: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Several steps of a pass failed.
    #[error("{0}")]
    Aggregate(String),
}

impl GcError {
    fn cri(op: &'static str) -> impl FnOnce(CriError) -> GcError {
        move |source| GcError::Cri { op, source }
    }
}

/// The collectors' part of the settings.
#[derive(Clone, Debug)]
pub struct GcSettings {
    pub images: ImagePolicy,
    pub containers: ContainerPolicy,
    pub image_period: Duration,
    pub container_period: Duration,
    /// `--pod-infra-container-image`, never collected.
    pub sandbox_image: String,
    /// `podLogsDir`.
    pub pod_logs_dir: PathBuf,
    /// `<root-dir>/pods`.
    pub pods_dir: PathBuf,
    pub node_name: String,
}

/// Overrides of upstream's fixed periods, for tests that cannot wait five minutes for a pass
/// (Go durations, e.g. "3s"). Not a setting: upstream has none.
const IMAGE_PERIOD_ENV: &str = "KUBELET_RS_TEST_IMAGE_GC_PERIOD";
const CONTAINER_PERIOD_ENV: &str = "KUBELET_RS_TEST_CONTAINER_GC_PERIOD";

fn period_from_env(var: &str, default: Duration) -> Duration {
    std::env::var(var)
        .ok()
        .and_then(|v| crate::config::duration::parse_go_duration(&v).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(default)
}

impl From<&crate::config::Settings> for GcSettings {
    fn from(settings: &crate::config::Settings) -> Self {
        let (cfg, flags) = (&settings.config, &settings.flags);
        GcSettings {
            images: ImagePolicy {
                high_threshold_percent: cfg.image_gc_high_threshold_percent,
                low_threshold_percent: cfg.image_gc_low_threshold_percent,
                min_age: cfg.image_minimum_gc_age.0,
                max_age: cfg.image_maximum_gc_age.0,
            },
            containers: ContainerPolicy {
                min_age: flags.minimum_container_ttl_duration.0,
                max_per_pod_container: flags.max_per_pod_container_count,
                max_containers: flags.max_container_count,
            },
            image_period: period_from_env(IMAGE_PERIOD_ENV, images::PERIOD),
            container_period: period_from_env(CONTAINER_PERIOD_ENV, containers::PERIOD),
            sandbox_image: flags.pod_infra_container_image.clone(),
            pod_logs_dir: PathBuf::from(&cfg.pod_logs_dir),
            pods_dir: flags.root_dir.join("pods"),
            node_name: settings.node_name(),
        }
    }
}

/// What the collectors read and act through.
pub struct GcInputs {
    pub cri: RuntimeClient,
    pub events: EventRecorder,
    pub known: Arc<KnownPods>,
    pub status: Arc<StatusStore>,
    pub volumes: Arc<VolumeManager>,
    pub cgroups: Arc<crate::cm::CgroupManager>,
    pub runtime_pods: watch::Receiver<RuntimePods>,
}

/// Handles on the running collectors, for the eviction manager.
#[derive(Clone)]
pub struct Collectors {
    pub images: ImageGc,
    pub containers: ContainerGc,
}

/// Starts the image, container and orphaned-folder loops in `tasks`.
pub fn spawn(
    settings: GcSettings,
    inputs: GcInputs,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> Collectors {
    let images = ImageGc::new(
        inputs.cri.clone(),
        settings.images,
        settings.sandbox_image.clone(),
        inputs.events.clone(),
        settings.node_name.clone(),
    );
    let containers = ContainerGc::new(
        inputs.cri,
        settings.containers,
        inputs.known.clone(),
        Some(inputs.status),
        settings.pod_logs_dir,
        inputs.events,
        settings.node_name,
    );
    tasks.background(
        "container garbage collection",
        containers
            .clone()
            .run(settings.container_period, cancel.child_token()),
    );
    if settings.images.periodic() {
        tasks.background(
            "image garbage collection",
            images
                .clone()
                .run(settings.image_period, cancel.child_token()),
        );
    } else {
        info!(
            "ImageGCHighThresholdPercent is set 100 and ImageMaximumGCAge is 0, Disable image GC"
        );
    }
    let orphans = pod_dirs::OrphanDirs {
        pods_dir: settings.pods_dir,
        known: inputs.known,
        volumes: inputs.volumes,
        cgroups: inputs.cgroups,
        runtime_pods: inputs.runtime_pods,
    };
    tasks.background("orphaned pod folders", orphans.run(cancel.child_token()));
    Collectors { images, containers }
}
