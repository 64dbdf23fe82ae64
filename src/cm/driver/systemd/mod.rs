//! The systemd driver: every kubelet cgroup is a slice unit systemd creates and owns
//! (`kubepods.slice`, `kubepods-burstable.slice`, `kubepods-burstable-pod<uid>.slice`),
//! started as a transient unit over D-Bus with its limits as unit properties. Like upstream
//! (through runc's libcontainer), the limits are then also written to the cgroup files, which
//! covers what systemd has no property for (hugetlb, v1 cpuset) and makes the values exact.
//!
//! Names are systemd's, rooted at the cgroup of PID 1 (systemd) with its `init.scope` left
//! out, so a kubelet under a systemd that runs in a container finds its slices too.

mod bus;

use std::path::{Path, PathBuf};

use tracing::{debug, info};

use super::{CgroupDriver, components};
use crate::cm::layout::{Hierarchy, Layout};
use crate::cm::name::CgroupName;
use crate::cm::resources::{PodResources, shares_to_weight};
use crate::cm::{CgroupError, fs};
pub use bus::BusError;
use bus::{Prop, Props, SystemdBus};

/// systemd's own spelling of "no limit" for the u64 properties.
const INFINITY: u64 = u64::MAX;
/// systemd keeps CPU quota per second in steps of 10 ms.
const QUOTA_STEP_USEC: u64 = 10_000;

pub struct Systemd {
    layout: Layout,
    bus: SystemdBus,
}

impl Systemd {
    pub fn new(fs_root: &Path, layout: Layout) -> Result<Systemd, CgroupError> {
        // systemd creates this at boot; it is how everything (libsystemd, runc) tells.
        let marker = fs_root.join("run/systemd/system");
        if !marker.is_dir() {
            return Err(CgroupError::SystemdNotRunning(marker));
        }
        let init = std::fs::read_to_string(fs_root.join("proc/1/cgroup")).map_err(|source| {
            CgroupError::Io {
                op: "read",
                path: fs_root.join("proc/1/cgroup"),
                source,
            }
        })?;
        let layout = rooted(layout, &init);
        info!(
            ?layout,
            "systemd cgroup driver: hierarchies rooted at PID 1's cgroup"
        );
        let bus = SystemdBus::start().map_err(|source| CgroupError::Io {
            op: "start the systemd bus thread",
            path: PathBuf::new(),
            source,
        })?;
        Ok(Systemd { layout, bus })
    }
}

impl CgroupDriver for Systemd {
    fn name(&self) -> &'static str {
        "systemd"
    }

    fn layout(&self) -> &Layout {
        &self.layout
    }

    fn parse_root(&self, root: &str) -> Result<CgroupName, CgroupError> {
        CgroupName::parse_systemd(root)
    }

    fn literal(&self, name: &CgroupName) -> String {
        name.to_systemd()
    }

    fn apply(&self, name: &CgroupName, limits: &PodResources) -> Result<(), CgroupError> {
        // The root slice is systemd's own.
        if !name.components().is_empty() {
            let unit = name.to_slice_unit();
            let v2 = matches!(self.layout, Layout::V2(_));
            let resources = properties(limits, v2);
            let mut create: Props = vec![
                ("Description", Prop::Str(format!("kubelet cgroup {unit}"))),
                ("DefaultDependencies", Prop::Bool(false)),
                ("CPUAccounting", Prop::Bool(true)),
                ("MemoryAccounting", Prop::Bool(true)),
                ("TasksAccounting", Prop::Bool(true)),
            ];
            create.push(if v2 {
                ("IOAccounting", Prop::Bool(true))
            } else {
                ("BlockIOAccounting", Prop::Bool(true))
            });
            create.extend(resources.iter().cloned());
            self.bus.start_or_set(&unit, create, resources)?;
        }
        // Hierarchies systemd does not manage (v1 cpuset, hugetlb, ...) get the same path.
        let path = components(&self.literal(name));
        fs::ensure(&self.layout, &path, true)?;
        fs::apply(&self.layout, &path, limits)
    }

    fn destroy(&self, name: &CgroupName) -> Result<bool, CgroupError> {
        let path = components(&self.literal(name));
        let dirs: Vec<PathBuf> = fs::dirs(&self.layout, &path)
            .into_iter()
            .map(|(d, _)| d)
            .filter(|d| d.is_dir())
            .collect();
        let unit = name.to_slice_unit();
        let known = self.bus.active_state(&unit)?.is_some();
        if dirs.is_empty() && !known {
            return Ok(false);
        }
        // Stopping a slice would signal what is inside with SIGTERM and wait out a timeout;
        // the pod's containers are already stopped, so stragglers get SIGKILL first.
        fs::kill_all(&dirs);
        if known {
            self.bus.stop(&unit)?;
            debug!(unit, "Stopped slice");
        }
        fs::remove(&self.layout, &[path])?;
        Ok(true)
    }

    fn container_cgroup(&self, pod_literal: &str, container_id: &str) -> String {
        // runc makes a scope per container; containerd names it after itself.
        format!(
            "{}/cri-containerd-{container_id}.scope",
            pod_literal.trim_end_matches('/')
        )
    }
}

impl From<BusError> for CgroupError {
    fn from(e: BusError) -> Self {
        CgroupError::Systemd(Box::new(e))
    }
}

/// The unit properties for these limits, as libcontainer sets them on v1 and v2.
fn properties(r: &PodResources, v2: bool) -> Props {
    let mut props = Props::new();
    if let Some(shares) = r.cpu_shares {
        props.push(if v2 {
            ("CPUWeight", Prop::U64(shares_to_weight(shares)))
        } else {
            ("CPUShares", Prop::U64(shares))
        });
    }
    if let Some(period) = r.cpu_period {
        props.push(("CPUQuotaPeriodUSec", Prop::U64(period)));
    }
    if let Some(quota) = r.cpu_quota {
        let per_sec = match u64::try_from(quota) {
            Ok(q) if q > 0 => {
                let period = r
                    .cpu_period
                    .unwrap_or(crate::cm::resources::DEFAULT_CFS_PERIOD_US)
                    .max(1);
                // Rounded up to systemd's step, so the limit is never tighter than asked.
                (q.saturating_mul(1_000_000) / period)
                    .div_ceil(QUOTA_STEP_USEC)
                    .saturating_mul(QUOTA_STEP_USEC)
            }
            _ => INFINITY,
        };
        props.push(("CPUQuotaPerSecUSec", Prop::U64(per_sec)));
    }
    if let Some(limit) = r.memory_limit {
        let limit = u64::try_from(limit).unwrap_or(INFINITY);
        props.push(if v2 {
            ("MemoryMax", Prop::U64(limit))
        } else {
            ("MemoryLimit", Prop::U64(limit))
        });
    }
    if let Some(limit) = r.pids_limit {
        props.push((
            "TasksMax",
            Prop::U64(u64::try_from(limit).unwrap_or(INFINITY)),
        ));
    }
    props
}

/// Each hierarchy moved down to PID 1's cgroup in it (from /proc/1/cgroup), without the
/// `init.scope` systemd keeps itself in.
fn rooted(layout: Layout, init_cgroup: &str) -> Layout {
    let entries: Vec<(Vec<&str>, &str)> = init_cgroup
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            Some((ctrls.split(',').collect(), path))
        })
        .collect();
    let base = |path: &str| {
        let p = path.trim_end_matches('/');
        let p = p.strip_suffix("/init.scope").unwrap_or(p);
        components(p)
    };
    let join = |mount: &Path, path: &str| {
        base(path)
            .iter()
            .fold(mount.to_path_buf(), |p, c| p.join(c))
    };
    match layout {
        Layout::V2(mount) => {
            let path = entries
                .iter()
                .find(|(c, _)| c.iter().all(|c| c.is_empty()))
                .map_or("/", |(_, p)| *p);
            Layout::V2(join(&mount, path))
        }
        Layout::V1(hs) => Layout::V1(
            hs.into_iter()
                .map(|h| {
                    let path = entries
                        .iter()
                        .find(|(c, _)| c.iter().any(|c| h.has(c)))
                        .map_or("/", |(_, p)| *p);
                    Hierarchy {
                        path: join(&h.path, path),
                        controllers: h.controllers,
                    }
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn hierarchy(path: &str, ctrls: &[&str]) -> Hierarchy {
        Hierarchy {
            path: PathBuf::from(path),
            controllers: ctrls.iter().map(|c| c.to_string()).collect::<BTreeSet<_>>(),
        }
    }

    #[test]
    fn hierarchies_rooted_at_init() {
        let v1 = Layout::V1(vec![
            hierarchy("/sys/fs/cgroup/cpu,cpuacct", &["cpu", "cpuacct"]),
            hierarchy("/sys/fs/cgroup/memory", &["memory"]),
            hierarchy("/sys/fs/cgroup/pids", &["pids"]),
        ]);
        let init = "12:pids:/\n4:cpu,cpuacct:/node-a\n3:memory:/node-a/init.scope\n\
                    1:name=systemd:/node-a/init.scope\n0::/node-a/init.scope\n";
        let Layout::V1(hs) = rooted(v1, init) else {
            panic!("v1")
        };
        let paths: Vec<&Path> = hs.iter().map(|h| h.path.as_path()).collect();
        assert_eq!(
            paths,
            [
                Path::new("/sys/fs/cgroup/cpu,cpuacct/node-a"),
                Path::new("/sys/fs/cgroup/memory/node-a"),
                Path::new("/sys/fs/cgroup/pids"),
            ]
        );
        let v2 = rooted(
            Layout::V2(PathBuf::from("/sys/fs/cgroup")),
            "0::/init.scope\n",
        );
        assert_eq!(v2, Layout::V2(PathBuf::from("/sys/fs/cgroup")));
    }

    #[test]
    fn properties_like_libcontainer() {
        let r = PodResources {
            cpu_shares: Some(256),
            cpu_quota: Some(25_000),
            cpu_period: Some(100_000),
            memory_limit: Some(64 << 20),
            pids_limit: Some(-1),
            ..Default::default()
        };
        let v1 = properties(&r, false);
        assert_eq!(
            v1,
            vec![
                ("CPUShares", Prop::U64(256)),
                ("CPUQuotaPeriodUSec", Prop::U64(100_000)),
                ("CPUQuotaPerSecUSec", Prop::U64(250_000)),
                ("MemoryLimit", Prop::U64(64 << 20)),
                ("TasksMax", Prop::U64(INFINITY)),
            ]
        );
        let v2 = properties(&r, true);
        assert_eq!(v2[0], ("CPUWeight", Prop::U64(10)));
        assert_eq!(v2[3], ("MemoryMax", Prop::U64(64 << 20)));
        // 1.5 ms per 100 ms is 15 ms per second, rounded up to systemd's 10 ms steps.
        let small = PodResources {
            cpu_quota: Some(1_500),
            cpu_period: Some(100_000),
            ..Default::default()
        };
        assert!(properties(&small, true).contains(&("CPUQuotaPerSecUSec", Prop::U64(20_000))));
        let unlimited = PodResources {
            cpu_quota: Some(-1),
            ..Default::default()
        };
        assert_eq!(
            properties(&unlimited, false),
            vec![("CPUQuotaPerSecUSec", Prop::U64(INFINITY))]
        );
        assert!(properties(&PodResources::default(), true).is_empty());
    }

    #[test]
    fn refuses_without_systemd() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::V2(dir.path().join("sys/fs/cgroup"));
        assert!(matches!(
            Systemd::new(dir.path(), layout),
            Err(CgroupError::SystemdNotRunning(_))
        ));
    }
}
