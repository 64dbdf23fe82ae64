//! Noticing changes: the inotify watch on the manifest folder, the paths it reports, and the
//! debounce that turns a burst of events into one relist.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Bursts of inotify events (an editor save, `cp -r` of many manifests) become one relist.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// A folder that never goes quiet is still relisted this often.
const MAX_SETTLE: Duration = Duration::from_secs(1);
/// Beyond this many distinct changed paths we simply re-read everything.
const MAX_DIRTY_PATHS: usize = 4096;

/// Paths inotify reported since the last scan.
#[derive(Debug, Default)]
pub(super) struct Dirty {
    pub(super) paths: HashSet<PathBuf>,
    pub(super) all: bool,
}

#[derive(Default)]
pub(super) struct EventSink {
    dirty: Mutex<Dirty>,
    pub(super) wake: Notify,
}

impl EventSink {
    fn mark(&self, paths: impl IntoIterator<Item = PathBuf>, all: bool) {
        {
            let mut d = self.dirty.lock().unwrap_or_else(PoisonError::into_inner);
            d.all |= all;
            for p in paths {
                if d.paths.len() >= MAX_DIRTY_PATHS {
                    d.all = true;
                    break;
                }
                d.paths.insert(p);
            }
        }
        self.wake.notify_one();
    }

    pub(super) fn take(&self) -> Dirty {
        std::mem::take(&mut *self.dirty.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Keeps an inotify watch on the folder (or the parent of a single manifest file), re-created
/// when the folder appears, disappears or is replaced.
pub(super) struct WatchState {
    pub(super) watcher: Option<RecommendedWatcher>,
    pub(super) ident: Option<(PathBuf, u64, u64)>,
}

impl WatchState {
    fn target(path: &Path) -> Option<(PathBuf, u64, u64)> {
        let meta = std::fs::metadata(path).ok()?;
        let dir = if meta.is_dir() {
            path.to_path_buf()
        } else {
            path.parent()?.to_path_buf()
        };
        let dmeta = std::fs::metadata(&dir).ok()?;
        Some((dir, dmeta.dev(), dmeta.ino()))
    }

    /// Returns true when a new watch was put in place (events before it may have been missed).
    pub(super) fn ensure(&mut self, path: &Path, sink: &Arc<EventSink>) -> bool {
        let target = Self::target(path);
        if target == self.ident && (self.watcher.is_some() || target.is_none()) {
            return false;
        }
        self.watcher = None;
        self.ident = target.clone();
        let Some((dir, _, _)) = target else {
            return false;
        };
        let cb_sink = Arc::clone(sink);
        let handler = move |res: notify::Result<notify::Event>| match res {
            Ok(ev) => {
                // Our own reads show up as open/close events; only writes matter.
                if let EventKind::Access(kind) = ev.kind
                    && kind != AccessKind::Close(AccessMode::Write)
                {
                    return;
                }
                cb_sink.mark(ev.paths, false);
            }
            Err(e) => {
                warn!(err = %e, "Manifest watch error, relisting");
                cb_sink.mark([], true);
            }
        };
        let watcher = notify::recommended_watcher(handler).and_then(|mut w| {
            w.watch(&dir, RecursiveMode::NonRecursive)?;
            Ok(w)
        });
        match watcher {
            Ok(w) => {
                debug!(path = %dir.display(), "Watching manifest path");
                self.watcher = Some(w);
                true
            }
            Err(e) => {
                warn!(path = %dir.display(), err = %e,
                      "Unable to watch manifest path, relying on periodic checks");
                false
            }
        }
    }
}

/// Waits until the folder has been quiet for [`DEBOUNCE`] (at most [`MAX_SETTLE`]), so a file
/// being written is read once it is complete rather than half-way. False when cancelled.
pub(super) async fn settle(sink: &EventSink, cancel: &CancellationToken) -> bool {
    let deadline = tokio::time::Instant::now() + MAX_SETTLE;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(DEBOUNCE) => return true,
            _ = tokio::time::sleep_until(deadline) => return true,
            _ = sink.wake.notified() => {}
        }
    }
}
