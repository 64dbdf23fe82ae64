//! Where the cgroup hierarchies are mounted, and which cgroup version the node runs.
//!
//! A node is treated as cgroup v2 only when a cgroup2 filesystem is mounted at
//! /sys/fs/cgroup (the unified layout); the hybrid layout (v1 controllers plus an empty
//! cgroup2 at /sys/fs/cgroup/unified) is v1, as upstream treats it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::CgroupError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// v1 controllers a cgroupfs-driver kubelet creates pod cgroups in (all that are mounted).
pub const V1_CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "pids",
    "hugetlb",
    "freezer",
    "blkio",
    "devices",
    "net_cls",
    "net_prio",
    "perf_event",
    "rdma",
    "misc",
];

/// One mounted v1 hierarchy and the controllers bound to it (e.g. cpu,cpuacct).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub path: PathBuf,
    pub controllers: BTreeSet<String>,
}

impl Hierarchy {
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.contains(controller)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    V1(Vec<Hierarchy>),
    V2(PathBuf),
}

impl Layout {
    pub fn version(&self) -> CgroupVersion {
        match self {
            Layout::V1(_) => CgroupVersion::V1,
            Layout::V2(_) => CgroupVersion::V2,
        }
    }

    /// Finds the hierarchies under `fs_root` (normally "/"): from its mount table when there
    /// is one, else by looking at `<fs_root>/sys/fs/cgroup` (how tests lay out fake trees).
    pub fn detect(fs_root: &Path) -> Result<Layout, CgroupError> {
        let base = fs_root.join("sys/fs/cgroup");
        if let Ok(mountinfo) = std::fs::read_to_string(fs_root.join("proc/self/mountinfo"))
            && let Some(layout) = from_mountinfo(&mountinfo, fs_root)
        {
            return Ok(layout);
        }
        probe(&base).ok_or(CgroupError::NotMounted(base))
    }
}

/// Undoes the octal escapes (`\040` for a space) the kernel uses in mountinfo paths.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        if bytes[i] == b'\\'
            && let Some(d) = octal
        {
            let v = d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            out.push(u8::try_from(v).unwrap_or(b'?'));
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn under_root(fs_root: &Path, mount_point: &str) -> PathBuf {
    fs_root.join(mount_point.trim_start_matches('/'))
}

fn from_mountinfo(mountinfo: &str, fs_root: &Path) -> Option<Layout> {
    let mut hierarchies: Vec<Hierarchy> = Vec::new();
    let mut unified_at_base = None;
    let mut any_cgroup2 = None;
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mount_point) = pre.split(' ').nth(4) else {
            continue;
        };
        let mut post = post.split(' ');
        let fstype = post.next().unwrap_or_default();
        let super_opts = post.nth(1).unwrap_or_default();
        let mount_point = unescape(mount_point);
        match fstype {
            "cgroup2" => {
                let path = under_root(fs_root, &mount_point);
                if mount_point == "/sys/fs/cgroup" {
                    unified_at_base = Some(path.clone());
                }
                any_cgroup2.get_or_insert(path);
            }
            "cgroup" => {
                let controllers: BTreeSet<String> = super_opts
                    .split(',')
                    .filter(|o| V1_CONTROLLERS.contains(o))
                    .map(str::to_string)
                    .collect();
                if controllers.is_empty() {
                    continue;
                }
                let path = under_root(fs_root, &mount_point);
                // The same hierarchy can be mounted twice; prefer the shorter path.
                if let Some(h) = hierarchies
                    .iter_mut()
                    .find(|h| h.controllers == controllers)
                {
                    if path.as_os_str().len() < h.path.as_os_str().len() {
                        h.path = path;
                    }
                } else {
                    hierarchies.push(Hierarchy { path, controllers });
                }
            }
            _ => {}
        }
    }
    if let Some(root) = unified_at_base {
        return Some(Layout::V2(root));
    }
    if !hierarchies.is_empty() {
        hierarchies.sort_by(|a, b| a.path.cmp(&b.path));
        return Some(Layout::V1(hierarchies));
    }
    any_cgroup2.map(Layout::V2)
}

/// Layout from the directory shape alone: `cgroup.controllers` at the base means v2;
/// otherwise each known controller directory is a v1 hierarchy (symlinks such as
/// cpu -> cpu,cpuacct resolve to one hierarchy).
fn probe(base: &Path) -> Option<Layout> {
    if base.join("cgroup.controllers").is_file() {
        return Some(Layout::V2(base.to_path_buf()));
    }
    let mut hierarchies: Vec<Hierarchy> = Vec::new();
    for name in V1_CONTROLLERS {
        let path = base.join(name);
        if !path.is_dir() {
            continue;
        }
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        let existing = hierarchies
            .iter_mut()
            .find(|h| std::fs::canonicalize(&h.path).unwrap_or_else(|_| h.path.clone()) == real);
        match existing {
            Some(h) => {
                h.controllers.insert(name.to_string());
            }
            None => hierarchies.push(Hierarchy {
                path,
                controllers: BTreeSet::from([name.to_string()]),
            }),
        }
    }
    (!hierarchies.is_empty()).then_some(Layout::V1(hierarchies))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    const UNIFIED: &str = "\
25 1 0:22 / / rw - ext4 /dev/sda1 rw
30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn hybrid_is_v1() {
        let layout = from_mountinfo(HYBRID, Path::new("/")).unwrap();
        let Layout::V1(h) = layout else {
            panic!("expected v1, got {layout:?}");
        };
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].path, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        assert!(h[0].has("cpu") && h[0].has("cpuacct"));
        assert_eq!(h[1].path, Path::new("/sys/fs/cgroup/memory"));
    }

    #[test]
    fn unified_is_v2() {
        let layout = from_mountinfo(UNIFIED, Path::new("/host")).unwrap();
        assert_eq!(layout, Layout::V2(PathBuf::from("/host/sys/fs/cgroup")));
        assert_eq!(layout.version(), CgroupVersion::V2);
    }

    #[test]
    fn unescapes_paths() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/trailing\\04"), "/trailing\\04");
    }

    #[test]
    fn probe_layouts() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("sys/fs/cgroup");
        std::fs::create_dir_all(base.join("cpu,cpuacct")).unwrap();
        std::os::unix::fs::symlink("cpu,cpuacct", base.join("cpu")).unwrap();
        std::os::unix::fs::symlink("cpu,cpuacct", base.join("cpuacct")).unwrap();
        std::fs::create_dir_all(base.join("memory")).unwrap();
        let Some(Layout::V1(h)) = probe(&base) else {
            panic!("expected v1");
        };
        assert_eq!(h.len(), 2);
        assert!(h[0].has("cpu") && h[0].has("cpuacct"));

        std::fs::write(base.join("cgroup.controllers"), "cpu memory\n").unwrap();
        assert_eq!(probe(&base), Some(Layout::V2(base.clone())));
        assert_eq!(Layout::detect(dir.path()).unwrap(), Layout::V2(base));

        let empty = tempfile::tempdir().unwrap();
        assert!(Layout::detect(empty.path()).is_err());
    }
}
