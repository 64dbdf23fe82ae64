//! Cgroup drivers: who creates and names the kubelet's cgroups. `cgroupfs` writes the cgroup
//! filesystem itself; `systemd` asks systemd for slices and lets it own them. Both sit behind
//! [`CgroupDriver`]; a new driver is a new module here and one line in [`for_config`].

mod cgroupfs;
pub mod systemd;

use std::path::Path;

use super::CgroupError;
use super::layout::Layout;
use super::name::CgroupName;
use super::resources::PodResources;

pub use cgroupfs::Cgroupfs;
pub use systemd::Systemd;

pub trait CgroupDriver: Send + Sync {
    /// The name the configuration uses ("cgroupfs", "systemd").
    fn name(&self) -> &'static str;

    /// The hierarchies, each rooted where this driver's names start.
    fn layout(&self) -> &Layout;

    /// The cgroup root given by --cgroup-root, in this driver's spelling.
    fn parse_root(&self, root: &str) -> Result<CgroupName, CgroupError>;

    /// The name in this driver's spelling: what the runtime takes as a cgroup parent, and the
    /// cgroup's path below each hierarchy root of [`CgroupDriver::layout`].
    fn literal(&self, name: &CgroupName) -> String;

    /// Creates the cgroup (its parents must exist) or updates it, with these limits.
    fn apply(&self, name: &CgroupName, limits: &PodResources) -> Result<(), CgroupError>;

    /// Kills what still runs in the cgroup and below, and removes it. Ok(false) when there
    /// was nothing to remove.
    fn destroy(&self, name: &CgroupName) -> Result<bool, CgroupError>;

    /// The cgroup path the runtime gives a container below its pod's cgroup.
    fn container_cgroup(&self, pod_literal: &str, container_id: &str) -> String;
}

/// The driver the configuration names, on the hierarchies found under `fs_root` ("/" but in
/// tests).
pub fn for_config(driver: &str, fs_root: &Path) -> Result<Box<dyn CgroupDriver>, CgroupError> {
    let layout = Layout::detect(fs_root)?;
    match driver {
        "" | "cgroupfs" => Ok(Box::new(Cgroupfs::new(layout))),
        "systemd" => Ok(Box::new(Systemd::new(fs_root, layout)?)),
        other => Err(CgroupError::UnknownDriver(other.to_string())),
    }
}

/// The path components of a literal name ("/a/b" → ["a", "b"]).
pub(super) fn components(literal: &str) -> Vec<String> {
    literal
        .split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}
