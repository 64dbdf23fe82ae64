//! Everything read from /proc and the cgroup filesystem for one collection, in one pass on the
//! blocking pool (see [`read`]), so a collection makes one bounded trip off the async threads.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cm::layout::Layout;

use super::cgroup::{self, CgroupSample, MemorySample, PsiSet};
use super::procfs;
use super::types::InterfaceStats;

/// What to read besides the node itself.
#[derive(Clone, Debug)]
pub struct LocalRequest {
    pub layout: Layout,
    /// Pod UID → the pod's cgroup name.
    pub pod_cgroups: Vec<(String, String)>,
    /// Container ID → the container's cgroup name.
    pub container_cgroups: Vec<(String, String)>,
    /// The cgroup holding all pods ("/kubepods"), when pods have their own cgroups.
    pub kubepods: Option<String>,
    /// Sandbox ID → a process in the pod's network namespace.
    pub sandbox_pids: Vec<(String, i32)>,
    /// Network, rlimit and swap too, not only CPU and memory.
    pub full: bool,
    /// Pressure stall information too (cgroup v2 only; the KubeletPSI gate).
    pub psi: bool,
}

#[derive(Clone, Debug, Default)]
pub struct LocalSample {
    pub at: Option<SystemTime>,
    pub boot_time: Option<SystemTime>,
    pub node_cpu_ns: Option<u64>,
    pub node_memory: Option<MemorySample>,
    /// The whole machine's pressure, from /proc/pressure.
    pub node_psi: PsiSet,
    /// (used, free) swap bytes.
    pub node_swap: Option<(u64, u64)>,
    pub node_interfaces: Vec<InterfaceStats>,
    pub max_pid: Option<i64>,
    pub processes: Option<i64>,
    pub kubelet: CgroupSample,
    pub kubepods: Option<CgroupSample>,
    pub pods: HashMap<String, CgroupSample>,
    pub containers: HashMap<String, CgroupSample>,
    pub sandbox_interfaces: HashMap<String, Vec<InterfaceStats>>,
}

fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The node's memory from /proc/meminfo and /proc/vmstat, which mean the same on cgroup v1 and
/// v2: in use is total minus free, the working set leaves out inactive page cache, and the
/// machine's memory is the limit.
pub fn node_memory(meminfo: &str, vmstat: &str) -> Option<MemorySample> {
    let m = procfs::meminfo(meminfo);
    let v = procfs::flat_keyed(vmstat);
    let total = *m.get("MemTotal")?;
    let usage = total.saturating_sub(*m.get("MemFree")?);
    let inactive = m.get("Inactive(file)").copied().unwrap_or(0);
    Some(MemorySample {
        usage,
        working_set: usage.saturating_sub(inactive),
        rss: m.get("AnonPages").copied().unwrap_or(0),
        page_faults: v.get("pgfault").copied().unwrap_or(0),
        major_page_faults: v.get("pgmajfault").copied().unwrap_or(0),
        limit: Some(total),
    })
}

fn node_swap(meminfo: &str) -> Option<(u64, u64)> {
    let m = procfs::meminfo(meminfo);
    let total = *m.get("SwapTotal")?;
    let free = *m.get("SwapFree")?;
    Some((total.saturating_sub(free), free))
}

/// The kubelet's own usage. A kubelet that sits in the root cgroup of a controller (no
/// kubelet cgroup configured) would report the whole machine, so for those resources its
/// process counters stand in.
fn kubelet_sample(layout: &Layout, psi: bool) -> CgroupSample {
    let own = read("/proc/self/cgroup")
        .map(|t| procfs::proc_cgroups(&t))
        .unwrap_or_default();
    let (cpu_path, mem_path) = match layout {
        Layout::V1(_) => (
            own.v1.get("cpuacct").cloned(),
            own.v1.get("memory").cloned(),
        ),
        Layout::V2(_) => (own.unified.clone(), own.unified.clone()),
    };
    let is_root = |p: &Option<String>| p.as_deref().is_none_or(|p| p.trim_matches('/').is_empty());
    let dirs = cgroup::dirs_split(
        layout,
        cpu_path.as_deref().unwrap_or("/"),
        mem_path.as_deref().unwrap_or("/"),
    );
    // In the root cgroup its pressure would be the machine's.
    let mut s = cgroup::sample(&dirs, psi && !is_root(&cpu_path));
    let stat = read("/proc/self/stat").and_then(|t| procfs::proc_stat(&t));
    if is_root(&cpu_path) {
        s.cpu_usage_ns = stat.as_ref().map(|st| {
            procfs::ticks_to_nanos(st.utime_ticks + st.stime_ticks, procfs::clock_ticks())
        });
    }
    if is_root(&mem_path) {
        s.memory = stat.map(|st| {
            let rss = st.rss_pages.saturating_mul(procfs::page_size());
            MemorySample {
                usage: rss,
                working_set: rss,
                rss,
                ..Default::default()
            }
        });
    }
    s
}

fn rlimit() -> (Option<i64>, Option<i64>) {
    let num = |p: &str| read(p).and_then(|t| t.trim().parse::<i64>().ok());
    let max_pid = match (
        num("/proc/sys/kernel/pid_max"),
        num("/proc/sys/kernel/threads-max"),
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    (max_pid, crate::sys::process_count())
}

/// Reads everything `req` names. Blocking: run it on the blocking pool.
pub fn read_all(req: &LocalRequest) -> LocalSample {
    let at = SystemTime::now();
    let proc_stat = read("/proc/stat").unwrap_or_default();
    let meminfo = read("/proc/meminfo").unwrap_or_default();
    let vmstat = read("/proc/vmstat").unwrap_or_default();
    let mut out = LocalSample {
        at: Some(at),
        boot_time: procfs::boot_time(&proc_stat).map(|s| UNIX_EPOCH + Duration::from_secs(s)),
        node_cpu_ns: procfs::busy_cpu_ticks(&proc_stat)
            .map(|t| procfs::ticks_to_nanos(t, procfs::clock_ticks())),
        node_memory: node_memory(&meminfo, &vmstat),
        node_psi: if req.psi {
            cgroup::psi_set(|resource| read(format!("/proc/pressure/{resource}")))
        } else {
            PsiSet::default()
        },
        kubelet: kubelet_sample(&req.layout, req.psi),
        kubepods: req
            .kubepods
            .as_deref()
            .map(|name| cgroup::sample(&cgroup::dirs(&req.layout, name), req.psi))
            .filter(|s| !s.is_empty()),
        ..Default::default()
    };
    for (uid, name) in &req.pod_cgroups {
        let s = cgroup::sample(&cgroup::dirs(&req.layout, name), req.psi);
        if !s.is_empty() {
            out.pods.insert(uid.clone(), s);
        }
    }
    for (id, name) in &req.container_cgroups {
        let s = cgroup::sample(&cgroup::dirs(&req.layout, name), req.psi);
        if !s.is_empty() {
            out.containers.insert(id.clone(), s);
        }
    }
    if req.full {
        out.node_swap = node_swap(&meminfo);
        out.node_interfaces = read("/proc/net/dev")
            .map(|t| procfs::net_dev(&t))
            .unwrap_or_default();
        (out.max_pid, out.processes) = rlimit();
        for (sandbox, pid) in &req.sandbox_pids {
            if let Some(text) = read(format!("/proc/{pid}/net/dev")) {
                out.sandbox_interfaces
                    .insert(sandbox.clone(), procfs::net_dev(&text));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_memory_from_meminfo() {
        let m = node_memory(
            "MemTotal: 1000 kB\nMemFree: 200 kB\nInactive(file): 300 kB\nAnonPages: 100 kB\nSwapTotal: 0 kB\n",
            "pgfault 42\npgmajfault 2\n",
        )
        .unwrap();
        assert_eq!(m.usage, 800 * 1024);
        assert_eq!(m.working_set, 500 * 1024);
        assert_eq!(m.rss, 100 * 1024);
        assert_eq!(m.page_faults, 42);
        assert_eq!(m.major_page_faults, 2);
        assert_eq!(m.limit, Some(1000 * 1024));
        assert!(node_memory("MemFree: 1 kB\n", "").is_none());
        assert_eq!(
            node_swap("SwapTotal: 10 kB\nSwapFree: 4 kB\n"),
            Some((6144, 4096))
        );
    }

    #[test]
    fn reads_this_machine() {
        let layout = match crate::cm::layout::Layout::detect(Path::new("/")) {
            Ok(l) => l,
            Err(_) => return,
        };
        let s = read_all(&LocalRequest {
            layout,
            pod_cgroups: vec![],
            container_cgroups: vec![],
            kubepods: None,
            sandbox_pids: vec![(String::from("self"), std::process::id() as i32)],
            full: true,
            psi: true,
        });
        assert!(s.node_cpu_ns.unwrap_or(0) > 0);
        assert!(s.node_memory.is_some_and(|m| m.working_set > 0));
        assert!(s.boot_time.is_some());
        assert!(s.max_pid.unwrap_or(0) > 0);
        assert!(s.processes.unwrap_or(0) > 0);
        assert!(s.kubelet.cpu_usage_ns.is_some());
        assert!(s.kubelet.memory.is_some_and(|m| m.working_set > 0));
        assert!(s.sandbox_interfaces.contains_key("self"));
    }
}
