//! Static pods from a manifest folder (or a single manifest file).
//!
//! The source re-reads the folder when inotify reports a change (debounced) and on a fixed
//! period as a safety net, and sends the complete set of valid pods whenever it changes.
//! Only files whose identity, size or times changed are decoded again, so a periodic relist
//! of an unchanged folder costs one `stat` per file.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};
use md5::{Digest, Md5};
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{Notify, mpsc};
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::defaults::apply_api_defaults;
use super::validation::{FieldError, FieldErrorKind, FieldErrors, validate_pod};
use super::{
    CONFIG_HASH_ANNOTATION, CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION, FILE_SOURCE,
    SourceUpdate,
};
use crate::pod::{pod_full_name, pod_uid};

/// Bursts of inotify events (an editor save, `cp -r` of many manifests) become one relist.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// A folder that never goes quiet is still relisted this often.
const MAX_SETTLE: Duration = Duration::from_secs(1);
/// Beyond this many distinct changed paths we simply re-read everything.
const MAX_DIRTY_PATHS: usize = 4096;
/// Manifests are small; refuse to load anything that is clearly not one.
const MAX_MANIFEST_BYTES: u64 = 10 * 1024 * 1024;
const SLOW_SCAN: Duration = Duration::from_secs(5);
/// While the static pod path does not exist, it is looked for this often (upstream's file
/// source retries its watch every second, its `retryPeriod`), not only every
/// `fileCheckFrequency`: kubeadm starts the kubelet before it creates /etc/kubernetes/manifests
/// and writes the control plane's manifests, then waits for the API server.
const MISSING_PATH_RETRY: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("could not read file: {0}")]
    Read(#[from] std::io::Error),
    #[error("file is larger than {MAX_MANIFEST_BYTES} bytes")]
    TooLarge,
    #[error("couldn't parse as pod: {0}")]
    Parse(String),
    #[error("{0}")]
    Invalid(#[from] FieldErrors),
}

fn required(field: &str) -> ManifestError {
    ManifestError::Invalid(FieldErrors(vec![FieldError {
        field: field.to_string(),
        kind: FieldErrorKind::Required,
    }]))
}

fn unsupported(field: &str, value: &str, supported: &'static [&'static str]) -> ManifestError {
    ManifestError::Invalid(FieldErrors(vec![FieldError {
        field: field.to_string(),
        kind: FieldErrorKind::NotSupported {
            value: value.to_string(),
            supported,
        },
    }]))
}

/// JSON is passed through as JSON (like upstream); everything else is read as YAML, first
/// document only (`Null` when there is none).
fn parse_document(data: &[u8]) -> Result<serde_json::Value, ManifestError> {
    let trimmed = data.trim_ascii_start();
    if trimmed.first() == Some(&b'{') {
        return serde_json::from_slice(trimmed).map_err(|e| ManifestError::Parse(e.to_string()));
    }
    crate::yaml::to_json(data).map_err(|e| ManifestError::Parse(e.to_string()))
}

/// Decodes one manifest into a Pod, insisting on `apiVersion: v1` and `kind: Pod`.
pub fn decode_pod(data: &[u8]) -> Result<Pod, ManifestError> {
    let value = parse_document(data)?;
    if value.is_null() {
        return Err(ManifestError::Parse("empty manifest".to_string()));
    }
    let Some(obj) = value.as_object() else {
        return Err(ManifestError::Parse(
            "manifest is not an object".to_string(),
        ));
    };
    match obj.get("apiVersion").and_then(|v| v.as_str()) {
        None | Some("") => return Err(required("apiVersion")),
        Some("v1") => {}
        Some(other) => return Err(unsupported("apiVersion", other, &["v1"])),
    }
    match obj.get("kind").and_then(|v| v.as_str()) {
        None | Some("") => return Err(required("kind")),
        Some("Pod") => {}
        Some(other) => return Err(unsupported("kind", other, &["Pod"])),
    }
    serde_json::from_value(value).map_err(|e| ManifestError::Parse(e.to_string()))
}

/// Decodes, defaults and validates a static pod manifest read from `file` on `node_name`.
/// The config.seen annotation is left to the caller, which knows when the pod was first seen.
pub fn static_pod_from_manifest(
    data: &[u8],
    file: &Path,
    node_name: &str,
) -> Result<Pod, ManifestError> {
    let mut pod = decode_pod(data)?;
    if pod.metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err(required("metadata.name"));
    }
    apply_api_defaults(&mut pod);
    apply_static_pod_defaults(&mut pod, file, node_name)?;
    validate_pod(&pod)?;
    Ok(pod)
}

/// The UID of a static pod without one: md5 over the defaulted pod, then host and file, so
/// the same manifest on the same node and path always yields the same pod.
fn static_pod_uid(pod: &Pod, file: &Path, node_name: &str) -> Result<String, ManifestError> {
    let canonical = serde_json::to_vec(pod).map_err(|e| ManifestError::Parse(e.to_string()))?;
    let mut hasher = Md5::new();
    hasher.update(&canonical);
    hasher.update(format!("host:{node_name}").as_bytes());
    hasher.update(format!("file:{}", file.display()).as_bytes());
    Ok(hex::encode(hasher.finalize()))
}

fn apply_static_pod_defaults(
    pod: &mut Pod,
    file: &Path,
    node_name: &str,
) -> Result<(), ManifestError> {
    if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
        pod.metadata.uid = Some(static_pod_uid(pod, file, node_name)?);
    }
    let uid = pod_uid(pod).to_string();
    let name = pod.metadata.name.take().unwrap_or_default();
    pod.metadata.name = Some(format!("{name}-{}", node_name.to_lowercase()));
    if pod.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        pod.metadata.namespace = Some("default".to_string());
    }
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node_name.to_string());
    // Static pods must survive node problems: tolerate every NoExecute taint.
    add_or_update_toleration(
        spec.tolerations.get_or_insert_with(Vec::new),
        Toleration {
            operator: Some("Exists".to_string()),
            effect: Some("NoExecute".to_string()),
            ..Default::default()
        },
    );
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_HASH_ANNOTATION.to_string(), uid);
    annotations.insert(
        CONFIG_SOURCE_ANNOTATION.to_string(),
        FILE_SOURCE.to_string(),
    );
    pod.status.get_or_insert_with(PodStatus::default).phase = Some("Pending".to_string());
    Ok(())
}

fn add_or_update_toleration(list: &mut Vec<Toleration>, t: Toleration) {
    let same = |o: &Toleration| {
        o.key == t.key && o.effect == t.effect && o.operator == t.operator && o.value == t.value
    };
    match list.iter_mut().find(|o| same(o)) {
        Some(existing) => *existing = t,
        None => list.push(t),
    }
}

/// Last decode error per manifest file, shareable with whoever wants to report them.
#[derive(Clone, Debug, Default)]
pub struct ManifestErrors(Arc<Mutex<BTreeMap<PathBuf, String>>>);

impl ManifestErrors {
    #[cfg(test)]
    pub fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    #[cfg(test)]
    pub fn get(&self, path: &Path) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(path)
            .cloned()
    }

    fn replace(&self, errors: BTreeMap<PathBuf, String>) {
        let mut guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if *guard != errors {
            *guard = errors;
        }
    }
}

/// What identifies a file's content without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileKey {
    fn of(m: &Metadata) -> Self {
        FileKey {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

struct CachedFile {
    key: FileKey,
    outcome: Result<Pod, String>,
    /// Bumped whenever `outcome` changes, so an unchanged folder is detected without
    /// comparing pods.
    generation: u64,
}

/// Paths inotify reported since the last scan.
#[derive(Debug, Default)]
struct Dirty {
    paths: HashSet<PathBuf>,
    all: bool,
}

#[derive(Default)]
struct EventSink {
    dirty: Mutex<Dirty>,
    wake: Notify,
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

    fn take(&self) -> Dirty {
        std::mem::take(&mut *self.dirty.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The blocking part: lists the path, re-decodes changed files, and decides whether the
/// resulting pod set differs from the one last sent.
struct Scanner {
    path: PathBuf,
    node_name: String,
    files: HashMap<PathBuf, CachedFile>,
    first_seen: HashMap<String, String>,
    last_sent: Option<Vec<(PathBuf, u64)>>,
    next_generation: u64,
    errors: ManifestErrors,
    missing_logged: bool,
}

impl Scanner {
    fn new(path: PathBuf, node_name: String, errors: ManifestErrors) -> Self {
        Scanner {
            path,
            node_name,
            files: HashMap::new(),
            first_seen: HashMap::new(),
            last_sent: None,
            next_generation: 0,
            errors,
            missing_logged: false,
        }
    }

    /// Candidate manifest files with their metadata, sorted by path. `None` when the path
    /// could not be listed for a reason other than not existing.
    fn list(&mut self) -> Option<Vec<(PathBuf, Metadata)>> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !self.missing_logged {
                    info!(path = %self.path.display(), "Static pod path does not exist, ignoring");
                    self.missing_logged = true;
                }
                return Some(Vec::new());
            }
            Err(e) => {
                error!(path = %self.path.display(), err = %e, "Unable to read manifest path");
                return None;
            }
        };
        self.missing_logged = false;
        if meta.is_file() {
            return Some(vec![(self.path.clone(), meta)]);
        }
        if !meta.is_dir() {
            error!(path = %self.path.display(), "Manifest path is not a directory or file");
            return Some(Vec::new());
        }
        let entries = match std::fs::read_dir(&self.path) {
            Ok(e) => e,
            Err(e) => {
                error!(path = %self.path.display(), err = %e, "Unable to read manifest path");
                return None;
            }
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            if entry.file_name().as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let p = entry.path();
            match std::fs::metadata(&p) {
                Ok(m) if m.is_file() => out.push((p, m)),
                Ok(m) if m.is_dir() => {
                    debug!(path = %p.display(), "Not recursing into manifest path")
                }
                Ok(_) => debug!(path = %p.display(), "Manifest path is not a regular file"),
                Err(e) => debug!(path = %p.display(), err = %e, "Can't get metadata for manifest"),
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Some(out)
    }

    fn load(&self, path: &Path, meta: &Metadata) -> Result<Pod, ManifestError> {
        if meta.len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge);
        }
        let data = std::fs::read(path)?;
        static_pod_from_manifest(&data, path, &self.node_name)
    }

    fn refresh_file(&mut self, path: PathBuf, meta: &Metadata, force: bool) {
        let key = FileKey::of(meta);
        if let Some(c) = self.files.get(&path)
            && c.key == key
            && !force
        {
            return;
        }
        debug!(path = %path.display(), "Reading manifest file");
        let outcome = self.load(&path, meta).map_err(|e| {
            error!(path = %path.display(), err = %e, "Could not process manifest file");
            e.to_string()
        });
        let unchanged = self.files.get(&path).is_some_and(|c| c.outcome == outcome);
        if unchanged {
            if let Some(c) = self.files.get_mut(&path) {
                c.key = key;
            }
            return;
        }
        self.next_generation += 1;
        let generation = self.next_generation;
        self.files.insert(
            path,
            CachedFile {
                key,
                outcome,
                generation,
            },
        );
    }

    /// Returns the new pod set when it differs from the last one returned.
    fn scan(&mut self, dirty: Dirty) -> Option<Vec<Pod>> {
        let listed = match self.list() {
            Some(l) => l,
            // Keep the previous pods on a transient listing error, but make sure the source
            // reports once so the kubelet does not wait for it forever.
            None if self.last_sent.is_none() => Vec::new(),
            None => return None,
        };
        let present: HashSet<&PathBuf> = listed.iter().map(|(p, _)| p).collect();
        self.files.retain(|p, _| present.contains(p));
        for (path, meta) in &listed {
            let force = dirty.all || dirty.paths.contains(path);
            self.refresh_file(path.clone(), meta, force);
        }
        self.publish_errors();

        let fingerprint: Vec<(PathBuf, u64)> = listed
            .iter()
            .filter_map(|(p, _)| self.files.get(p).map(|c| (p, c)))
            .filter(|(_, c)| c.outcome.is_ok())
            .map(|(p, c)| (p.clone(), c.generation))
            .collect();
        if self.last_sent.as_ref() == Some(&fingerprint) {
            return None;
        }
        let pods = self.collect_pods(&fingerprint);
        self.last_sent = Some(fingerprint);
        Some(pods)
    }

    fn publish_errors(&self) {
        let errors = self
            .files
            .iter()
            .filter_map(|(p, c)| c.outcome.as_ref().err().map(|e| (p.clone(), e.clone())))
            .collect();
        self.errors.replace(errors);
    }

    /// The pods to send, in file order; a second file declaring the same pod is ignored.
    fn collect_pods(&mut self, fingerprint: &[(PathBuf, u64)]) -> Vec<Pod> {
        let now = jiff::Timestamp::now().to_string();
        let mut names = HashSet::new();
        let mut uids = HashSet::new();
        let mut pods = Vec::with_capacity(fingerprint.len());
        for (path, _) in fingerprint {
            let Some(Ok(pod)) = self.files.get(path).map(|c| &c.outcome) else {
                continue;
            };
            let uid = pod_uid(pod).to_string();
            let full_name = pod_full_name(pod);
            if !uids.insert(uid.clone()) || !names.insert(full_name.clone()) {
                warn!(path = %path.display(), pod = %full_name, %uid,
                      "Ignoring manifest that declares a pod already defined by another file");
                continue;
            }
            let mut pod = pod.clone();
            let seen = self
                .first_seen
                .entry(uid)
                .or_insert_with(|| now.clone())
                .clone();
            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(CONFIG_SEEN_ANNOTATION.to_string(), seen);
            pods.push(pod);
        }
        self.first_seen.retain(|uid, _| uids.contains(uid));
        pods
    }
}

/// Keeps an inotify watch on the folder (or the parent of a single manifest file), re-created
/// when the folder appears, disappears or is replaced.
struct WatchState {
    watcher: Option<RecommendedWatcher>,
    ident: Option<(PathBuf, u64, u64)>,
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
    fn ensure(&mut self, path: &Path, sink: &Arc<EventSink>) -> bool {
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

/// The static-pod file source. Create it, keep [`FileSource::errors`] if you want to report
/// bad manifests, then [`FileSource::run`] it.
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

/// Waits until the folder has been quiet for [`DEBOUNCE`] (at most [`MAX_SETTLE`]), so a file
/// being written is read once it is complete rather than half-way. False when cancelled.
async fn settle(sink: &EventSink, cancel: &CancellationToken) -> bool {
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
    use super::*;
    use std::fs;

    const NODE: &str = "Node-A";

    fn manifest(name: &str, image: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: kube-system\n\
             spec:\n  containers:\n  - name: main\n    image: {image}\n"
        )
    }

    fn decode(data: &str) -> Result<Pod, ManifestError> {
        static_pod_from_manifest(
            data.as_bytes(),
            Path::new("/etc/kubernetes/manifests/x.yaml"),
            NODE,
        )
    }

    use crate::sources::annotation;

    #[test]
    fn static_defaults() {
        let pod = decode(&manifest("etcd", "registry.k8s.io/etcd:3.5.9-0")).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("etcd-node-a"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("kube-system"));
        let uid = pod_uid(&pod);
        assert_eq!(uid.len(), 32);
        assert!(uid.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(annotation(&pod, CONFIG_HASH_ANNOTATION), Some(uid));
        assert_eq!(annotation(&pod, CONFIG_SOURCE_ANNOTATION), Some("file"));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some(NODE));
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(
            spec.containers[0].image_pull_policy.as_deref(),
            Some("IfNotPresent")
        );
        let tol = spec.tolerations.as_ref().unwrap();
        assert_eq!(tol.len(), 1);
        assert_eq!(tol[0].operator.as_deref(), Some("Exists"));
        assert_eq!(tol[0].effect.as_deref(), Some("NoExecute"));
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Pending")
        );
    }

    #[test]
    fn namespace_defaults_and_explicit_uid_kept() {
        let data = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  uid: fixed-uid\n\
                    spec:\n  containers:\n  - name: web\n    image: nginx\n";
        let pod = decode(data).unwrap();
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(pod_uid(&pod), "fixed-uid");
        assert_eq!(annotation(&pod, CONFIG_HASH_ANNOTATION), Some("fixed-uid"));
    }

    #[test]
    fn json_manifest() {
        let data = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},
            "spec":{"containers":[{"name":"c","image":"busybox:1","resources":{"limits":{"cpu":1}}}]}}"#;
        let pod = decode(data).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("j-node-a"));
        let requests = pod.spec.unwrap().containers[0]
            .resources
            .clone()
            .unwrap()
            .requests
            .unwrap();
        assert_eq!(requests["cpu"].0, "1");
    }

    #[test]
    fn uid_is_deterministic_and_content_sensitive() {
        let a = decode(&manifest("etcd", "etcd:1")).unwrap();
        let b = decode(&manifest("etcd", "etcd:1")).unwrap();
        let c = decode(&manifest("etcd", "etcd:2")).unwrap();
        assert_eq!(pod_uid(&a), pod_uid(&b));
        assert_ne!(pod_uid(&a), pod_uid(&c));
        let other_file = static_pod_from_manifest(
            manifest("etcd", "etcd:1").as_bytes(),
            Path::new("/elsewhere/x.yaml"),
            NODE,
        )
        .unwrap();
        assert_ne!(pod_uid(&a), pod_uid(&other_file));
        let other_node = static_pod_from_manifest(
            manifest("etcd", "etcd:1").as_bytes(),
            Path::new("/etc/kubernetes/manifests/x.yaml"),
            "node-b",
        )
        .unwrap();
        assert_ne!(pod_uid(&a), pod_uid(&other_node));
    }

    #[test]
    fn malformed_manifests_name_the_problem() {
        let cases = [
            (
                "apiVersion: v1\nkind: Pod\nmetadata: [",
                "couldn't parse as pod",
            ),
            (
                "apiVersion: apps/v1\nkind: Pod\nmetadata:\n  name: a\n",
                "apiVersion: Unsupported value: \"apps/v1\"",
            ),
            (
                "apiVersion: v1\nkind: Deployment\nmetadata:\n  name: a\n",
                "kind: Unsupported value: \"Deployment\"",
            ),
            ("metadata:\n  name: a\n", "apiVersion: Required value"),
            (
                "apiVersion: v1\nkind: Pod\nspec:\n  containers: []\n",
                "metadata.name: Required value",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: c\n",
                "spec.containers[0].image: Required value",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  restartPolicy: Sometimes\n  containers:\n  - name: c\n    image: x\n",
                "spec.restartPolicy: Unsupported value",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: c\n    image: x\n  - name: c\n    image: y\n",
                "spec.containers[1].name: Duplicate value: \"c\"",
            ),
            ("", "empty manifest"),
        ];
        for (data, want) in cases {
            let err = decode(data).unwrap_err().to_string();
            assert!(err.contains(want), "{data:?}: got {err:?}, want {want:?}");
        }
    }

    fn scan_dir(dir: &Path) -> (Scanner, Option<Vec<Pod>>) {
        let mut s = Scanner::new(dir.to_path_buf(), NODE.into(), ManifestErrors::default());
        let out = s.scan(Dirty::default());
        (s, out)
    }

    #[test]
    fn bad_file_is_reported_and_others_delivered() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.yaml"), manifest("a", "nginx:1")).unwrap();
        fs::write(dir.path().join("b.yaml"), "apiVersion: v1\nkind: Pod\n").unwrap();
        fs::write(dir.path().join("c.json"), manifest("c", "nginx:1")).unwrap();
        fs::write(dir.path().join(".hidden.yaml"), manifest("h", "nginx:1")).unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        let (s, out) = scan_dir(dir.path());
        let pods = out.unwrap();
        let names: Vec<_> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a-node-a", "c-node-a"]);
        for p in &pods {
            assert!(annotation(p, CONFIG_SEEN_ANNOTATION).is_some());
        }
        let errors = s.errors.snapshot();
        assert_eq!(errors.len(), 1);
        let bad = dir.path().join("b.yaml");
        assert_eq!(
            s.errors.get(&bad).as_deref(),
            Some("metadata.name: Required value")
        );
    }

    #[test]
    fn rescan_sends_only_on_change_and_keeps_seen() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.yaml");
        fs::write(&a, manifest("a", "nginx:1")).unwrap();
        let (mut s, out) = scan_dir(dir.path());
        let first = out.unwrap();
        assert_eq!(s.scan(Dirty::default()), None);

        // Rewriting identical content must not produce an update, even when forced.
        fs::write(&a, manifest("a", "nginx:1")).unwrap();
        let forced = Dirty {
            paths: HashSet::from([a.clone()]),
            all: false,
        };
        assert_eq!(s.scan(forced), None);

        fs::write(dir.path().join("b.yaml"), manifest("b", "nginx:1")).unwrap();
        let second = s.scan(Dirty::default()).unwrap();
        assert_eq!(second.len(), 2);
        assert_eq!(
            annotation(&second[0], CONFIG_SEEN_ANNOTATION),
            annotation(&first[0], CONFIG_SEEN_ANNOTATION)
        );

        fs::remove_file(&a).unwrap();
        let third = s.scan(Dirty::default()).unwrap();
        assert_eq!(third.len(), 1);
        assert_eq!(s.files.len(), 1);
    }

    #[test]
    fn duplicate_pod_across_files_keeps_first() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("1.yaml"), manifest("a", "nginx:1")).unwrap();
        fs::write(dir.path().join("2.yaml"), manifest("a", "nginx:2")).unwrap();
        let (_, out) = scan_dir(dir.path());
        let pods = out.unwrap();
        assert_eq!(pods.len(), 1);
        assert_eq!(
            pods[0].spec.as_ref().unwrap().containers[0]
                .image
                .as_deref(),
            Some("nginx:1")
        );
    }

    #[test]
    fn missing_path_reports_empty_once() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, out) = scan_dir(&dir.path().join("absent"));
        assert_eq!(out, Some(Vec::new()));
        assert_eq!(s.scan(Dirty::default()), None);
    }

    #[test]
    fn single_file_path() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("only.yaml");
        fs::write(&f, manifest("only", "nginx:1")).unwrap();
        let (_, out) = scan_dir(&f);
        assert_eq!(out.unwrap().len(), 1);
    }

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
