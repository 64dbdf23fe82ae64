//! Static pods from a manifest folder (or a single manifest file).
//!
//! The source re-reads the folder when inotify reports a change (debounced) and on a fixed
//! period as a safety net, and sends the complete set of valid pods whenever it changes.
//! Only files whose identity, size or times changed are decoded again, so a periodic relist
//! of an unchanged folder costs one `stat` per file.

mod manifest;
mod scan;
#[cfg(test)]
mod testing;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::{FILE_SOURCE, SourceUpdate};
use scan::{ManifestErrors, Scanner};
use watch::{EventSink, WatchState, settle};

const SLOW_SCAN: Duration = Duration::from_secs(5);
/// While the static pod path does not exist, it is looked for this often (upstream's file
/// source retries its watch every second, its `retryPeriod`), not only every
/// `fileCheckFrequency`: kubeadm starts the kubelet before it creates /etc/kubernetes/manifests
/// and writes the control plane's manifests, then waits for the API server.
const MISSING_PATH_RETRY: Duration = Duration::from_secs(1);

/// The static-pod file source. Create it, then [`FileSource::run`] it; a bad manifest is
/// logged with its file and field, and its last error kept per file by the scanner.
pub struct FileSource {
    path: PathBuf,
    node_name: String,
    check_every: Duration,
    errors: ManifestErrors,
}

impl FileSource {
    pub fn new(path: PathBuf, node_name: String, check_every: Duration) -> Self {
        FileSource {
            path,
            node_name,
            check_every: check_every.max(Duration::from_millis(100)),
            errors: ManifestErrors::default(),
        }
    }

    pub async fn run(self, tx: mpsc::Sender<SourceUpdate>, cancel: CancellationToken) {
        info!(path = %self.path.display(), "Watching static pod path");
        let sink = Arc::new(EventSink::default());
        let mut watch = WatchState {
            watcher: None,
            ident: None,
        };
        let mut scanner = Some(Scanner::new(
            self.path.clone(),
            self.node_name.clone(),
            self.errors.clone(),
        ));
        let mut pending: Option<PendingScan> = None;
        let mut ticker = tokio::time::interval(self.check_every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut want_scan = true;
        loop {
            if want_scan && let Some(mut s) = scanner.take() {
                let dirty = sink.take();
                let task = tokio::task::spawn_blocking(move || {
                    let out = s.scan(dirty);
                    (s, out)
                });
                pending = Some((task, Instant::now()));
                want_scan = false;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => want_scan = true,
                _ = tokio::time::sleep(MISSING_PATH_RETRY),
                    if pending.is_none() && watch.watcher.is_none() && watch.ident.is_none() =>
                {
                    want_scan = true;
                }
                _ = sink.wake.notified() => {
                    if !settle(&sink, &cancel).await {
                        return;
                    }
                    want_scan = true;
                }
                res = wait_pending(&mut pending) => {
                    let started = pending.take().map(|(_, t)| t);
                    if let Some(t) = started
                        && t.elapsed() > SLOW_SCAN
                    {
                        warn!(path = %self.path.display(), took = ?t.elapsed(), "Slow manifest scan");
                    }
                    let update = match res {
                        Ok((s, update)) => {
                            scanner = Some(s);
                            update
                        }
                        Err(e) => {
                            error!(err = %e, "Manifest scan failed, starting over");
                            scanner = Some(Scanner::new(
                                self.path.clone(),
                                self.node_name.clone(),
                                self.errors.clone(),
                            ));
                            want_scan = true;
                            None
                        }
                    };
                    if watch.ensure(&self.path, &sink) {
                        want_scan = true;
                    }
                    if let Some(pods) = update {
                        debug!(count = pods.len(), "Static pod set changed");
                        let msg = SourceUpdate { source: FILE_SOURCE, pods };
                        tokio::select! {
                            _ = cancel.cancelled() => return,
                            sent = tx.send(msg) => if sent.is_err() { return },
                        }
                    }
                }
            }
        }
    }
}

/// A scan running on the blocking pool, and when it started.
type PendingScan = (JoinHandle<(Scanner, Option<Vec<Pod>>)>, Instant);

async fn wait_pending<T>(pending: &mut Option<(JoinHandle<T>, Instant)>) -> Result<T, JoinError> {
    match pending {
        Some((handle, _)) => handle.await,
        None => std::future::pending().await,
    }
}

/// Runs the static-pod file source until `cancel` fires or the receiver goes away.
#[cfg(test)]
pub async fn run_file_source(
    path: PathBuf,
    node_name: String,
    check_every: Duration,
    tx: mpsc::Sender<SourceUpdate>,
    cancel: CancellationToken,
) {
    FileSource::new(path, node_name, check_every)
        .run(tx, cancel)
        .await;
}

#[cfg(test)]
mod tests {
    use super::testing::{NODE, manifest};
    use super::*;
    use std::fs;

    async fn next(rx: &mut mpsc::Receiver<SourceUpdate>) -> Vec<Pod> {
        let update = tokio::time::timeout(Duration::from_secs(1), rx.recv())
            .await
            .expect("no update within a second")
            .expect("source stopped");
        assert_eq!(update.source, "file");
        update.pods
    }

    fn images(pods: &[Pod]) -> Vec<String> {
        pods.iter()
            .map(|p| {
                p.spec.as_ref().unwrap().containers[0]
                    .image
                    .clone()
                    .unwrap()
            })
            .collect()
    }

    #[tokio::test]
    async fn watcher_follows_add_change_remove() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        // A long period proves that inotify, not the relist, delivers the changes.
        let task = tokio::spawn(run_file_source(
            dir.path().to_path_buf(),
            NODE.into(),
            Duration::from_secs(3600),
            tx,
            cancel.clone(),
        ));
        assert!(next(&mut rx).await.is_empty());
        // Let the watch be established after the first scan.
        tokio::time::sleep(Duration::from_millis(50)).await;

        let a = dir.path().join("a.yaml");
        fs::write(&a, manifest("a", "nginx:1")).unwrap();
        assert_eq!(images(&next(&mut rx).await), ["nginx:1"]);

        fs::write(&a, manifest("a", "nginx:2")).unwrap();
        assert_eq!(images(&next(&mut rx).await), ["nginx:2"]);

        fs::remove_file(&a).unwrap();
        assert!(next(&mut rx).await.is_empty());

        for i in 0..30 {
            fs::write(
                dir.path().join(format!("p{i:02}.yaml")),
                manifest(&format!("p{i:02}"), "nginx:1"),
            )
            .unwrap();
        }
        let mut updates = 0;
        let mut last = Vec::new();
        while last.len() < 30 {
            last = next(&mut rx).await;
            updates += 1;
        }
        assert!(updates <= 3, "{updates} updates for one burst");

        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn folder_created_later_is_picked_up_within_a_second_or_two() {
        // kubeadm's order: the kubelet starts, then /etc/kubernetes/manifests appears with the
        // control plane's manifests. A fileCheckFrequency of an hour proves that the path is
        // looked for again well before the periodic relist.
        let dir = tempfile::tempdir().unwrap();
        let manifests = dir.path().join("manifests");
        let (tx, mut rx) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        tokio::spawn(run_file_source(
            manifests.clone(),
            NODE.into(),
            Duration::from_secs(3600),
            tx,
            cancel.clone(),
        ));
        assert!(next(&mut rx).await.is_empty());
        tokio::time::sleep(Duration::from_millis(300)).await;
        fs::create_dir(&manifests).unwrap();
        fs::write(manifests.join("a.yaml"), manifest("a", "nginx:1")).unwrap();
        let update = tokio::time::timeout(Duration::from_secs(3), rx.recv())
            .await
            .expect("the new folder's manifest not seen within 3 s")
            .expect("source stopped");
        assert_eq!(images(&update.pods), ["nginx:1"]);
        cancel.cancel();
    }

    #[tokio::test]
    async fn folder_created_later_is_picked_up() {
        let dir = tempfile::tempdir().unwrap();
        let manifests = dir.path().join("manifests");
        let (tx, mut rx) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        tokio::spawn(run_file_source(
            manifests.clone(),
            NODE.into(),
            Duration::from_millis(200),
            tx,
            cancel.clone(),
        ));
        assert!(next(&mut rx).await.is_empty());
        fs::create_dir(&manifests).unwrap();
        fs::write(manifests.join("a.yaml"), manifest("a", "nginx:1")).unwrap();
        assert_eq!(next(&mut rx).await.len(), 1);
        cancel.cancel();
    }
}
