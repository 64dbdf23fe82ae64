//! Turning one collection's raw readings (runtime view, /proc and cgroups, filesystems) into a
//! Summary. Pure functions, so the rules are tested without a runtime: where each number comes
//! from, what is omitted, and how pod totals fall back when the pod has no cgroup.

use std::collections::{HashMap, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;

use crate::cri::api;

use super::cgroup::{CgroupSample, MemorySample, Pressure, PsiLine, PsiSet};
use super::fs::{DiskUsage, FsInfo};
use super::local::LocalSample;
use super::procfs::DEFAULT_INTERFACE;
use super::rate::{CpuRates, CpuSample};
use super::runtime::RuntimeView;
use super::types::*;

/// Filesystem readings of a full collection.
#[derive(Clone, Debug, Default)]
pub struct FsView {
    pub at: Option<SystemTime>,
    /// The kubelet's root dir filesystem (nodefs; logs and volumes live there too).
    pub root: Option<FsInfo>,
    pub image_fs: Option<FsStats>,
    pub container_fs: Option<FsStats>,
    /// statvfs per writable-layer mount point the runtime named.
    pub mounts: HashMap<String, FsInfo>,
    /// Log folder usage per container ID.
    pub logs: HashMap<String, DiskUsage>,
    /// Volumes per pod UID.
    pub volumes: HashMap<String, Vec<VolumeReading>>,
    /// The kubelet-managed /etc/hosts per pod UID.
    pub etc_hosts: HashMap<String, DiskUsage>,
    /// Claim and inline CSI volumes per pod UID.
    pub claimed: HashMap<String, Vec<ClaimedReading>>,
}

/// A claim or inline CSI volume, as its plugin measures it.
#[derive(Clone, Debug)]
pub struct ClaimedReading {
    pub name: String,
    /// The claim (namespace, name) behind it.
    pub claim: Option<(String, String)>,
    pub stats: crate::volume::csi::client::VolumeStats,
}

#[derive(Clone, Debug)]
pub struct VolumeReading {
    pub name: String,
    pub fs: FsInfo,
    pub usage: DiskUsage,
    /// Counts toward ephemeral-storage (disk-backed emptyDir, configMap).
    pub ephemeral: bool,
}

/// What cadvisor-style metrics need beyond the Summary, per container.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerDetail {
    pub pod_uid: String,
    pub name: String,
    pub id: String,
    pub image: String,
    /// The container's cgroup name, when its pod has a cgroup.
    pub cgroup: Option<String>,
    pub rootfs_mount: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Collected {
    pub summary: Summary,
    pub containers: Vec<ContainerDetail>,
    /// Pod UID → the pod's cgroup name.
    pub pod_cgroups: HashMap<String, String>,
}

/// Everything one collection read.
pub struct Inputs<'a> {
    pub node_name: &'a str,
    pub view: &'a RuntimeView,
    pub local: &'a LocalSample,
    pub fs: Option<&'a FsView>,
    /// Pod specs by UID (volumes, images).
    pub pods: &'a HashMap<String, Pod>,
    pub pod_cgroups: &'a HashMap<String, String>,
    /// Container ID → the container's cgroup name, where the runtime puts it for the driver.
    pub container_cgroups: &'a HashMap<String, String>,
}

/// usageNanoCores from the rate cache: the sampler records (and moves the window), requests
/// only read.
pub struct Rates<'a> {
    pub cache: &'a CpuRates,
    pub update: bool,
    pub seen: HashSet<String>,
}

impl Rates<'_> {
    fn nano_cores(
        &mut self,
        key: String,
        at: Option<SystemTime>,
        usage: Option<u64>,
    ) -> Option<u64> {
        let sample = CpuSample {
            at_ns: i64::try_from(at?.duration_since(UNIX_EPOCH).ok()?.as_nanos()).ok()?,
            usage_ns: usage?,
        };
        let rate = if self.update {
            self.cache.update(&key, sample)
        } else {
            self.cache.get(&key)
        };
        self.seen.insert(key);
        rate
    }
}

fn uv(v: &Option<api::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

fn ns_time(ns: i64) -> Option<SystemTime> {
    Time::from_unix_nanos(ns).0
}

pub fn memory_stats(time: Time, m: &MemorySample) -> MemoryStats {
    MemoryStats {
        time,
        available_bytes: m.limit.map(|l| l.saturating_sub(m.working_set)),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
        rss_bytes: Some(m.rss),
        page_faults: Some(m.page_faults),
        major_page_faults: Some(m.major_page_faults),
        psi: None,
    }
}

fn psi_stats(p: &Pressure) -> PsiStats {
    let data = |l: &PsiLine| PsiData {
        total: l.total_us,
        avg10: l.avg10,
        avg60: l.avg60,
        avg300: l.avg300,
    };
    PsiStats {
        full: data(&p.full),
        some: data(&p.some),
    }
}

/// Puts a cgroup's (or the node's) pressure into its CPU and memory stats; returns its IO
/// stats, which are the IO pressure alone.
fn add_psi(
    psi: &PsiSet,
    at: Option<SystemTime>,
    cpu: &mut Option<CpuStats>,
    memory: &mut Option<MemoryStats>,
) -> Option<IoStats> {
    if let Some(c) = cpu {
        c.psi = psi.cpu.as_ref().map(psi_stats);
    }
    if let Some(m) = memory {
        m.psi = psi.memory.as_ref().map(psi_stats);
    }
    psi.io.as_ref().map(|p| IoStats {
        time: Time(at),
        psi: Some(psi_stats(p)),
    })
}

/// CPU, memory and IO of a pod or system cgroup.
type CgroupStats = (Option<CpuStats>, Option<MemoryStats>, Option<IoStats>);

fn cgroup_stats(
    key: String,
    at: Option<SystemTime>,
    s: &CgroupSample,
    rates: &mut Rates,
) -> CgroupStats {
    let mut cpu = s.cpu_usage_ns.map(|usage| CpuStats {
        time: Time(at),
        usage_nano_cores: rates.nano_cores(key, at, Some(usage)),
        usage_core_nano_seconds: Some(usage),
        psi: None,
    });
    let mut memory = s.memory.as_ref().map(|m| memory_stats(Time(at), m));
    let io = add_psi(&s.psi, at, &mut cpu, &mut memory);
    (cpu, memory, io)
}

fn fs_stats(
    time: Time,
    info: Option<&FsInfo>,
    used: Option<u64>,
    inodes_used: Option<u64>,
) -> FsStats {
    FsStats {
        time,
        available_bytes: info.map(|i| i.available),
        capacity_bytes: info.map(|i| i.capacity),
        used_bytes: used,
        inodes_free: info.map(|i| i.inodes_free),
        inodes: info.map(|i| i.inodes),
        inodes_used,
    }
}

/// CRI memory first; what the runtime leaves out comes from the container's cgroup. The
/// exception is availableBytes, which needs the limit: containerd reports 0 for a container
/// without one, where upstream (through cadvisor) leaves the field out.
fn container_memory(
    s: Option<&api::MemoryUsage>,
    cg: Option<&MemorySample>,
    at: Option<SystemTime>,
) -> Option<MemoryStats> {
    let from_cg = cg.map(|m| memory_stats(Time(at), m));
    let Some(m) = s else {
        return from_cg;
    };
    let fb = from_cg.unwrap_or_default();
    let available = match cg {
        Some(_) => fb.available_bytes,
        None => uv(&m.available_bytes),
    };
    Some(MemoryStats {
        time: Time::from_unix_nanos(m.timestamp),
        available_bytes: available,
        usage_bytes: uv(&m.usage_bytes).or(fb.usage_bytes),
        working_set_bytes: uv(&m.working_set_bytes).or(fb.working_set_bytes),
        rss_bytes: uv(&m.rss_bytes).or(fb.rss_bytes),
        page_faults: uv(&m.page_faults).or(fb.page_faults),
        major_page_faults: uv(&m.major_page_faults).or(fb.major_page_faults),
        psi: None,
    })
}

fn container_cpu(
    c: &api::Container,
    s: Option<&api::CpuUsage>,
    cg: Option<&CgroupSample>,
    local_at: Option<SystemTime>,
    rates: &mut Rates,
) -> Option<CpuStats> {
    let key = format!("ctr/{}", c.id);
    if let Some(cpu) = s.filter(|s| s.usage_core_nano_seconds.is_some()) {
        let at = ns_time(cpu.timestamp);
        let usage = uv(&cpu.usage_core_nano_seconds);
        let computed = rates.nano_cores(key, at, usage);
        return Some(CpuStats {
            time: Time(at),
            usage_nano_cores: computed.or(uv(&cpu.usage_nano_cores)),
            usage_core_nano_seconds: usage,
            psi: None,
        });
    }
    let usage = cg?.cpu_usage_ns?;
    Some(CpuStats {
        time: Time(local_at),
        usage_nano_cores: rates.nano_cores(key, local_at, Some(usage)),
        usage_core_nano_seconds: Some(usage),
        psi: None,
    })
}

fn container_stats(inp: &Inputs, c: &api::Container, rates: &mut Rates) -> ContainerStats {
    let stats = inp.view.stats.get(&c.id);
    let cg = inp.local.containers.get(&c.id);
    let mut out = ContainerStats {
        name: c
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default(),
        start_time: Time::from_unix_nanos(c.created_at),
        cpu: container_cpu(
            c,
            stats.and_then(|s| s.cpu.as_ref()),
            cg,
            inp.local.at,
            rates,
        ),
        memory: container_memory(
            stats.and_then(|s| s.memory.as_ref()),
            cg.and_then(|s| s.memory.as_ref()),
            inp.local.at,
        ),
        ..Default::default()
    };
    if let Some(cg) = cg {
        out.io = add_psi(&cg.psi, inp.local.at, &mut out.cpu, &mut out.memory);
    }
    let Some(fs) = inp.fs else {
        return out;
    };
    out.swap = stats.and_then(|s| s.swap.as_ref()).map(|s| SwapStats {
        time: Time::from_unix_nanos(s.timestamp),
        swap_available_bytes: uv(&s.swap_available_bytes),
        swap_usage_bytes: uv(&s.swap_usage_bytes),
    });
    out.rootfs = stats.and_then(|s| s.writable_layer.as_ref()).map(|w| {
        let mount = w.fs_id.as_ref().and_then(|f| fs.mounts.get(&f.mountpoint));
        // Zero until containerd's first measurement of a new container's layer.
        let time = Time::from_unix_nanos(w.timestamp);
        fs_stats(
            if time.0.is_some() { time } else { Time(fs.at) },
            mount,
            uv(&w.used_bytes),
            uv(&w.inodes_used),
        )
    });
    out.logs = fs
        .logs
        .get(&c.id)
        .map(|u| fs_stats(Time(fs.at), fs.root.as_ref(), Some(u.bytes), Some(u.inodes)));
    out
}

/// containerd leaves the network timestamp at 0; the collection time stands in.
fn interfaces_from_cri(n: &api::NetworkUsage, at: Option<SystemTime>) -> NetworkStats {
    let conv = |i: &api::NetworkInterfaceUsage| InterfaceStats {
        name: i.name.clone(),
        rx_bytes: uv(&i.rx_bytes),
        rx_errors: uv(&i.rx_errors),
        tx_bytes: uv(&i.tx_bytes),
        tx_errors: uv(&i.tx_errors),
    };
    let default = n.default_interface.as_ref().map(conv).unwrap_or_default();
    let mut interfaces: Vec<InterfaceStats> = n.default_interface.iter().map(conv).collect();
    interfaces.extend(n.interfaces.iter().map(conv));
    let time = Time::from_unix_nanos(n.timestamp);
    NetworkStats {
        time: if time.0.is_some() { time } else { Time(at) },
        default,
        interfaces,
    }
}

/// Network stats from an interface list, the default interface inlined when present.
pub fn network_stats(time: Time, interfaces: Vec<InterfaceStats>) -> NetworkStats {
    let default = interfaces
        .iter()
        .find(|i| i.name == DEFAULT_INTERFACE)
        .cloned()
        .unwrap_or_default();
    NetworkStats {
        time,
        default,
        interfaces,
    }
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

/// A pod without a cgroup of its own: its containers added up, as upstream falls back.
fn summed(containers: &[ContainerStats]) -> (Option<CpuStats>, Option<MemoryStats>) {
    let mut cpu: Option<CpuStats> = None;
    let mut mem: Option<MemoryStats> = None;
    for c in containers {
        if let Some(cc) = &c.cpu {
            let p = cpu.get_or_insert_with(CpuStats::default);
            p.time = p.time.max(cc.time);
            p.usage_core_nano_seconds = add(p.usage_core_nano_seconds, cc.usage_core_nano_seconds);
            p.usage_nano_cores = add(p.usage_nano_cores, cc.usage_nano_cores);
        }
        if let Some(cm) = &c.memory {
            let p = mem.get_or_insert_with(MemoryStats::default);
            p.time = p.time.max(cm.time);
            p.usage_bytes = add(p.usage_bytes, cm.usage_bytes);
            p.working_set_bytes = add(p.working_set_bytes, cm.working_set_bytes);
            p.rss_bytes = add(p.rss_bytes, cm.rss_bytes);
            p.page_faults = add(p.page_faults, cm.page_faults);
            p.major_page_faults = add(p.major_page_faults, cm.major_page_faults);
        }
    }
    (cpu, mem)
}

fn sandbox_cpu_memory(
    s: &api::PodSandboxStats,
    rates: &mut Rates,
    uid: &str,
) -> (Option<CpuStats>, Option<MemoryStats>) {
    let Some(linux) = &s.linux else {
        return (None, None);
    };
    let cpu = linux
        .cpu
        .as_ref()
        .filter(|c| c.usage_core_nano_seconds.is_some())
        .map(|c| {
            let at = ns_time(c.timestamp);
            let usage = uv(&c.usage_core_nano_seconds);
            let computed = rates.nano_cores(format!("pod/{uid}"), at, usage);
            CpuStats {
                time: Time(at),
                usage_nano_cores: computed.or(uv(&c.usage_nano_cores)),
                usage_core_nano_seconds: usage,
                psi: None,
            }
        });
    (cpu, container_memory(linux.memory.as_ref(), None, None))
}

fn pod_volumes(inp: &Inputs, uid: &str) -> Vec<VolumeStats> {
    let Some(fs) = inp.fs else {
        return Vec::new();
    };
    let local = fs
        .volumes
        .get(uid)
        .into_iter()
        .flatten()
        .map(|v| VolumeStats {
            fs: fs_stats(
                Time(fs.at),
                Some(&v.fs),
                Some(v.usage.bytes),
                Some(v.usage.inodes),
            ),
            name: v.name.clone(),
            pvc_ref: None,
        });
    let claimed = fs
        .claimed
        .get(uid)
        .into_iter()
        .flatten()
        .map(|v| VolumeStats {
            fs: FsStats {
                time: Time(fs.at),
                available_bytes: v.stats.available_bytes,
                capacity_bytes: v.stats.capacity_bytes,
                used_bytes: v.stats.used_bytes,
                inodes_free: v.stats.inodes_free,
                inodes: v.stats.inodes,
                inodes_used: v.stats.inodes_used,
            },
            name: v.name.clone(),
            pvc_ref: v
                .claim
                .clone()
                .map(|(namespace, name)| PvcReference { name, namespace }),
        });
    local.chain(claimed).collect()
}

/// Like upstream: container writable layers and logs, disk-backed ephemeral volumes and the
/// pod's /etc/hosts, against the node filesystem's capacity.
fn ephemeral_storage(fs: &FsView, uid: &str, containers: &[ContainerStats]) -> FsStats {
    let mut out = fs_stats(Time(fs.at), fs.root.as_ref(), None, None);
    for c in containers {
        for part in [&c.rootfs, &c.logs].into_iter().flatten() {
            out.used_bytes = add(out.used_bytes, part.used_bytes);
            out.inodes_used = add(out.inodes_used, part.inodes_used);
        }
    }
    let volumes = fs
        .volumes
        .get(uid)
        .into_iter()
        .flatten()
        .filter(|v| v.ephemeral);
    for u in volumes.map(|v| &v.usage).chain(fs.etc_hosts.get(uid)) {
        out.used_bytes = add(out.used_bytes, Some(u.bytes));
        out.inodes_used = add(out.inodes_used, Some(u.inodes));
    }
    out
}

fn pod_network(inp: &Inputs, sandbox: &api::PodSandbox) -> Option<NetworkStats> {
    let from_cri = inp
        .view
        .sandbox_stats
        .get(&sandbox.id)
        .and_then(|s| s.linux.as_ref())
        .and_then(|l| l.network.as_ref())
        .filter(|n| n.default_interface.is_some() || !n.interfaces.is_empty())
        .map(|n| interfaces_from_cri(n, inp.local.at));
    from_cri.or_else(|| {
        let ifs = inp.local.sandbox_interfaces.get(&sandbox.id)?;
        Some(network_stats(Time(inp.local.at), ifs.clone()))
    })
}

fn pod_stats(
    inp: &Inputs,
    sandbox: &api::PodSandbox,
    rates: &mut Rates,
    details: &mut Vec<ContainerDetail>,
) -> PodStats {
    let meta = sandbox.metadata.clone().unwrap_or_default();
    let spec = inp.pods.get(&meta.uid);
    let mut containers = Vec::new();
    for c in inp
        .view
        .containers
        .iter()
        .filter(|c| c.pod_sandbox_id == sandbox.id)
    {
        let stats = container_stats(inp, c, rates);
        details.push(detail(inp, &meta.uid, c, spec));
        containers.push(stats);
    }
    let (cpu, memory, io) = match inp.local.pods.get(&meta.uid) {
        Some(cg) => cgroup_stats(format!("pod/{}", meta.uid), inp.local.at, cg, rates),
        None => {
            let (cpu, memory) = match inp.view.sandbox_stats.get(&sandbox.id) {
                Some(s) => sandbox_cpu_memory(s, rates, &meta.uid),
                None => summed(&containers),
            };
            (cpu, memory, None)
        }
    };
    let mut out = PodStats {
        pod_ref: PodReference {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
        },
        start_time: Time::from_unix_nanos(sandbox.created_at),
        cpu,
        memory,
        io,
        ..Default::default()
    };
    if let Some(fs) = inp.fs {
        out.network = pod_network(inp, sandbox);
        out.volume_stats = pod_volumes(inp, &meta.uid);
        out.ephemeral_storage = Some(ephemeral_storage(fs, &meta.uid, &containers));
        out.process_stats = inp
            .view
            .sandbox_stats
            .get(&sandbox.id)
            .and_then(|s| s.linux.as_ref())
            .and_then(|l| l.process.as_ref())
            .and_then(|p| uv(&p.process_count))
            .map(|n| ProcessStats {
                process_count: Some(n),
            });
    }
    out.containers = containers;
    out
}

fn detail(inp: &Inputs, uid: &str, c: &api::Container, spec: Option<&Pod>) -> ContainerDetail {
    let name = c
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default();
    let mut image = c
        .image
        .as_ref()
        .map(|i| i.image.clone())
        .unwrap_or_default();
    if image.is_empty() || image.starts_with("sha256:") {
        let from_spec = spec
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
                    .find(|sc| sc.name == name)
            })
            .and_then(|sc| sc.image.clone());
        image = from_spec.unwrap_or(image);
    }
    ContainerDetail {
        pod_uid: uid.to_string(),
        name,
        id: c.id.clone(),
        image,
        cgroup: inp.container_cgroups.get(&c.id).cloned(),
        rootfs_mount: inp
            .view
            .stats
            .get(&c.id)
            .and_then(|s| s.writable_layer.as_ref())
            .and_then(|w| w.fs_id.as_ref())
            .map(|f| f.mountpoint.clone()),
    }
}

fn system_container(
    name: &str,
    start: Time,
    at: Option<SystemTime>,
    s: &CgroupSample,
    rates: &mut Rates,
) -> ContainerStats {
    let (cpu, memory, io) = cgroup_stats(format!("sys/{name}"), at, s, rates);
    ContainerStats {
        name: name.to_string(),
        start_time: start,
        cpu,
        memory,
        io,
        ..Default::default()
    }
}

fn node_stats(inp: &Inputs, rates: &mut Rates) -> NodeStats {
    let l = inp.local;
    let at = l.at;
    let start = Time(l.boot_time);
    let mut system = vec![system_container(
        SYSTEM_CONTAINER_KUBELET,
        start,
        at,
        &l.kubelet,
        rates,
    )];
    if let Some(pods) = &l.kubepods {
        system.push(system_container(
            SYSTEM_CONTAINER_PODS,
            start,
            at,
            pods,
            rates,
        ));
    }
    let mut node = NodeStats {
        node_name: inp.node_name.to_string(),
        system_containers: system,
        start_time: start,
        cpu: l.node_cpu_ns.map(|usage| CpuStats {
            time: Time(at),
            usage_nano_cores: rates.nano_cores("node".into(), at, Some(usage)),
            usage_core_nano_seconds: Some(usage),
            psi: None,
        }),
        memory: l.node_memory.as_ref().map(|m| memory_stats(Time(at), m)),
        ..Default::default()
    };
    node.io = add_psi(&l.node_psi, at, &mut node.cpu, &mut node.memory);
    let Some(fs) = inp.fs else {
        return node;
    };
    node.network = Some(network_stats(Time(at), l.node_interfaces.clone()));
    node.fs = fs.root.as_ref().map(|r| {
        fs_stats(
            Time(fs.at),
            Some(r),
            Some(r.used),
            Some(r.inodes.saturating_sub(r.inodes_free)),
        )
    });
    node.runtime = Some(RuntimeStats {
        image_fs: fs.image_fs.clone(),
        container_fs: fs.container_fs.clone().or_else(|| fs.image_fs.clone()),
    });
    node.rlimit = Some(RlimitStats {
        time: Time(at),
        max_pid: l.max_pid,
        num_of_running_processes: l.processes,
    });
    node.swap = l.node_swap.map(|(used, free)| SwapStats {
        time: Time(at),
        swap_available_bytes: Some(free),
        swap_usage_bytes: Some(used),
    });
    node
}

/// The Summary (cpu-and-memory only when `inp.fs` is None) plus cadvisor details.
pub fn assemble(inp: &Inputs, rates: &mut Rates) -> Collected {
    let node = node_stats(inp, rates);
    let mut details = Vec::new();
    let pods = inp
        .view
        .sandboxes
        .iter()
        .map(|s| pod_stats(inp, s, rates, &mut details))
        .collect();
    Collected {
        summary: Summary { node, pods },
        containers: details,
        pod_cgroups: inp.pod_cgroups.clone(),
    }
}

#[cfg(test)]
#[path = "assemble_tests.rs"]
mod tests;
