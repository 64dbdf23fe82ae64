//! cgroup v1 files: one directory per hierarchy, cpuset inherited level by level.

use std::path::Path;

use super::{apply_hugetlb, mkdir, read_trimmed, write_file};
use crate::cm::CgroupError;
use crate::cm::layout::Hierarchy;
use crate::cm::resources::PodResources;

pub(super) fn ensure_v1(h: &Hierarchy, comps: &[String]) -> Result<(), CgroupError> {
    let mut dir = h.path.clone();
    for c in comps {
        let parent = dir.clone();
        dir.push(c);
        mkdir(&dir)?;
        if h.has("cpuset") {
            inherit_cpuset(&parent, &dir)?;
        }
    }
    Ok(())
}

/// A new v1 cpuset cgroup starts with no cpus and no memory nodes, and nothing can join it
/// until they are set; give it the parent's.
pub(crate) fn inherit_cpuset(parent: &Path, dir: &Path) -> Result<(), CgroupError> {
    for file in ["cpuset.cpus", "cpuset.mems"] {
        if !read_trimmed(&dir.join(file)).is_empty() {
            continue;
        }
        let value = read_trimmed(&parent.join(file));
        if !value.is_empty() {
            write_file(&dir.join(file), &value)?;
        }
    }
    Ok(())
}

pub(super) fn apply_v1(dir: &Path, h: &Hierarchy, r: &PodResources) -> Result<(), CgroupError> {
    if h.has("cpu") {
        if let Some(shares) = r.cpu_shares {
            write_file(&dir.join("cpu.shares"), &shares.to_string())?;
        }
        // Period first: the kernel checks quota against the current period.
        if let Some(period) = r.cpu_period {
            write_file(&dir.join("cpu.cfs_period_us"), &period.to_string())?;
        }
        if let Some(quota) = r.cpu_quota {
            write_file(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
        }
    }
    if h.has("memory")
        && let Some(limit) = r.memory_limit
    {
        write_file(&dir.join("memory.limit_in_bytes"), &limit.to_string())?;
    }
    if h.has("pids")
        && let Some(limit) = r.pids_limit
    {
        write_file(&dir.join("pids.max"), &limit.to_string())?;
    }
    if h.has("hugetlb") {
        apply_hugetlb(dir, ".limit_in_bytes", r)?;
    }
    Ok(())
}
