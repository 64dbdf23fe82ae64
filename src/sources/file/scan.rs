//! The blocking side of the source: lists the manifest path, decodes only the files that
//! changed, and tells whether the pod set differs from the one last sent.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Pod;
use tracing::{debug, error, info, warn};

use super::super::CONFIG_SEEN_ANNOTATION;
use super::manifest::{MAX_MANIFEST_BYTES, ManifestError, static_pod_from_manifest};
use super::watch::Dirty;
use crate::pod::{pod_full_name, pod_uid};

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

/// The blocking part: lists the path, re-decodes changed files, and decides whether the
/// resulting pod set differs from the one last sent.
pub(super) struct Scanner {
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
    pub(super) fn new(path: PathBuf, node_name: String, errors: ManifestErrors) -> Self {
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
    pub(super) fn scan(&mut self, dirty: Dirty) -> Option<Vec<Pod>> {
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

#[cfg(test)]
mod tests {
    use super::super::testing::{NODE, manifest};
    use super::*;
    use crate::sources::annotation;
    use std::fs;

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
}
