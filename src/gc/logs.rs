//! Log files on disk: a removed container's log and its rotated copies, a gone pod's folder.

use std::io::ErrorKind;
use std::path::Path;

use tracing::{debug, warn};

use super::GcError;

/// The names in `dir`; none when it does not exist (nothing was ever logged there).
pub async fn list_dir(dir: &Path) -> Result<Vec<String>, GcError> {
    let io = |source| GcError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    let mut names = Vec::new();
    while let Some(entry) = entries.next_entry().await.map_err(io)? {
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    Ok(names)
}

/// Removes a container's log file and the rotated copies beside it (the log rotation's
/// naming), off the runtime.
pub async fn remove_container_logs(log: &Path) {
    let path = log.to_path_buf();
    let removed =
        tokio::task::spawn_blocking(move || crate::logrotate::files::remove_with_rotated(&path))
            .await;
    match removed {
        Ok(Ok(())) => debug!(path = %log.display(), "Removed container log"),
        Ok(Err(err)) => warn!(path = %log.display(), %err, "Failed to remove container log"),
        Err(err) => warn!(path = %log.display(), %err, "Failed to remove container log"),
    }
}

/// Removes a pod log folder with everything in it.
pub async fn remove_dir(dir: &Path) {
    match tokio::fs::remove_dir_all(dir).await {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(err) => warn!(path = %dir.display(), %err, "Failed to remove pod logs directory"),
    }
}
