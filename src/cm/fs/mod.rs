//! The cgroup filesystem itself, whichever driver names the cgroups: creating a cgroup's
//! directories, writing its limits, killing what runs in it and removing it. v1 and v2 files
//! live in their own modules. All calls block; async callers use `spawn_blocking`.

mod v1;
mod v2;

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::CgroupError;
use super::layout::{Hierarchy, Layout};
use super::resources::PodResources;

#[cfg(test)]
pub(crate) use v1::inherit_cpuset;
#[cfg(test)]
pub(crate) use v2::words;

pub(crate) const KILL_WAIT: Duration = Duration::from_secs(2);
const RMDIR_ATTEMPTS: u32 = 5;
const POLL: Duration = Duration::from_millis(50);
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

pub(crate) fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CgroupError {
    let path = path.to_path_buf();
    move |source| CgroupError::Io { op, path, source }
}

pub(crate) fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    debug!(path = %path.display(), value, "Writing cgroup file");
    std::fs::write(path, value).map_err(io_err("write", path))
}

/// Contents of a cgroup file, empty when it does not exist.
pub(crate) fn read_trimmed(path: &Path) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub(crate) fn mkdir(path: &Path) -> Result<bool, CgroupError> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err("mkdir", path)(e)),
    }
}

/// The directories of the cgroup at `path` (components below each hierarchy's root) in every
/// hierarchy, whether or not they exist.
pub(crate) fn dirs<'a>(
    layout: &'a Layout,
    path: &[String],
) -> Vec<(PathBuf, Option<&'a Hierarchy>)> {
    let join = |base: &Path| path.iter().fold(base.to_path_buf(), |p, c| p.join(c));
    match layout {
        Layout::V1(hs) => hs.iter().map(|h| (join(&h.path), Some(h))).collect(),
        Layout::V2(root) => vec![(join(root), None)],
    }
}

/// Creates the cgroup's directories in every hierarchy (parents first); on v2 with
/// `enable_leaf` its children get the controllers too.
pub(crate) fn ensure(
    layout: &Layout,
    path: &[String],
    enable_leaf: bool,
) -> Result<(), CgroupError> {
    match layout {
        Layout::V1(hs) => {
            for h in hs {
                v1::ensure_v1(h, path)?;
            }
            Ok(())
        }
        Layout::V2(root) => v2::ensure_v2(root, path, enable_leaf),
    }
}

/// Writes the limits into the cgroup's files in every hierarchy.
pub(crate) fn apply(layout: &Layout, path: &[String], r: &PodResources) -> Result<(), CgroupError> {
    for (dir, h) in dirs(layout, path) {
        match h {
            Some(h) => v1::apply_v1(&dir, h, r)?,
            None => v2::apply_v2(&dir, r)?,
        }
    }
    Ok(())
}

/// Kills whatever still runs in the cgroups at `paths` (their children included) and removes
/// them from every hierarchy. Returns whether any existed.
pub(crate) fn remove(layout: &Layout, paths: &[Vec<String>]) -> Result<bool, CgroupError> {
    let existing: Vec<PathBuf> = paths
        .iter()
        .flat_map(|p| dirs(layout, p))
        .map(|(d, _)| d)
        .filter(|d| d.is_dir())
        .collect();
    if existing.is_empty() {
        return Ok(false);
    }
    kill_all(&existing);
    let mut busy = None;
    for dir in &existing {
        if let Err(e) = remove_tree(dir) {
            warn!(path = %dir.display(), err = %e, "Failed to remove cgroup");
            busy = Some(e);
        }
    }
    busy.map_or(Ok(true), Err)
}

/// "2MB" -> 2097152, the page-size spelling of hugetlb file names.
pub(crate) fn hugetlb_size(name: &str) -> Option<i64> {
    let (num, unit) = name.split_at(name.find(|c: char| !c.is_ascii_digit())?);
    let shift = match unit {
        "KB" => 10,
        "MB" => 20,
        "GB" => 30,
        _ => return None,
    };
    num.parse::<i64>().ok()?.checked_mul(1 << shift)
}

/// Every page size the kernel offers gets its limit in `r`, else `r`'s default, else stays.
pub(crate) fn apply_hugetlb(dir: &Path, suffix: &str, r: &PodResources) -> Result<(), CgroupError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(size) = name
            .to_str()
            .and_then(|n| n.strip_prefix("hugetlb."))
            .and_then(|n| n.strip_suffix(suffix))
            .and_then(hugetlb_size)
        else {
            continue;
        };
        let Some(limit) = r.hugepage_limits.get(&size).copied().or(r.hugepage_default) else {
            continue;
        };
        write_file(&entry.path(), &limit.to_string())?;
    }
    Ok(())
}

/// Every cgroup directory at and below `dir`, children after their parent.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(entries) = std::fs::read_dir(&out[i]) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

fn procs(dir: &Path) -> Vec<i32> {
    read_trimmed(&dir.join("cgroup.procs"))
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Alive and not a zombie (a zombie holds no resources and leaves its cgroup on reaping).
fn is_alive(pid: i32) -> bool {
    let stat = read_trimmed(Path::new(&format!("/proc/{pid}/stat")));
    match stat.rsplit_once(')') {
        Some((_, rest)) => !rest.trim_start().starts_with('Z'),
        None => false,
    }
}

fn live_pids(dirs: &[PathBuf]) -> Vec<i32> {
    let own = std::process::id() as i32;
    let mut pids: Vec<i32> = dirs
        .iter()
        .flat_map(|d| walk(d))
        .flat_map(|d| procs(&d))
        .filter(|p| *p > 1 && *p != own && is_alive(*p))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// SIGKILLs everything in the pod cgroups (container cgroups included) and waits a bounded
/// time for them to die.
pub(crate) fn kill_all(dirs: &[PathBuf]) {
    for dir in dirs {
        // cgroup v2's cgroup.kill takes the whole subtree at once, racing no forks.
        let kill_file = dir.join("cgroup.kill");
        if kill_file.is_file()
            && is_cgroupfs(dir)
            && let Err(e) = std::fs::write(&kill_file, "1")
        {
            warn!(path = %kill_file.display(), err = %e, "cgroup.kill failed");
        }
    }
    let deadline = Instant::now() + KILL_WAIT;
    loop {
        let pids = live_pids(dirs);
        if pids.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            warn!(?pids, "Processes still alive in pod cgroup after SIGKILL");
            return;
        }
        for pid in &pids {
            if let Err(err) = crate::sys::kill(*pid, libc::SIGKILL) {
                debug!(pid, %err, "kill failed");
            }
        }
        std::thread::sleep(POLL);
    }
}

/// Whether `path` is on a cgroup filesystem, where rmdir removes a cgroup despite its
/// interface files. Test trees on ordinary filesystems are removed recursively instead.
pub(crate) fn is_cgroupfs(path: &Path) -> bool {
    crate::sys::fs_magic(path)
        .is_some_and(|magic| magic == CGROUP_SUPER_MAGIC || magic == CGROUP2_SUPER_MAGIC)
}

fn remove_tree(dir: &Path) -> Result<(), CgroupError> {
    if !is_cgroupfs(dir) {
        return match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("remove", dir)(e)),
            _ => Ok(()),
        };
    }
    let mut dirs = walk(dir);
    dirs.reverse();
    for d in dirs {
        rmdir_retry(&d)?;
    }
    Ok(())
}

/// The kernel refuses rmdir (EBUSY) until the last task has fully left; retry briefly.
pub(crate) fn rmdir_retry(dir: &Path) -> Result<(), CgroupError> {
    let mut attempt = 0;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                attempt += 1;
                if attempt >= RMDIR_ATTEMPTS {
                    return Err(CgroupError::Busy {
                        path: dir.to_path_buf(),
                        source: e,
                    });
                }
                std::thread::sleep(POLL * 2);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hugetlb_names() {
        assert_eq!(hugetlb_size("2MB"), Some(2 * 1024 * 1024));
        assert_eq!(hugetlb_size("1GB"), Some(1 << 30));
        assert_eq!(hugetlb_size("64KB"), Some(64 * 1024));
        assert_eq!(hugetlb_size("2XB"), None);
        assert_eq!(hugetlb_size("MB"), None);
    }
}
