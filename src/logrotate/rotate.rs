//! One container's turn: find its log, and when the log has reached the max size, rotate it.
//!
//! The order differs from upstream's in one way that matters for chatty containers: upstream
//! compresses the older rotated files first and renames the current log last, so the log
//! keeps growing while it compresses; here the current log is renamed and reopened first, and
//! the compression follows in its own lane. The files on disk end the same: the newest
//! rotated file plain, the older ones `.gz`, at most `max_files` in all.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, error};

use super::LogRotateError;
use super::blocking::{Lane, Mark, run};
use super::compress::compress;
use super::files::{self, Plan};
use super::policy::Policy;
use crate::cri::RuntimeClient;

/// Waiting bound for a stat, the clean-up and the rename of one log.
const FILE_WORK: Duration = Duration::from_secs(30);
/// Waiting bound for compressing one log's rotated files (a 10Mi log takes well under 1 s).
const COMPRESS_WORK: Duration = Duration::from_secs(300);

/// What the rotation jobs share.
pub struct Rotator {
    pub cri: RuntimeClient,
    pub policy: Policy,
    /// Status, stat, rename and reopen: `containerLogMaxWorkers` containers at a time.
    pub rotations: Lane,
    /// Compressions, apart, so a long one does not hold other logs' renames back.
    pub compressions: Lane,
}

/// How a job ended, for the monitor's log path cache.
pub struct Done {
    pub id: String,
    /// The container's log path (empty: it has none); `None` when it could not be learned.
    pub log: Option<PathBuf>,
}

impl Rotator {
    /// The job for container `id`, whose log path is `known` when an earlier pass learned it.
    pub async fn job(self: Arc<Self>, id: String, known: Option<PathBuf>, mark: Arc<Mark>) -> Done {
        let place = self.rotations.enter().await;
        let log = match known {
            Some(p) => p,
            None => match self.cri.container_status(&id).await {
                Ok(s) => PathBuf::from(s.log_path),
                Err(e) => {
                    error!(err = %e, containerID = %id, "Failed to get container status");
                    return Done { id, log: None };
                }
            },
        };
        if log.as_os_str().is_empty() {
            return Done { id, log: Some(log) };
        }
        let rotated = self.rotate_if_big(&id, &log, &mark).await;
        // The next container's rotation need not wait for this one's compression.
        drop(place);
        let compressed = match rotated {
            Ok(Some(plan)) => self.compress(plan, &mark).await,
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = compressed {
            error!(err = %e, containerID = %id, path = %log.display(), maxSize = self.policy.max_size,
                   "Failed to rotate log for container");
        }
        Done { id, log: Some(log) }
    }

    /// The rotated files left to compress, once the log was rotated.
    async fn rotate_if_big(
        &self,
        id: &str,
        log: &Path,
        mark: &Arc<Mark>,
    ) -> Result<Option<Plan>, LogRotateError> {
        let size = match self.size(log, mark).await? {
            Some(size) => size,
            None => {
                // Someone removed the log: the runtime writes nowhere until it reopens it.
                self.cri.reopen_container_log(id).await.map_err(|source| {
                    LogRotateError::ReopenMissing {
                        id: id.to_string(),
                        source,
                    }
                })?;
                self.size(log, mark).await?.unwrap_or(0)
            }
        };
        if size < self.policy.max_size {
            debug!(containerID = %id, path = %log.display(), currentSize = size,
                   maxSize = self.policy.max_size, "log file doesn't need to be rotated");
            return Ok(None);
        }
        let plan = self.rotate(id, log, mark).await?;
        debug!(containerID = %id, path = %log.display(), size, "Rotated container log");
        Ok(Some(plan))
    }

    /// The log's size, or `None` when it does not exist.
    async fn size(&self, log: &Path, mark: &Arc<Mark>) -> Result<Option<u64>, LogRotateError> {
        let path = log.to_path_buf();
        let stat = run("stat", FILE_WORK, mark, move || std::fs::metadata(&path)).await?;
        match stat {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(LogRotateError::File {
                what: "stat container log",
                path: log.to_path_buf(),
                source,
            }),
        }
    }

    /// Clears room, renames the log away and has the runtime open a new one; on a refusal the
    /// log gets its name back, to be tried again next pass. Returns what is left to compress.
    async fn rotate(&self, id: &str, log: &Path, mark: &Arc<Mark>) -> Result<Plan, LogRotateError> {
        let rotated = files::rotated_path(log, &jiff::Zoned::now());
        let (path, to, max_files) = (log.to_path_buf(), rotated.clone(), self.policy.max_files);
        let plan = run("rotate", FILE_WORK, mark, move || {
            prepare(&path, &to, max_files)
        })
        .await??;
        if let Err(source) = self.cri.reopen_container_log(id).await {
            let (back, from) = (log.to_path_buf(), rotated.clone());
            let renamed = run("rename back", FILE_WORK, mark, move || {
                std::fs::rename(&from, &back)
            })
            .await;
            if let Err(e) = renamed.and_then(|r| {
                r.map_err(|source| LogRotateError::File {
                    what: "rename rotated log",
                    path: rotated.clone(),
                    source,
                })
            }) {
                // The runtime writes to the rotated file until the next reopen succeeds.
                error!(err = %e, rotatedLog = %rotated.display(), newLog = %log.display(),
                       containerID = %id, "Failed to rename rotated log");
            }
            return Err(LogRotateError::Reopen {
                id: id.to_string(),
                source,
            });
        }
        Ok(plan)
    }

    async fn compress(&self, plan: Plan, mark: &Arc<Mark>) -> Result<(), LogRotateError> {
        let todo: Vec<PathBuf> = plan.to_compress().cloned().collect();
        if todo.is_empty() {
            return Ok(());
        }
        let _place = self.compressions.enter().await;
        run("compress", COMPRESS_WORK, mark, move || {
            todo.iter().try_for_each(|f| {
                compress(f)
                    .map(drop)
                    .map_err(|source| LogRotateError::File {
                        what: "compress log",
                        path: f.clone(),
                        source,
                    })
            })
        })
        .await?
    }
}

/// Removes leftovers and the oldest rotated files beyond `max_files`, then renames `log` to
/// `rotated`. A `rotated` that exists already (two rotations within a second) is not
/// overwritten: the rotation waits for the next pass.
fn prepare(log: &Path, rotated: &Path, max_files: usize) -> Result<Plan, LogRotateError> {
    let file_err = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| LogRotateError::File { what, path, source }
    };
    let existing = files::list_rotated(log).map_err(file_err("list rotated logs of", log))?;
    let plan = Plan::new(&existing, max_files);
    for f in &plan.unused {
        files::remove(f).map_err(file_err("remove unused log", f))?;
    }
    for f in &plan.excess {
        files::remove(f).map_err(file_err("remove old log", f))?;
    }
    if rotated.exists() {
        return Err(LogRotateError::File {
            what: "rotate log to",
            path: rotated.to_path_buf(),
            source: io::ErrorKind::AlreadyExists.into(),
        });
    }
    std::fs::rename(log, rotated).map_err(file_err("rotate log", log))?;
    Ok(plan)
}
