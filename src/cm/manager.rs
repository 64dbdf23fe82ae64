//! Node and pod cgroups for the cgroupfs driver.
//!
//! Layout (as upstream, below `--cgroup-root`):
//! `kubepods/` holds Guaranteed pods directly, `kubepods/burstable/` and
//! `kubepods/besteffort/` the other classes; each pod gets `pod<uid>`, and the runtime puts
//! the pod's containers below that. All calls do blocking filesystem work; async callers
//! should use `spawn_blocking`.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use tracing::{debug, info, warn};

use super::CgroupError;
#[cfg(test)]
use super::layout::CgroupVersion;
use super::layout::{Hierarchy, Layout};
use super::qos::{QosClass, pod_qos_class};
use super::resources::{
    MIN_SHARES, PodCgroupOptions, PodResources, pod_resources, shares_to_weight,
};

pub const KUBEPODS: &str = "kubepods";
pub const BURSTABLE: &str = "burstable";
pub const BESTEFFORT: &str = "besteffort";
pub const POD_PREFIX: &str = "pod";

/// Controllers enabled for children in cgroup v2, when the parent offers them.
const V2_CONTROLLERS: &[&str] = &["cpuset", "cpu", "io", "memory", "hugetlb", "pids"];
const KILL_WAIT: Duration = Duration::from_secs(2);
const RMDIR_ATTEMPTS: u32 = 5;
const POLL: Duration = Duration::from_millis(50);
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CgroupError {
    let path = path.to_path_buf();
    move |source| CgroupError::Io { op, path, source }
}

fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    debug!(path = %path.display(), value, "Writing cgroup file");
    std::fs::write(path, value).map_err(io_err("write", path))
}

/// Contents of a cgroup file, empty when it does not exist.
fn read_trimmed(path: &Path) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn mkdir(path: &Path) -> Result<bool, CgroupError> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err("mkdir", path)(e)),
    }
}

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

fn parse_root(cgroup_root: &str) -> Result<Vec<String>, CgroupError> {
    let parts: Vec<String> = cgroup_root
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    if parts.iter().any(|p| p == "." || p == "..") {
        return Err(CgroupError::InvalidRoot(cgroup_root.to_string()));
    }
    Ok(parts)
}

pub struct CgroupManager {
    layout: Layout,
    root: Vec<String>,
    cgroups_per_qos: bool,
    opts: PodCgroupOptions,
}

impl CgroupManager {
    /// `cgroup_root` is the kubelet's --cgroup-root ("" or "/" for the root); with
    /// `cgroups_per_qos` false pods share the root and no pod cgroups are made (as upstream).
    pub fn new(cgroup_root: &str, cgroups_per_qos: bool) -> Result<Self, CgroupError> {
        Self::with_fs_root(Path::new("/"), cgroup_root, cgroups_per_qos)
    }

    /// Like [`CgroupManager::new`] with the filesystem rooted at `fs_root` (tests).
    pub fn with_fs_root(
        fs_root: &Path,
        cgroup_root: &str,
        cgroups_per_qos: bool,
    ) -> Result<Self, CgroupError> {
        let layout = Layout::detect(fs_root)?;
        let root = parse_root(cgroup_root)?;
        info!(version = ?layout.version(), ?layout, cgroup_root, "Detected cgroup layout");
        Ok(CgroupManager {
            layout,
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
        self.layout.version()
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    fn node_components(&self) -> Vec<String> {
        let mut c = self.root.clone();
        if self.cgroups_per_qos {
            c.push(KUBEPODS.to_string());
        }
        c
    }

    fn qos_components(&self, qos: QosClass) -> Vec<String> {
        let mut c = self.node_components();
        match qos {
            QosClass::Guaranteed => {}
            QosClass::Burstable => c.push(BURSTABLE.to_string()),
            QosClass::BestEffort => c.push(BESTEFFORT.to_string()),
        }
        c
    }

    fn pod_components(&self, qos: QosClass, uid: &str) -> Vec<String> {
        let mut c = self.qos_components(qos);
        c.push(format!("{POD_PREFIX}{uid}"));
        c
    }

    fn cgroupfs_name(components: &[String]) -> String {
        format!("/{}", components.join("/"))
    }

    /// The cgroup parent to hand the runtime for this pod's sandbox and containers,
    /// e.g. "/kubepods/burstable/pod<uid>".
    pub fn pod_cgroup_parent(&self, pod: &Pod) -> String {
        if !self.cgroups_per_qos {
            return Self::cgroupfs_name(&self.root);
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        Self::cgroupfs_name(&self.pod_components(pod_qos_class(pod), uid))
    }

    /// Creates `<root>/kubepods` with its burstable and besteffort children in every
    /// hierarchy; BestEffort gets the minimum cpu share. Safe to call repeatedly.
    pub fn ensure_node_cgroups(&self) -> Result<(), CgroupError> {
        let mut dirs = vec![self.node_components()];
        if self.cgroups_per_qos {
            dirs.push(self.qos_components(QosClass::Burstable));
            dirs.push(self.qos_components(QosClass::BestEffort));
        }
        for comps in &dirs {
            self.ensure_path(comps, true)?;
        }
        if self.cgroups_per_qos {
            let besteffort = PodResources {
                cpu_shares: Some(MIN_SHARES),
                ..Default::default()
            };
            self.apply(&self.qos_components(QosClass::BestEffort), &besteffort)?;
        }
        Ok(())
    }

    /// Limits the cgroup every pod lives under (node allocatable enforcement).
    pub fn apply_node_limits(&self, limits: &PodResources) -> Result<(), CgroupError> {
        let comps = self.node_components();
        self.ensure_path(&comps, true)?;
        self.apply(&comps, limits)
    }

    /// Creates (or updates) the pod's cgroup with its resource settings and returns the
    /// cgroup parent name for the runtime.
    pub fn create_pod_cgroup(&self, pod: &Pod) -> Result<String, CgroupError> {
        if !self.cgroups_per_qos {
            return Ok(Self::cgroupfs_name(&self.root));
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        check_uid(uid)?;
        let default_spec = PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&default_spec);
        let resources = pod_resources(spec, &self.opts)?;
        let comps = self.pod_components(pod_qos_class(pod), uid);
        self.ensure_path(&comps, true)?;
        self.apply(&comps, &resources)?;
        Ok(Self::cgroupfs_name(&comps))
    }

    /// Directories of this path in every hierarchy, whether or not they exist.
    fn dirs(&self, comps: &[String]) -> Vec<(PathBuf, Option<&Hierarchy>)> {
        let join = |base: &Path| comps.iter().fold(base.to_path_buf(), |p, c| p.join(c));
        match &self.layout {
            Layout::V1(hs) => hs.iter().map(|h| (join(&h.path), Some(h))).collect(),
            Layout::V2(root) => vec![(join(root), None)],
        }
    }

    fn ensure_path(&self, comps: &[String], enable_leaf: bool) -> Result<(), CgroupError> {
        match &self.layout {
            Layout::V1(hs) => {
                for h in hs {
                    ensure_v1(h, comps)?;
                }
                Ok(())
            }
            Layout::V2(root) => ensure_v2(root, comps, enable_leaf),
        }
    }

    fn apply(&self, comps: &[String], r: &PodResources) -> Result<(), CgroupError> {
        for (dir, h) in self.dirs(comps) {
            match h {
                Some(h) => apply_v1(&dir, h, r)?,
                None => apply_v2(&dir, r)?,
            }
        }
        Ok(())
    }

    /// Kills whatever still runs in the pod's cgroup and removes it (with any container
    /// cgroups left below it) from every hierarchy. Absent cgroups are not an error.
    pub fn remove_pod_cgroup(&self, pod_uid: &str) -> Result<(), CgroupError> {
        if !self.cgroups_per_qos {
            return Ok(());
        }
        check_uid(pod_uid)?;
        let classes = [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ];
        let existing: Vec<PathBuf> = classes
            .iter()
            .flat_map(|q| self.dirs(&self.pod_components(*q, pod_uid)))
            .map(|(d, _)| d)
            .filter(|d| d.is_dir())
            .collect();
        if existing.is_empty() {
            return Ok(());
        }
        kill_all(&existing);
        let mut busy = None;
        for dir in &existing {
            if let Err(e) = remove_tree(dir) {
                warn!(path = %dir.display(), err = %e, "Failed to remove pod cgroup");
                busy = Some(e);
            }
        }
        match busy {
            Some(e) => Err(e),
            None => {
                info!(pod_uid, "Removed pod cgroup");
                Ok(())
            }
        }
    }

    /// UIDs of all pod cgroups present in any hierarchy (for orphan cleanup).
    #[cfg(test)]
    pub fn list_pod_uids(&self) -> Result<Vec<String>, CgroupError> {
        if !self.cgroups_per_qos {
            return Ok(Vec::new());
        }
        let mut uids = BTreeSet::new();
        let classes = [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ];
        for q in classes {
            for (dir, _) in self.dirs(&self.qos_components(q)) {
                let entries = match std::fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io_err("readdir", &dir)(e)),
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

fn ensure_v1(h: &Hierarchy, comps: &[String]) -> Result<(), CgroupError> {
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
fn inherit_cpuset(parent: &Path, dir: &Path) -> Result<(), CgroupError> {
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

fn words(s: &str) -> BTreeSet<String> {
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

fn ensure_v2(root: &Path, comps: &[String], enable_leaf: bool) -> Result<(), CgroupError> {
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

fn apply_v1(dir: &Path, h: &Hierarchy, r: &PodResources) -> Result<(), CgroupError> {
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

fn apply_v2(dir: &Path, r: &PodResources) -> Result<(), CgroupError> {
    if let Some(shares) = r.cpu_shares {
        write_file(
            &dir.join("cpu.weight"),
            &shares_to_weight(shares).to_string(),
        )?;
    }
    if let Some(quota) = r.cpu_quota {
        let period = r
            .cpu_period
            .unwrap_or(super::resources::DEFAULT_CFS_PERIOD_US);
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

/// "2MB" -> 2097152, the page-size spelling of hugetlb file names.
fn hugetlb_size(name: &str) -> Option<i64> {
    let (num, unit) = name.split_at(name.find(|c: char| !c.is_ascii_digit())?);
    let shift = match unit {
        "KB" => 10,
        "MB" => 20,
        "GB" => 30,
        _ => return None,
    };
    num.parse::<i64>().ok()?.checked_mul(1 << shift)
}

/// Every page size the kernel offers gets a limit: what the pod requested, else 0.
fn apply_hugetlb(dir: &Path, suffix: &str, r: &PodResources) -> Result<(), CgroupError> {
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
        let limit = r.hugepage_limits.get(&size).copied().unwrap_or(0);
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
fn kill_all(dirs: &[PathBuf]) {
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
fn is_cgroupfs(path: &Path) -> bool {
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
fn rmdir_retry(dir: &Path) -> Result<(), CgroupError> {
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
    use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::fs;

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

    #[test]
    fn hugetlb_names() {
        assert_eq!(hugetlb_size("2MB"), Some(2 * 1024 * 1024));
        assert_eq!(hugetlb_size("1GB"), Some(1 << 30));
        assert_eq!(hugetlb_size("64KB"), Some(64 * 1024));
        assert_eq!(hugetlb_size("2XB"), None);
        assert_eq!(hugetlb_size("MB"), None);
    }

    /// Real cgroup2 removal (cgroup.kill, rmdir of nested cgroups) on the hybrid host's
    /// unified mount, without touching any controller settings. Root only, like below.
    #[test]
    #[ignore]
    fn real_host_v2_removal() {
        let unified = PathBuf::from("/sys/fs/cgroup/unified");
        assert!(is_cgroupfs(&unified));
        let m = CgroupManager {
            layout: Layout::V2(unified.clone()),
            root: vec!["kubelet-rs-h-test".to_string()],
            cgroups_per_qos: true,
            opts: PodCgroupOptions::default(),
        };
        let comps = m.pod_components(QosClass::BestEffort, "real-v2-1");
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
        let m = CgroupManager::new(root, true)
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
        for (dir, h) in m.dirs(&m.pod_components(QosClass::Guaranteed, "real-host-test-1")) {
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
        let node = m.node_components();
        for comps in [
            m.qos_components(QosClass::Burstable),
            m.qos_components(QosClass::BestEffort),
            node.clone(),
            node[..1].to_vec(),
        ] {
            for (dir, _) in m.dirs(&comps) {
                rmdir_retry(&dir).unwrap();
            }
        }
    }
}
