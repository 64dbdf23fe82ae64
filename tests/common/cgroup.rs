//! Reading a cgroup's limits from the host, on either hierarchy: the tests check what the kernel
//! was told, not what the kubelet reports, and the same test runs on this machine (cgroup v1)
//! and in the VM bed (cgroup v2 only).

use std::path::{Path, PathBuf};

use super::cgroup_v2_host;

/// The first cgroup directory named `leaf` (a container id, `pod<uid>`), in the hierarchy of
/// `controller` on v1 ("memory", "cpu"), in the one hierarchy on v2.
pub fn find(controller: &str, leaf: &str) -> Option<PathBuf> {
    let roots: Vec<String> = if cgroup_v2_host() {
        vec!["/sys/fs/cgroup".into()]
    } else if controller == "cpu" {
        // Joined with cpuacct on most v1 machines.
        vec![
            "/sys/fs/cgroup/cpu,cpuacct".into(),
            "/sys/fs/cgroup/cpu".into(),
        ]
    } else {
        vec![format!("/sys/fs/cgroup/{controller}")]
    };
    roots.iter().find_map(|root| {
        let out = std::process::Command::new("find")
            .args([root, "-maxdepth", "8", "-type", "d", "-name", leaf])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .map(PathBuf::from)
    })
}

/// The first field of `file` as a number: -1 for "max" (no limit on v2), -2 when unreadable.
fn read_first(dir: &Path, file: &str) -> i64 {
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    match text.split_whitespace().next() {
        Some("max") => -1,
        Some(n) => n.parse().unwrap_or(-2),
        None => -2,
    }
}

/// The memory limit in bytes: memory.limit_in_bytes on v1, memory.max on v2.
pub fn memory_limit(dir: &Path) -> i64 {
    if cgroup_v2_host() {
        read_first(dir, "memory.max")
    } else {
        read_first(dir, "memory.limit_in_bytes")
    }
}

/// The CFS quota in µs per period: cpu.cfs_quota_us on v1, the first field of cpu.max on v2
/// (-1 for none on both).
pub fn cpu_quota(dir: &Path) -> i64 {
    if cgroup_v2_host() {
        read_first(dir, "cpu.max")
    } else {
        read_first(dir, "cpu.cfs_quota_us")
    }
}

/// The directory of the cgroup called `name` ("/krs-it/kubepods"): in `controller`'s
/// hierarchy on v1, in the one hierarchy on v2.
pub fn named(controller: &str, name: &str) -> PathBuf {
    let base = if cgroup_v2_host() {
        PathBuf::from("/sys/fs/cgroup")
    } else {
        PathBuf::from("/sys/fs/cgroup").join(controller)
    };
    base.join(name.trim_start_matches('/'))
}

/// The limit on 2 MiB huge pages in bytes: hugetlb.2MB.limit_in_bytes on v1, hugetlb.2MB.max
/// on v2.
pub fn hugetlb_2m_limit(dir: &Path) -> i64 {
    if cgroup_v2_host() {
        read_first(dir, "hugetlb.2MB.max")
    } else {
        read_first(dir, "hugetlb.2MB.limit_in_bytes")
    }
}
