//! The plugins a folder offers: every unix socket under it, each with an identity that
//! changes when the socket is made anew (a restarted plugin), as upstream's watcher keys
//! plugins by path and creation time. Names starting with "." are ignored, as upstream does.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// How deep and how wide the scan goes: plugins put their sockets at the top or one level
/// down; the bounds keep a folder full of junk from costing more than a glance.
const MAX_DEPTH: usize = 3;
const MAX_ENTRIES: usize = 1024;

/// Distinguishes one socket from a later one at the same path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketId {
    dev: u64,
    ino: u64,
    ctime_ns: i128,
}

/// The sockets under `dir` now. An unreadable folder reads as empty: its plugins are gone.
pub fn scan(dir: &Path) -> BTreeMap<PathBuf, SocketId> {
    let mut found = BTreeMap::new();
    let mut budget = MAX_ENTRIES;
    walk(dir, 0, &mut budget, &mut found);
    found
}

fn walk(dir: &Path, depth: usize, budget: &mut usize, found: &mut BTreeMap<PathBuf, SocketId>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let path = entry.path();
        // symlink_metadata: a link to a socket elsewhere is not a plugin here.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let kind = meta.file_type();
        if kind.is_socket() {
            let id = SocketId {
                dev: meta.dev(),
                ino: meta.ino(),
                ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            };
            found.insert(path, id);
        } else if kind.is_dir() && depth + 1 < MAX_DEPTH {
            walk(&path, depth + 1, budget, found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sockets_at_the_top_and_below_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("a.sock");
        let _a = std::os::unix::net::UnixListener::bind(&top).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let below = dir.path().join("sub/b.sock");
        let _b = std::os::unix::net::UnixListener::bind(&below).unwrap();
        let _hidden = std::os::unix::net::UnixListener::bind(dir.path().join(".c.sock")).unwrap();
        std::fs::write(dir.path().join("d.sock"), "not a socket").unwrap();
        std::os::unix::fs::symlink(&top, dir.path().join("e.sock")).unwrap();
        let found = scan(dir.path());
        assert_eq!(found.keys().collect::<Vec<_>>(), vec![&top, &below]);
    }

    #[test]
    fn a_socket_made_anew_has_a_new_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.sock");
        let first = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let before = scan(dir.path())[&path];
        drop(first);
        std::fs::remove_file(&path).unwrap();
        // Another file first, so the new socket cannot reuse the inode.
        std::fs::write(dir.path().join("x"), "").unwrap();
        let _second = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert_ne!(scan(dir.path())[&path], before);
        assert!(scan(&dir.path().join("missing")).is_empty());
    }
}
