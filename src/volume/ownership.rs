//! A mounted volume given to the pod's `fsGroup`, as upstream's SetVolumeOwnership does it:
//! every file and folder goes to the group (links themselves, never what they point to),
//! files gain group read (and write unless read-only), folders also group search and setgid
//! so that new files inherit the group. With `fsGroupChangePolicy: OnRootMismatch` nothing is
//! walked when the volume's root already has the group and those bits.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use tracing::warn;

const RW: u32 = 0o660;
const RO: u32 = 0o440;
const EXEC: u32 = 0o110;
const SETGID: u32 = 0o2000;
/// How deep the walk goes; a deeper tree is left as it is below that depth.
const MAX_DEPTH: usize = 256;

/// Gives the tree at `root` to `gid`. Failures on single files are logged and passed over,
/// as upstream does; only a root that cannot be read is an error.
pub fn set_volume_ownership(
    root: &Path,
    gid: u32,
    read_only: bool,
    on_root_mismatch: bool,
) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(root)?;
    if on_root_mismatch && !needs_change(&meta, gid, read_only) {
        return Ok(());
    }
    change(root, &meta, gid, read_only);
    if meta.is_dir() {
        walk(root, gid, read_only, 0);
    }
    Ok(())
}

fn needs_change(meta: &std::fs::Metadata, gid: u32, read_only: bool) -> bool {
    if meta.gid() != gid || !meta.is_dir() {
        return true;
    }
    let wanted = if read_only { RO } else { RW } | EXEC;
    let mode = meta.mode();
    mode & wanted != wanted || mode & SETGID == 0
}

fn walk(dir: &Path, gid: u32, read_only: bool, depth: usize) {
    if depth >= MAX_DEPTH {
        warn!(path = %dir.display(), "Volume ownership: tree too deep, not descending");
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        warn!(path = %dir.display(), "Volume ownership: cannot read folder");
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        change(&path, &meta, gid, read_only);
        if meta.is_dir() {
            walk(&path, gid, read_only, depth + 1);
        }
    }
}

fn change(path: &Path, meta: &std::fs::Metadata, gid: u32, read_only: bool) {
    if let Err(e) = std::os::unix::fs::lchown(path, None, Some(gid)) {
        warn!(path = %path.display(), err = %e, "Lchown failed");
    }
    // A link's mode means nothing, and chmod would reach through it to its target.
    if meta.file_type().is_symlink() {
        return;
    }
    let mut mask = if read_only { RO } else { RW };
    if meta.is_dir() {
        mask |= SETGID | EXEC;
    }
    let mode = (meta.mode() & 0o7777) | mask;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        warn!(path = %path.display(), err = %e, "chmod failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn files_and_folders_gain_the_group_bits_and_links_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("vol");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f"), "x").unwrap();
        std::fs::set_permissions(root.join("sub/f"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
        let target = dir.path().join("outside");
        std::fs::write(&target, "y").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&target, root.join("link")).unwrap();
        // Our own group: a test that is not root may still give files to it.
        let gid = std::fs::metadata(dir.path()).unwrap().gid();
        set_volume_ownership(&root, gid, false, false).unwrap();
        assert_eq!(mode(&root), 0o2770);
        assert_eq!(mode(&root.join("sub")) & 0o2070, 0o2070);
        assert_eq!(mode(&root.join("sub/f")), 0o660);
        assert_eq!(mode(&target), 0o600, "a link's target must not change");
    }

    #[test]
    fn on_root_mismatch_skips_a_root_that_is_right_already() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("vol");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("f"), "x").unwrap();
        std::fs::set_permissions(root.join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o2770)).unwrap();
        let gid = std::fs::metadata(&root).unwrap().gid();
        set_volume_ownership(&root, gid, false, true).unwrap();
        assert_eq!(
            mode(&root.join("f")),
            0o600,
            "the walk should have been skipped"
        );
        set_volume_ownership(&root, gid, true, false).unwrap();
        assert_eq!(mode(&root.join("f")), 0o640);
    }
}
