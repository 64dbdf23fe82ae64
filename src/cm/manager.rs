//! The kubelet's cgroups, by name: the node cgroup (`kubepods` below --cgroup-root), the QoS
//! tiers below it (`burstable`, `besteffort`; Guaranteed pods sit in `kubepods` directly) and
//! one cgroup per pod (`pod<uid>`), as upstream lays them out. The driver decides how names
//! are spelled and who creates the cgroups (see [`super::driver`]). All calls block; async
//! callers use `spawn_blocking`.

use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use tracing::info;

use super::CgroupError;
use super::driver::{self, CgroupDriver};
#[cfg(test)]
use super::layout::CgroupVersion;
use super::layout::Layout;
use super::name::CgroupName;
use super::resources::{MIN_SHARES, PodCgroupOptions, PodResources, pod_resources};
use crate::pod::qos::{QosClass, pod_qos_class};

pub const KUBEPODS: &str = "kubepods";
pub const BURSTABLE: &str = "burstable";
pub const BESTEFFORT: &str = "besteffort";
pub const POD_PREFIX: &str = "pod";

/// The hugetlb limit that means none (upstream's: the kernel caps it at what it can count).
const HUGEPAGES_UNBOUNDED: i64 = i64::MAX;

const CLASSES: [QosClass; 3] = [
    QosClass::Guaranteed,
    QosClass::Burstable,
    QosClass::BestEffort,
];

/// Pod UIDs come from API objects; they become path components, so refuse anything that
/// could climb out of the QoS directory.
fn check_uid(uid: &str) -> Result<(), CgroupError> {
    let ok = !uid.is_empty()
        && uid.len() <= 128
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(CgroupError::InvalidUid(uid.to_string()))
    }
}

pub struct CgroupManager {
    driver: Box<dyn CgroupDriver>,
    root: CgroupName,
    cgroups_per_qos: bool,
    opts: PodCgroupOptions,
}

impl CgroupManager {
    /// `cgroup_root` is the kubelet's --cgroup-root ("" or "/" for the root) in the driver's
    /// spelling; with `cgroups_per_qos` false pods share the root and no pod cgroups are made
    /// (as upstream).
    pub fn new(
        driver: &str,
        cgroup_root: &str,
        cgroups_per_qos: bool,
    ) -> Result<Self, CgroupError> {
        Self::with_driver(
            driver::for_config(driver, Path::new("/"))?,
            cgroup_root,
            cgroups_per_qos,
        )
    }

    /// The cgroupfs driver on the filesystem rooted at `fs_root` (tests).
    #[cfg(test)]
    pub fn with_fs_root(
        fs_root: &Path,
        cgroup_root: &str,
        cgroups_per_qos: bool,
    ) -> Result<Self, CgroupError> {
        Self::with_driver(
            driver::for_config("cgroupfs", fs_root)?,
            cgroup_root,
            cgroups_per_qos,
        )
    }

    pub fn with_driver(
        driver: Box<dyn CgroupDriver>,
        cgroup_root: &str,
        cgroups_per_qos: bool,
    ) -> Result<Self, CgroupError> {
        let root = driver.parse_root(cgroup_root)?;
        info!(driver = driver.name(), version = ?driver.layout().version(),
              layout = ?driver.layout(), cgroup_root, "Detected cgroup layout");
        Ok(CgroupManager {
            driver,
            root,
            cgroups_per_qos,
            opts: PodCgroupOptions::default(),
        })
    }

    /// CFS quota enforcement, CFS period and the per-pod pids limit (--pod-max-pids).
    pub fn with_options(mut self, opts: PodCgroupOptions) -> Self {
        self.opts = opts;
        self
    }

    pub fn cgroups_per_qos(&self) -> bool {
        self.cgroups_per_qos
    }

    #[cfg(test)]
    pub fn version(&self) -> CgroupVersion {
        self.driver.layout().version()
    }

    /// The hierarchies, rooted where the driver's names (as [`Self::pod_cgroup_parent`]
    /// returns them) start.
    pub fn layout(&self) -> &Layout {
        self.driver.layout()
    }

    fn node_name(&self) -> CgroupName {
        if self.cgroups_per_qos {
            self.root.child(KUBEPODS)
        } else {
            self.root.clone()
        }
    }

    fn qos_name(&self, qos: QosClass) -> CgroupName {
        let node = self.node_name();
        match qos {
            QosClass::Guaranteed => node,
            QosClass::Burstable => node.child(BURSTABLE),
            QosClass::BestEffort => node.child(BESTEFFORT),
        }
    }

    fn pod_name(&self, qos: QosClass, uid: &str) -> CgroupName {
        self.qos_name(qos).child(format!("{POD_PREFIX}{uid}"))
    }

    /// The cgroup holding every pod ("/kubepods" or "/kubepods.slice"), with cgroupsPerQOS.
    pub fn node_cgroup(&self) -> Option<String> {
        self.cgroups_per_qos
            .then(|| self.driver.literal(&self.node_name()))
    }

    /// On cgroup v2 with cgroupsPerQOS, the directories pod cgroups are made in: the node
    /// cgroup (Guaranteed pods) and its burstable and besteffort children.
    pub fn qos_dirs_v2(&self) -> Vec<std::path::PathBuf> {
        if !self.cgroups_per_qos || !matches!(self.layout(), Layout::V2(_)) {
            return Vec::new();
        }
        CLASSES
            .iter()
            .flat_map(|q| {
                let parts = driver::components(&self.driver.literal(&self.qos_name(*q)));
                super::fs::dirs(self.layout(), &parts)
            })
            .map(|(dir, _)| dir)
            .collect()
    }

    /// The cgroup parent to hand the runtime for this pod's sandbox and containers,
    /// e.g. "/kubepods/burstable/pod<uid>" (cgroupfs) or
    /// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice".
    pub fn pod_cgroup_parent(&self, pod: &Pod) -> String {
        if !self.cgroups_per_qos {
            return self.driver.literal(&self.root);
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        self.driver.literal(&self.pod_name(pod_qos_class(pod), uid))
    }

    /// The pod's own cgroup, when pods have one (cgroupsPerQOS).
    pub fn pod_cgroup(&self, pod: &Pod) -> Option<String> {
        self.cgroups_per_qos.then(|| self.pod_cgroup_parent(pod))
    }

    /// Where the runtime puts a container of a pod whose cgroup is `pod_cgroup`.
    pub fn container_cgroup(&self, pod_cgroup: &str, container_id: &str) -> String {
        self.driver.container_cgroup(pod_cgroup, container_id)
    }

    /// Creates `<root>/kubepods` with its burstable and besteffort children; BestEffort gets
    /// the minimum cpu share. Safe to call repeatedly.
    pub fn ensure_node_cgroups(&self) -> Result<(), CgroupError> {
        // The root itself must exist (cgroupfs makes it; systemd has it or refuses).
        let mut prefix = CgroupName::default();
        for part in self.root.components() {
            prefix = prefix.child(part.clone());
            self.driver.apply(&prefix, &PodResources::default())?;
        }
        if !self.cgroups_per_qos {
            return Ok(());
        }
        // Huge pages are not held back above the pods, as upstream: each pod's own cgroup
        // limits them (and the node allocatable limits, on the pods' cgroup).
        let unbounded = PodResources {
            hugepage_default: Some(HUGEPAGES_UNBOUNDED),
            ..Default::default()
        };
        self.driver.apply(&self.node_name(), &unbounded)?;
        self.driver
            .apply(&self.qos_name(QosClass::Burstable), &unbounded)?;
        let besteffort = PodResources {
            cpu_shares: Some(MIN_SHARES),
            ..unbounded
        };
        self.driver
            .apply(&self.qos_name(QosClass::BestEffort), &besteffort)
    }

    /// Limits the cgroup every pod lives under (node allocatable enforcement).
    pub fn apply_node_limits(&self, limits: &PodResources) -> Result<(), CgroupError> {
        self.driver.apply(&self.node_name(), limits)
    }

    /// Limits an existing cgroup (systemReservedCgroup, kubeReservedCgroup, in the driver's
    /// spelling) to what is reserved for it. As upstream, one that does not exist (in the cpu
    /// and memory hierarchies on v1) is an error, not made.
    pub fn apply_reserved_limits(
        &self,
        cgroup: &str,
        limits: &PodResources,
    ) -> Result<(), CgroupError> {
        let name = self.driver.parse_root(cgroup)?;
        let path = driver::components(&self.driver.literal(&name));
        let checked: Vec<std::path::PathBuf> = super::fs::dirs(self.layout(), &path)
            .into_iter()
            .filter(|(_, h)| h.is_none_or(|h| h.has("cpu") || h.has("memory")))
            .map(|(dir, _)| dir)
            .collect();
        if path.is_empty() || checked.is_empty() || !checked.iter().all(|d| d.is_dir()) {
            return Err(CgroupError::Missing(cgroup.to_string()));
        }
        self.driver.apply(&name, limits)
    }

    /// Creates (or updates) the pod's cgroup with its resource settings and returns the
    /// cgroup parent name for the runtime.
    pub fn create_pod_cgroup(&self, pod: &Pod) -> Result<String, CgroupError> {
        if !self.cgroups_per_qos {
            return Ok(self.driver.literal(&self.root));
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        check_uid(uid)?;
        let default_spec = PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&default_spec);
        let resources = pod_resources(spec, &self.opts)?;
        let name = self.pod_name(pod_qos_class(pod), uid);
        self.driver.apply(&name, &resources)?;
        Ok(self.driver.literal(&name))
    }

    /// The settings the pod's cgroup gets from its (allocated) spec; None without per-pod
    /// cgroups.
    pub fn pod_cgroup_resources(&self, pod: &Pod) -> Result<Option<PodResources>, CgroupError> {
        if !self.cgroups_per_qos {
            return Ok(None);
        }
        let default_spec = PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&default_spec);
        Ok(Some(pod_resources(spec, &self.opts)?))
    }

    /// Writes `resources` to the pod's existing cgroup (an in-place resize); fields that are
    /// None are left as they are.
    pub fn update_pod_cgroup(
        &self,
        pod: &Pod,
        resources: &PodResources,
    ) -> Result<(), CgroupError> {
        if !self.cgroups_per_qos {
            return Ok(());
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        check_uid(uid)?;
        self.driver
            .apply(&self.pod_name(pod_qos_class(pod), uid), resources)
    }

    /// Kills whatever still runs in the pod's cgroup and removes it (with any container
    /// cgroups left below it). Absent cgroups are not an error.
    pub fn remove_pod_cgroup(&self, pod_uid: &str) -> Result<(), CgroupError> {
        if !self.cgroups_per_qos {
            return Ok(());
        }
        check_uid(pod_uid)?;
        let mut removed = false;
        for qos in CLASSES {
            removed |= self.driver.destroy(&self.pod_name(qos, pod_uid))?;
        }
        if removed {
            info!(pod_uid, "Removed pod cgroup");
        }
        Ok(())
    }

    /// UIDs of all pod cgroups present in any hierarchy (for orphan cleanup).
    pub fn list_pod_uids(&self) -> Result<Vec<String>, CgroupError> {
        use std::collections::BTreeSet;
        if !self.cgroups_per_qos {
            return Ok(Vec::new());
        }
        let mut uids = BTreeSet::new();
        for q in CLASSES {
            let parts = driver::components(&self.driver.literal(&self.qos_name(q)));
            for (dir, _) in super::fs::dirs(self.layout(), &parts) {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let name = entry.file_name();
                    let Some(uid) = name.to_str().and_then(|n| n.strip_prefix(POD_PREFIX)) else {
                        continue;
                    };
                    if check_uid(uid).is_ok() && entry.path().is_dir() {
                        uids.insert(uid.to_string());
                    }
                }
            }
        }
        Ok(uids.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::driver::Cgroupfs;
    use crate::cm::fs::{KILL_WAIT, dirs, inherit_cpuset, is_cgroupfs, mkdir, rmdir_retry, words};
    use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::fs;
    use std::path::PathBuf;
    use std::time::Instant;

    fn pod(uid: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Pod {
        let list = |items: &[(&str, &str)]| {
            (!items.is_empty()).then(|| {
                items
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: list(req),
                    limits: list(lim),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    const GUARANTEED: &[(&str, &str)] = &[("cpu", "250m"), ("memory", "64Mi")];

    /// A fake v1 tree: cpu,cpuacct shared, cpuset with cpus/mems, memory, pids, hugetlb.
    fn v1_tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("sys/fs/cgroup");
        for d in ["cpu,cpuacct", "cpuset", "memory", "pids", "hugetlb"] {
            fs::create_dir_all(base.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("cpu,cpuacct", base.join("cpu")).unwrap();
        std::os::unix::fs::symlink("cpu,cpuacct", base.join("cpuacct")).unwrap();
        fs::write(base.join("cpuset/cpuset.cpus"), "0-3\n").unwrap();
        fs::write(base.join("cpuset/cpuset.mems"), "0\n").unwrap();
        dir
    }

    fn v2_tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("sys/fs/cgroup");
        fs::create_dir_all(&base).unwrap();
        fs::write(
            base.join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .unwrap();
        fs::write(base.join("cgroup.subtree_control"), "memory\n").unwrap();
        dir
    }

    fn read(path: PathBuf) -> String {
        fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .trim()
            .to_string()
    }

    #[test]
    fn cgroup_parent_names() {
        let tree = v1_tree();
        let m = CgroupManager::with_fs_root(tree.path(), "/kubelet-rs", true).unwrap();
        assert_eq!(m.version(), CgroupVersion::V1);
        assert_eq!(
            m.pod_cgroup_parent(&pod("u1", GUARANTEED, GUARANTEED)),
            "/kubelet-rs/kubepods/podu1"
        );
        assert_eq!(
            m.pod_cgroup_parent(&pod("u2", &[("cpu", "1")], &[])),
            "/kubelet-rs/kubepods/burstable/podu2"
        );
        assert_eq!(
            m.pod_cgroup_parent(&pod("u3", &[], &[])),
            "/kubelet-rs/kubepods/besteffort/podu3"
        );
        let root = CgroupManager::with_fs_root(tree.path(), "/", true).unwrap();
        assert_eq!(
            root.pod_cgroup_parent(&pod("u3", &[], &[])),
            "/kubepods/besteffort/podu3"
        );
        let flat = CgroupManager::with_fs_root(tree.path(), "", false).unwrap();
        assert_eq!(flat.pod_cgroup_parent(&pod("u3", &[], &[])), "/");
        assert_eq!(flat.create_pod_cgroup(&pod("u3", &[], &[])).unwrap(), "/");
        assert!(CgroupManager::with_fs_root(tree.path(), "/a/../b", true).is_err());
    }

    #[test]
    fn v1_node_and_pod_cgroups() {
        let tree = v1_tree();
        let base = tree.path().join("sys/fs/cgroup");
        let m = CgroupManager::with_fs_root(tree.path(), "/kubelet-rs", true)
            .unwrap()
            .with_options(PodCgroupOptions {
                pids_limit: Some(4096),
                ..Default::default()
            });
        m.ensure_node_cgroups().unwrap();
        for h in ["cpu,cpuacct", "cpuset", "memory", "pids", "hugetlb"] {
            assert!(
                base.join(h).join("kubelet-rs/kubepods/burstable").is_dir(),
                "{h}"
            );
            assert!(
                base.join(h).join("kubelet-rs/kubepods/besteffort").is_dir(),
                "{h}"
            );
        }
        assert_eq!(
            read(base.join("cpu,cpuacct/kubelet-rs/kubepods/besteffort/cpu.shares")),
            "2"
        );
        // cpuset inherited level by level.
        assert_eq!(read(base.join("cpuset/kubelet-rs/cpuset.cpus")), "0-3");
        assert_eq!(
            read(base.join("cpuset/kubelet-rs/kubepods/besteffort/cpuset.mems")),
            "0"
        );

        // A hugetlb file the kernel would offer, to see unrequested sizes pinned to 0.
        let g = pod("guar-1", GUARANTEED, GUARANTEED);
        let gdir = "kubelet-rs/kubepods/podguar-1";
        fs::create_dir_all(base.join("hugetlb").join(gdir)).unwrap();
        fs::write(
            base.join("hugetlb")
                .join(gdir)
                .join("hugetlb.2MB.limit_in_bytes"),
            "x",
        )
        .unwrap();
        assert_eq!(m.create_pod_cgroup(&g).unwrap(), format!("/{gdir}"));
        let cpu = base.join("cpu,cpuacct").join(gdir);
        assert_eq!(read(cpu.join("cpu.shares")), "256");
        assert_eq!(read(cpu.join("cpu.cfs_period_us")), "100000");
        assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "25000");
        assert_eq!(
            read(base.join("memory").join(gdir).join("memory.limit_in_bytes")),
            "67108864"
        );
        assert_eq!(read(base.join("pids").join(gdir).join("pids.max")), "4096");
        assert_eq!(
            read(base.join("cpuset").join(gdir).join("cpuset.cpus")),
            "0-3"
        );
        assert_eq!(
            read(
                base.join("hugetlb")
                    .join(gdir)
                    .join("hugetlb.2MB.limit_in_bytes")
            ),
            "0"
        );

        // Burstable without limits: shares only.
        let b = pod("burst-1", &[("cpu", "100m")], &[]);
        m.create_pod_cgroup(&b).unwrap();
        let bdir = base.join("cpu,cpuacct/kubelet-rs/kubepods/burstable/podburst-1");
        assert_eq!(read(bdir.join("cpu.shares")), "102");
        assert!(!bdir.join("cpu.cfs_quota_us").exists());

        let mut uids = m.list_pod_uids().unwrap();
        uids.sort();
        assert_eq!(uids, ["burst-1", "guar-1"]);

        m.remove_pod_cgroup("guar-1").unwrap();
        for h in ["cpu,cpuacct", "cpuset", "memory", "pids", "hugetlb"] {
            assert!(!base.join(h).join(gdir).exists(), "{h}");
        }
        assert_eq!(m.list_pod_uids().unwrap(), ["burst-1"]);
        // Idempotent.
        m.remove_pod_cgroup("guar-1").unwrap();
        assert!(matches!(
            m.remove_pod_cgroup("../x"),
            Err(CgroupError::InvalidUid(_))
        ));
    }

    #[test]
    fn v2_node_and_pod_cgroups() {
        let tree = v2_tree();
        let base = tree.path().join("sys/fs/cgroup");
        let m = CgroupManager::with_fs_root(tree.path(), "", true).unwrap();
        assert_eq!(m.version(), CgroupVersion::V2);
        m.ensure_node_cgroups().unwrap();
        // Only what was missing is requested (a plain file keeps just the last write).
        let root_ctl = read(base.join("cgroup.subtree_control"));
        assert!(
            root_ctl.contains("+cpu ") && !root_ctl.contains("rdma"),
            "{root_ctl}"
        );
        assert_eq!(
            words(&read(base.join("kubepods/cgroup.subtree_control")).replace('+', "")),
            words("cpuset cpu io memory hugetlb pids")
        );
        assert_eq!(read(base.join("kubepods/besteffort/cpu.weight")), "1");

        let g = pod("g2", GUARANTEED, GUARANTEED);
        assert_eq!(m.create_pod_cgroup(&g).unwrap(), "/kubepods/podg2");
        let dir = base.join("kubepods/podg2");
        assert_eq!(read(dir.join("cpu.weight")), "10");
        assert_eq!(read(dir.join("cpu.max")), "25000 100000");
        assert_eq!(read(dir.join("memory.max")), "67108864");
        assert!(!dir.join("pids.max").exists());

        let b = pod("b2", &[("cpu", "1")], &[("cpu", "2")]);
        assert_eq!(
            m.create_pod_cgroup(&b).unwrap(),
            "/kubepods/burstable/podb2"
        );
        let bdir = base.join("kubepods/burstable/podb2");
        assert_eq!(read(bdir.join("cpu.weight")), "39");
        assert_eq!(read(bdir.join("cpu.max")), "200000 100000");
        assert!(!bdir.join("memory.max").exists());

        assert_eq!(m.list_pod_uids().unwrap(), ["b2", "g2"]);
        m.remove_pod_cgroup("b2").unwrap();
        assert!(!bdir.exists());
        assert_eq!(m.list_pod_uids().unwrap(), ["g2"]);
    }

    #[test]
    fn huge_pages_above_pods_and_reserved_cgroups() {
        let tree = v2_tree();
        let base = tree.path().join("sys/fs/cgroup");
        let m = CgroupManager::with_fs_root(tree.path(), "", true).unwrap();
        // The hugetlb files a kernel with 2 MiB pages offers, pinned to 0 by an earlier run.
        for d in [
            "kubepods",
            "kubepods/burstable",
            "kubepods/besteffort",
            "system.slice",
        ] {
            fs::create_dir_all(base.join(d)).unwrap();
            fs::write(base.join(d).join("hugetlb.2MB.max"), "0").unwrap();
        }
        m.ensure_node_cgroups().unwrap();
        for d in ["kubepods", "kubepods/burstable", "kubepods/besteffort"] {
            assert_eq!(
                read(base.join(d).join("hugetlb.2MB.max")),
                i64::MAX.to_string(),
                "{d}: huge pages are limited per pod, not above"
            );
        }

        let reserved = PodResources {
            cpu_shares: Some(102),
            memory_limit: Some(100 << 20),
            ..Default::default()
        };
        m.apply_reserved_limits("/system.slice", &reserved).unwrap();
        let sys = base.join("system.slice");
        assert_eq!(read(sys.join("cpu.weight")), "4");
        assert_eq!(read(sys.join("memory.max")), (100 << 20).to_string());
        assert_eq!(
            read(sys.join("hugetlb.2MB.max")),
            "0",
            "not reserved: untouched"
        );
        // As upstream: a reserved cgroup is limited, never made.
        let err = m
            .apply_reserved_limits("/kube.slice", &reserved)
            .unwrap_err();
        assert_eq!(err.to_string(), "\"/kube.slice\" cgroup does not exist");
        assert!(!base.join("kube.slice").exists());
        assert!(matches!(
            m.apply_reserved_limits("/", &reserved),
            Err(CgroupError::Missing(_))
        ));
    }

    #[test]
    fn remove_kills_processes_in_container_cgroups() {
        let tree = v2_tree();
        let base = tree.path().join("sys/fs/cgroup");
        let m = CgroupManager::with_fs_root(tree.path(), "", true).unwrap();
        m.create_pod_cgroup(&pod("k1", &[], &[])).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let ctr = base.join("kubepods/besteffort/podk1/ctr-a");
        fs::create_dir_all(&ctr).unwrap();
        fs::write(ctr.join("cgroup.procs"), format!("{}\n", child.id())).unwrap();
        let started = Instant::now();
        m.remove_pod_cgroup("k1").unwrap();
        assert!(started.elapsed() < KILL_WAIT, "waited for a dead process");
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(!base.join("kubepods/besteffort/podk1").exists());
    }

    /// Real cgroup2 removal (cgroup.kill, rmdir of nested cgroups) on the hybrid host's
    /// unified mount, without touching any controller settings. Root only, like below.
    #[test]
    #[ignore]
    fn real_host_v2_removal() {
        let unified = PathBuf::from("/sys/fs/cgroup/unified");
        assert!(is_cgroupfs(&unified));
        let m = CgroupManager::with_driver(
            Box::new(Cgroupfs::new(Layout::V2(unified.clone()))),
            "/kubelet-rs-h-test",
            true,
        )
        .unwrap();
        let comps = m.pod_name(QosClass::BestEffort, "real-v2-1").0;
        let pod_dir = comps.iter().fold(unified.clone(), |p, c| p.join(c));
        fs::create_dir_all(pod_dir.join("ctr")).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        fs::write(pod_dir.join("ctr/cgroup.procs"), child.id().to_string()).unwrap();
        assert_eq!(m.list_pod_uids().unwrap(), ["real-v2-1"]);
        m.remove_pod_cgroup("real-v2-1").unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(!pod_dir.exists());
        for n in (1..comps.len()).rev() {
            rmdir_retry(&comps[..n].iter().fold(unified.clone(), |p, c| p.join(c))).unwrap();
        }
        assert!(!unified.join("kubelet-rs-h-test").exists());
    }

    /// Real check on the host: run as root with
    /// `cargo test --lib cm::manager::tests::real_host -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn real_host() {
        let root = "/kubelet-rs-h-test";
        let m = CgroupManager::new("cgroupfs", root, true)
            .unwrap()
            .with_options(PodCgroupOptions {
                pids_limit: Some(512),
                ..Default::default()
            });
        eprintln!("version: {:?}, layout: {:?}", m.version(), m.layout());
        m.ensure_node_cgroups().unwrap();
        let g = pod("real-host-test-1", GUARANTEED, GUARANTEED);
        let parent = m.create_pod_cgroup(&g).unwrap();
        assert_eq!(parent, "/kubelet-rs-h-test/kubepods/podreal-host-test-1");

        // Put a real process into the pod cgroup's child, as a runtime would.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut checked = false;
        for (dir, h) in dirs(
            m.layout(),
            m.pod_name(QosClass::Guaranteed, "real-host-test-1")
                .components(),
        ) {
            let ctr = dir.join("ctr");
            mkdir(&ctr).unwrap();
            if let Some(h) = h {
                if h.has("cpuset") {
                    inherit_cpuset(&dir, &ctr).unwrap();
                }
                if h.has("cpu") {
                    assert_eq!(read(dir.join("cpu.shares")), "256");
                    assert_eq!(read(dir.join("cpu.cfs_quota_us")), "25000");
                    checked = true;
                }
                if h.has("memory") {
                    assert_eq!(read(dir.join("memory.limit_in_bytes")), "67108864");
                }
                if h.has("pids") {
                    assert_eq!(read(dir.join("pids.max")), "512");
                }
            }
            fs::write(ctr.join("cgroup.procs"), child.id().to_string()).unwrap();
            eprintln!(
                "{} procs: {}",
                ctr.display(),
                read(ctr.join("cgroup.procs"))
            );
        }
        assert!(checked || m.version() == CgroupVersion::V2);
        assert_eq!(m.list_pod_uids().unwrap(), ["real-host-test-1"]);

        m.remove_pod_cgroup("real-host-test-1").unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(m.list_pod_uids().unwrap().is_empty());

        // Clean up the node-level tree this test made.
        let node = m.node_name().0;
        for comps in [
            m.qos_name(QosClass::Burstable).0,
            m.qos_name(QosClass::BestEffort).0,
            node.clone(),
            node[..1].to_vec(),
        ] {
            for (dir, _) in dirs(m.layout(), &comps) {
                rmdir_retry(&dir).unwrap();
            }
        }
    }
}
