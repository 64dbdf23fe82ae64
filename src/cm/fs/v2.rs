//! cgroup v2 files: one tree, controllers enabled for children through subtree_control.

use std::collections::BTreeSet;
use std::path::Path;

use tracing::warn;

use super::{apply_hugetlb, mkdir, read_trimmed, write_file};
use crate::cm::CgroupError;
use crate::cm::resources::{DEFAULT_CFS_PERIOD_US, PodResources, shares_to_weight};

/// Controllers enabled for children in cgroup v2, when the parent offers them.
const V2_CONTROLLERS: &[&str] = &["cpuset", "cpu", "io", "memory", "hugetlb", "pids"];

pub(crate) fn words(s: &str) -> BTreeSet<String> {
    s.split_whitespace()
        .map(|w| w.trim_start_matches('+').to_string())
        .collect()
}

/// Enables in `dir`'s subtree_control every wanted controller it offers; returns what is
/// enabled afterwards. Failure is logged, not fatal: the later write of a setting will say
/// exactly which file is missing.
fn enable_subtree(dir: &Path, available: &BTreeSet<String>) -> BTreeSet<String> {
    let control = dir.join("cgroup.subtree_control");
    let mut enabled = words(&read_trimmed(&control));
    let missing: Vec<&str> = V2_CONTROLLERS
        .iter()
        .copied()
        .filter(|c| available.contains(*c) && !enabled.contains(*c))
        .collect();
    if missing.is_empty() {
        return enabled;
    }
    let all: Vec<String> = missing.iter().map(|c| format!("+{c}")).collect();
    if std::fs::write(&control, all.join(" ")).is_ok() {
        enabled.extend(missing.iter().map(|c| c.to_string()));
        return enabled;
    }
    for c in missing {
        match std::fs::write(&control, format!("+{c}")) {
            Ok(()) => {
                enabled.insert(c.to_string());
            }
            Err(e) => warn!(path = %control.display(), controller = c, err = %e,
                            "Could not enable cgroup controller"),
        }
    }
    enabled
}

pub(super) fn ensure_v2(
    root: &Path,
    comps: &[String],
    enable_leaf: bool,
) -> Result<(), CgroupError> {
    let mut dir = root.to_path_buf();
    let mut available = words(&read_trimmed(&dir.join("cgroup.controllers")));
    for c in comps {
        let enabled = enable_subtree(&dir, &available);
        dir.push(c);
        mkdir(&dir)?;
        // The kernel offers a child exactly what its parent enabled; read it when we can.
        let offered = read_trimmed(&dir.join("cgroup.controllers"));
        available = if offered.is_empty() {
            enabled
        } else {
            words(&offered)
        };
    }
    if enable_leaf {
        enable_subtree(&dir, &available);
    }
    Ok(())
}

pub(super) fn apply_v2(dir: &Path, r: &PodResources) -> Result<(), CgroupError> {
    if let Some(shares) = r.cpu_shares {
        write_file(
            &dir.join("cpu.weight"),
            &shares_to_weight(shares).to_string(),
        )?;
    }
    if let Some(quota) = r.cpu_quota {
        let period = r.cpu_period.unwrap_or(DEFAULT_CFS_PERIOD_US);
        let quota = if quota < 0 {
            "max".to_string()
        } else {
            quota.to_string()
        };
        write_file(&dir.join("cpu.max"), &format!("{quota} {period}"))?;
    }
    if let Some(limit) = r.memory_limit {
        write_file(&dir.join("memory.max"), &limit.to_string())?;
    }
    if let Some(limit) = r.pids_limit {
        write_file(&dir.join("pids.max"), &limit.to_string())?;
    }
    apply_hugetlb(dir, ".max", r)
}
