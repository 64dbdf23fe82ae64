//! The cgroupfs driver: cgroups are directories the kubelet makes and removes itself.

use super::{CgroupDriver, components};
use crate::cm::layout::Layout;
use crate::cm::name::CgroupName;
use crate::cm::resources::PodResources;
use crate::cm::{CgroupError, fs};

pub struct Cgroupfs {
    layout: Layout,
}

impl Cgroupfs {
    pub fn new(layout: Layout) -> Cgroupfs {
        Cgroupfs { layout }
    }
}

impl CgroupDriver for Cgroupfs {
    fn name(&self) -> &'static str {
        "cgroupfs"
    }

    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn parse_root(&self, root: &str) -> Result<CgroupName, CgroupError> {
        CgroupName::parse_cgroupfs(root)
    }

    fn literal(&self, name: &CgroupName) -> String {
        name.to_cgroupfs()
    }

    fn apply(&self, name: &CgroupName, limits: &PodResources) -> Result<(), CgroupError> {
        fs::ensure(&self.layout, name.components(), true)?;
        fs::apply(&self.layout, name.components(), limits)
    }

    fn destroy(&self, name: &CgroupName) -> Result<bool, CgroupError> {
        fs::remove(&self.layout, &[components(&self.literal(name))])
    }

    fn container_cgroup(&self, pod_literal: &str, container_id: &str) -> String {
        format!("{}/{container_id}", pod_literal.trim_end_matches('/'))
    }
}
