//! Writes a volume's files so that a container never sees half an update, with upstream's
//! layout (which programs watching these volumes rely on):
//!
//! ```text
//! <volume>/..2026_11_24_22_10_31.0123456789/<files>   the current payload
//! <volume>/..data -> ..2026_11_24_22_10_31.0123456789
//! <volume>/<top-level name> -> ..data/<top-level name>
//! ```
//!
//! An update writes a new timestamped folder, then swaps `..data` with one rename, then
//! fixes the top-level links and removes the old folder.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

const DATA_LINK: &str = "..data";
const DATA_LINK_TMP: &str = "..data_tmp";
const MAX_PATH_LEN: usize = 4096;
const MAX_NAME_LEN: usize = 255;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One file of a volume: its path inside the volume, contents and mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEntry {
    pub path: String,
    pub data: Vec<u8>,
    pub mode: u32,
}

/// The group a pod's `fsGroup` gives its volumes: every file and folder gets that group, files
/// become group-readable, folders group-traversable and setgid (upstream's rules for volumes
/// mounted read-only, as these are).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ownership {
    pub fs_group: Option<u32>,
}

impl Ownership {
    fn file_mode(self, mode: u32) -> u32 {
        match self.fs_group {
            Some(_) => mode | 0o440,
            None => mode,
        }
    }

    fn apply(self, path: &Path, is_dir: bool, base_mode: u32) -> Result<(), WriteError> {
        let Some(gid) = self.fs_group else {
            return Ok(());
        };
        std::os::unix::fs::lchown(path, None, Some(gid)).map_err(io(path))?;
        let mode = if is_dir {
            base_mode | 0o2550
        } else {
            self.file_mode(base_mode)
        };
        // After the chown: changing the group clears setgid on some filesystems.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io(path))
    }
}

/// Upstream's rules for payload paths: relative, no `..` element, no element starting with
/// `..` (those names are the writer's own), bounded lengths.
fn validate(path: &str) -> Result<(), WriteError> {
    let bad = |reason| {
        Err(WriteError::InvalidPath {
            path: path.to_string(),
            reason,
        })
    };
    if path.is_empty() {
        return bad("must not be empty");
    }
    if path.len() > MAX_PATH_LEN {
        return bad("is too long");
    }
    if Path::new(path).is_absolute() {
        return bad("must be relative");
    }
    for c in Path::new(path).components() {
        match c {
            Component::Normal(name) => {
                let name = name.to_string_lossy();
                if name.len() > MAX_NAME_LEN {
                    return bad("has an element that is too long");
                }
                if name.starts_with("..") {
                    return bad("must not start with '..'");
                }
            }
            Component::CurDir => {}
            _ => return bad("must not contain '..'"),
        }
    }
    Ok(())
}

fn top_level(path: &str) -> String {
    Path::new(path)
        .components()
        .find_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The payload as it is on disk in a timestamped folder: relative path → (data, mode).
fn read_current(dir: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&rel)) else {
            continue;
        };
        for entry in entries.flatten() {
            let rel = rel.join(entry.file_name());
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(rel);
            } else if let Ok(data) = std::fs::read(dir.join(&rel)) {
                let mode = meta.permissions().mode() & 0o7777;
                out.insert(rel.to_string_lossy().into_owned(), (data, mode));
            }
        }
    }
    out
}

fn new_data_dir(target: &Path) -> Result<PathBuf, WriteError> {
    let now = jiff::Timestamp::now();
    let stamp = now.strftime("..%Y_%m_%d_%H_%M_%S");
    for attempt in 0u32..100 {
        let name = format!("{stamp}.{:09}{attempt:02}", now.subsec_nanosecond());
        let dir = target.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                // Others must be able to walk the tree: the container may run as any user.
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                    .map_err(io(&dir))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(&dir)(e)),
        }
    }
    Err(io(target)(std::io::Error::other(
        "no free name for a new data folder",
    )))
}

fn write_payload(
    dir: &Path,
    payload: &BTreeMap<String, &FileEntry>,
    own: Ownership,
) -> Result<(), WriteError> {
    for (rel, f) in payload {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            let mut created = Vec::new();
            let mut p = parent;
            while p != dir && !p.exists() {
                created.push(p.to_path_buf());
                match p.parent() {
                    Some(up) => p = up,
                    None => break,
                }
            }
            for d in created.iter().rev() {
                std::fs::create_dir(d).map_err(io(d))?;
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))
                    .map_err(io(d))?;
                own.apply(d, true, 0o755)?;
            }
        }
        std::fs::write(&path, &f.data).map_err(io(&path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode))
            .map_err(io(&path))?;
        own.apply(&path, false, f.mode)?;
    }
    own.apply(dir, true, 0o755)
}

/// Makes `target` hold exactly `payload`. Returns whether anything changed (an identical
/// payload is left alone, so watchers see no event).
pub fn write(target: &Path, payload: &[FileEntry], own: Ownership) -> Result<bool, WriteError> {
    let mut wanted: BTreeMap<String, &FileEntry> = BTreeMap::new();
    for f in payload {
        validate(&f.path)?;
        let clean: PathBuf = Path::new(&f.path)
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        // A later item for the same path wins, as in upstream.
        wanted.insert(clean.to_string_lossy().into_owned(), f);
    }
    std::fs::create_dir_all(target).map_err(io(target))?;
    let data_link = target.join(DATA_LINK);
    let old = std::fs::read_link(&data_link).ok().map(|l| target.join(l));

    let unchanged = old.as_ref().is_some_and(|old| {
        let current = read_current(old);
        current.len() == wanted.len()
            && wanted.iter().all(|(rel, f)| {
                current.get(rel).is_some_and(|(data, mode)| {
                    *data == f.data && *mode == (own.file_mode(f.mode) & 0o7777)
                })
            })
    });
    let names: BTreeSet<String> = wanted.keys().map(|p| top_level(p)).collect();
    if !unchanged {
        let dir = new_data_dir(target)?;
        if let Err(e) = write_payload(&dir, &wanted, own) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        let tmp = target.join(DATA_LINK_TMP);
        let _ = std::fs::remove_file(&tmp);
        let name = dir.file_name().unwrap_or_default();
        symlink(name, &tmp).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &data_link).map_err(io(&data_link))?;
    }
    link_top_level(target, &names)?;
    if !unchanged && let Some(old) = old {
        std::fs::remove_dir_all(&old).map_err(io(&old))?;
    }
    Ok(!unchanged)
}

/// Each top-level name of the payload is a link into `..data`; names that left the payload
/// go. Anything else in the way (files an older layout wrote directly) is replaced.
fn link_top_level(target: &Path, names: &BTreeSet<String>) -> Result<(), WriteError> {
    for name in names {
        let link = target.join(name);
        let want = Path::new(DATA_LINK).join(name);
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => {
                if std::fs::read_link(&link).ok().as_deref() == Some(want.as_path()) {
                    continue;
                }
                std::fs::remove_file(&link).map_err(io(&link))?;
            }
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&link).map_err(io(&link))?,
            Ok(_) => std::fs::remove_file(&link).map_err(io(&link))?,
            Err(_) => {}
        }
        symlink(&want, &link).map_err(io(&link))?;
    }
    let entries = std::fs::read_dir(target).map_err(io(target))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || names.contains(&name) {
            continue;
        }
        let is_our_link = std::fs::read_link(entry.path())
            .is_ok_and(|l| l.starts_with(DATA_LINK) || l.starts_with(format!("{DATA_LINK}/")));
        if is_our_link {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(io(&path))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn file(path: &str, data: &str, mode: u32) -> FileEntry {
        FileEntry {
            path: path.into(),
            data: data.as_bytes().to_vec(),
            mode,
        }
    }

    const NO_GROUP: Ownership = Ownership { fs_group: None };

    #[test]
    fn writes_swaps_and_cleans_up() {
        let root = tempfile::tempdir().unwrap();
        let t = root.path().join("vol");
        let first = vec![file("a", "1", 0o644), file("dir/b", "2", 0o400)];
        assert!(write(&t, &first, NO_GROUP).unwrap());
        assert_eq!(std::fs::read_to_string(t.join("a")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(t.join("dir/b")).unwrap(), "2");
        assert_eq!(
            std::fs::read_link(t.join("dir")).unwrap(),
            Path::new("..data/dir")
        );
        let mode = std::fs::metadata(t.join("dir/b")).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o400);
        let data1 = std::fs::read_link(t.join(DATA_LINK)).unwrap();
        assert!(data1.to_string_lossy().starts_with("..20"), "{data1:?}");

        // The same payload again changes nothing.
        assert!(!write(&t, &first, NO_GROUP).unwrap());
        assert_eq!(std::fs::read_link(t.join(DATA_LINK)).unwrap(), data1);

        // A new payload: a changed value, a key gone, a key added.
        let second = vec![file("a", "one", 0o644), file("c", "3", 0o644)];
        assert!(write(&t, &second, NO_GROUP).unwrap());
        assert_eq!(std::fs::read_to_string(t.join("a")).unwrap(), "one");
        assert_eq!(std::fs::read_to_string(t.join("c")).unwrap(), "3");
        assert!(std::fs::symlink_metadata(t.join("dir")).is_err());
        assert!(!t.join(&data1).exists(), "the old data folder is removed");
        let left: Vec<String> = std::fs::read_dir(&t)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("..20"))
            .collect();
        assert_eq!(left.len(), 1, "{left:?}");

        // A mode change alone is a change.
        let third = vec![file("a", "one", 0o600), file("c", "3", 0o644)];
        assert!(write(&t, &third, NO_GROUP).unwrap());
    }

    #[test]
    fn bad_paths_are_refused_and_old_files_replaced() {
        let root = tempfile::tempdir().unwrap();
        let t = root.path().join("vol");
        for bad in ["/abs", "../up", "a/../../b", "..data", ""] {
            assert!(
                write(&t, &[file(bad, "x", 0o644)], NO_GROUP).is_err(),
                "{bad:?}"
            );
        }
        // A file an older layout wrote straight into the folder is replaced by the link.
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("a"), "stale").unwrap();
        write(&t, &[file("a", "fresh", 0o644)], NO_GROUP).unwrap();
        assert!(
            std::fs::symlink_metadata(t.join("a"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(t.join("a")).unwrap(), "fresh");
    }

    #[test]
    fn fs_group_owns_and_opens_to_the_group() {
        let root = tempfile::tempdir().unwrap();
        let t = root.path().join("vol");
        // The group new files get anyway: the one we may always chown to.
        let gid = std::fs::metadata(root.path()).unwrap().gid();
        let own = Ownership {
            fs_group: Some(gid),
        };
        write(&t, &[file("d/f", "x", 0o400)], own).unwrap();
        let m = std::fs::metadata(t.join("d/f")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o440);
        assert_eq!(m.gid(), gid);
        let d = std::fs::metadata(t.join("d")).unwrap();
        assert_eq!(d.mode() & 0o7777, 0o2755);
        assert!(!write(&t, &[file("d/f", "x", 0o400)], own).unwrap());
    }
}
