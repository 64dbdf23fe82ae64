//! Container log rotation, upstream's container log manager: every
//! `containerLogMonitorInterval` each running container's log (the CRI `log_path`) that has
//! reached `containerLogMaxSize` is renamed to `<log>.<YYYYMMDD-hhmmss>` and the runtime
//! reopens it (CRI `ReopenContainerLog`); at most `containerLogMaxFiles` files stay, the
//! oldest go first, and all rotated files but the newest are gzipped. A negative max size
//! turns rotation off.
//!
//! Where upstream's users find it too slow (one worker by default, compressing before it
//! renames, so a chatty container's log grows on meanwhile), this one renames and reopens
//! first, compresses on the blocking pool in a lane of its own, rotates up to
//! `containerLogMaxWorkers` containers at once, and never lets one slow log hold back the
//! next look at the others.

mod blocking;
mod compress;
pub mod files;
mod monitor;
mod policy;
mod rotate;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::info;

pub use policy::{Policy, PolicyError};

use crate::config::Settings;
use crate::cri::{CriError, RuntimeClient};
use crate::tasks::Tasks;

/// What went wrong with one rotation (logged; the next pass tries again).
#[derive(Debug, thiserror::Error)]
pub enum LogRotateError {
    #[error("failed to list containers: {0}")]
    List(#[source] CriError),
    #[error("failed to {what} {path:?}: {source}")]
    File {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("container log doesn't exist, reopen container log {id:?} failed: {source}")]
    ReopenMissing { id: String, source: CriError },
    #[error("failed to reopen container log {id:?}: {source}")]
    Reopen { id: String, source: CriError },
    #[error("{what} did not finish within {after:?}")]
    Timeout { what: &'static str, after: Duration },
    #[error("blocking file work failed: {0}")]
    Blocking(String),
}

/// Starts the rotation loop in `tasks`, unless a negative max size turns rotation off. Bad
/// max size or max files settings stop the kubelet, as upstream's.
pub fn spawn(
    settings: &Settings,
    cri: RuntimeClient,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> Result<(), PolicyError> {
    let Some(policy) = Policy::from_config(&settings.config)? else {
        info!("Container log rotation is off (negative containerLogMaxSize)");
        return Ok(());
    };
    info!(workers = policy.workers, monitorPeriod = ?policy.interval,
          "Initializing container log rotate workers");
    let workers = policy.workers;
    let monitor = monitor::Monitor::new(rotate::Rotator {
        cri,
        policy,
        rotations: blocking::Lane::new(workers),
        compressions: blocking::Lane::new(workers),
    });
    tasks.critical("container log rotation", monitor.run(cancel.child_token()));
    Ok(())
}
