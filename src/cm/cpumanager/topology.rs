//! The machine's CPU layout from sysfs: which core, socket and NUMA node each online CPU
//! belongs to. A core is named by its lowest thread (as upstream numbers cores), so ids are
//! unique across sockets. Tests read a fake tree to cover multi-socket machines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::cpuset::{CpuSet, CpuSetError};

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    List { path: PathBuf, source: CpuSetError },
    #[error("{path}: not a number: {text:?}")]
    Number { path: PathBuf, text: String },
    #[error("no online CPU in {0}")]
    NoCpus(PathBuf),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuInfo {
    pub core: u32,
    pub socket: u32,
    pub numa: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    pub cpus: BTreeMap<u32, CpuInfo>,
}

fn read(path: &Path) -> Result<String, TopologyError> {
    std::fs::read_to_string(path).map_err(|source| TopologyError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_list(path: &Path) -> Result<CpuSet, TopologyError> {
    CpuSet::parse(&read(path)?).map_err(|source| TopologyError::List {
        path: path.to_path_buf(),
        source,
    })
}

impl Topology {
    /// Reads `<sysfs>/devices/system/{cpu,node}`; `sysfs` is `/sys` outside tests.
    pub fn read(sysfs: &Path) -> Result<Self, TopologyError> {
        let cpu_dir = sysfs.join("devices/system/cpu");
        let online = read_list(&cpu_dir.join("online"))?;
        if online.is_empty() {
            return Err(TopologyError::NoCpus(cpu_dir));
        }
        let numa_of = numa_nodes(&sysfs.join("devices/system/node"))?;
        let mut cpus = BTreeMap::new();
        for cpu in online.iter() {
            let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
            let package = topo.join("physical_package_id");
            let text = read(&package)?;
            // Some hypervisors say -1: one socket.
            let socket = match text.trim().parse::<i64>() {
                Ok(n) => u32::try_from(n).unwrap_or(0),
                Err(_) => {
                    return Err(TopologyError::Number {
                        path: package,
                        text: text.trim().to_string(),
                    });
                }
            };
            // An online CPU always names its core, whatever the siblings list holds.
            let siblings = read_list(&topo.join("thread_siblings_list"))?;
            let core = siblings.intersection(&online).iter().next().unwrap_or(cpu);
            let numa = numa_of.get(&cpu).copied().unwrap_or(0);
            cpus.insert(cpu, CpuInfo { core, socket, numa });
        }
        Ok(Topology { cpus })
    }

    pub fn all(&self) -> CpuSet {
        self.cpus.keys().copied().collect()
    }

    fn ids(&self, f: impl Fn(&CpuInfo) -> u32) -> BTreeSet<u32> {
        self.cpus.values().map(f).collect()
    }

    pub fn cores(&self) -> BTreeSet<u32> {
        self.ids(|c| c.core)
    }

    pub fn sockets(&self) -> BTreeSet<u32> {
        self.ids(|c| c.socket)
    }

    pub fn numa_nodes(&self) -> BTreeSet<u32> {
        self.ids(|c| c.numa)
    }

    pub fn cpus_per_core(&self) -> usize {
        (self.cpus.len() / self.cores().len().max(1)).max(1)
    }

    pub fn cpus_per_socket(&self) -> usize {
        (self.cpus.len() / self.sockets().len().max(1)).max(1)
    }

    pub fn cpus_per_numa(&self) -> usize {
        (self.cpus.len() / self.numa_nodes().len().max(1)).max(1)
    }

    fn select(&self, f: impl Fn(&CpuInfo) -> bool) -> CpuSet {
        self.cpus
            .iter()
            .filter(|(_, info)| f(info))
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn cpus_in_core(&self, core: u32) -> CpuSet {
        self.select(|c| c.core == core)
    }

    pub fn cpus_in_socket(&self, socket: u32) -> CpuSet {
        self.select(|c| c.socket == socket)
    }

    pub fn cpus_in_numa(&self, numa: u32) -> CpuSet {
        self.select(|c| c.numa == numa)
    }
}

/// CPU → NUMA node from `node<N>/cpulist`; a machine without the folder is one node.
fn numa_nodes(node_dir: &Path) -> Result<BTreeMap<u32, u32>, TopologyError> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(node_dir) else {
        return Ok(out);
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        for cpu in read_list(&entry.path().join("cpulist"))?.iter() {
            out.insert(cpu, id);
        }
    }
    Ok(out)
}

/// Writes a fake sysfs tree: `layout[cpu] = (socket, core_siblings, numa)`.
#[cfg(test)]
pub fn fake_sysfs(root: &Path, layout: &[(u32, &str, u32)]) {
    let cpu_dir = root.join("devices/system/cpu");
    std::fs::create_dir_all(&cpu_dir).unwrap();
    let online: CpuSet = (0..layout.len() as u32).collect();
    std::fs::write(cpu_dir.join("online"), format!("{online}\n")).unwrap();
    let mut nodes: BTreeMap<u32, CpuSet> = BTreeMap::new();
    for (cpu, (socket, siblings, numa)) in layout.iter().enumerate() {
        let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
        std::fs::create_dir_all(&topo).unwrap();
        std::fs::write(topo.join("physical_package_id"), format!("{socket}\n")).unwrap();
        std::fs::write(topo.join("thread_siblings_list"), format!("{siblings}\n")).unwrap();
        nodes.entry(*numa).or_default().insert(cpu as u32);
    }
    for (numa, cpus) in nodes {
        let dir = root.join(format!("devices/system/node/node{numa}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpulist"), format!("{cpus}\n")).unwrap();
    }
}

/// 2 sockets (one NUMA node each) × 2 cores × 2 threads; cpu n and n+4 are siblings, so node
/// 0 holds 0,1,4,5 and node 1 holds 2,3,6,7 (the layout `fake_sysfs` takes).
#[cfg(test)]
pub const TWO_SOCKETS_HT: [(u32, &str, u32); 8] = [
    (0, "0,4", 0),
    (0, "1,5", 0),
    (1, "2,6", 1),
    (1, "3,7", 1),
    (0, "0,4", 0),
    (0, "1,5", 0),
    (1, "2,6", 1),
    (1, "3,7", 1),
];

#[cfg(test)]
pub fn two_sockets_ht() -> Topology {
    let dir = tempfile::tempdir().unwrap();
    fake_sysfs(dir.path(), &TWO_SOCKETS_HT);
    Topology::read(dir.path()).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_two_socket_machine_with_hyperthreads_is_read_from_sysfs() {
        let t = two_sockets_ht();
        assert_eq!(t.all().to_string(), "0-7");
        assert_eq!(t.cpus_per_core(), 2);
        assert_eq!(t.cpus_per_socket(), 4);
        assert_eq!(t.cpus_per_numa(), 4);
        assert_eq!(t.cpus_in_core(1).to_string(), "1,5");
        assert_eq!(t.cpus_in_socket(1).to_string(), "2-3,6-7");
        assert_eq!(t.cpus_in_numa(0).to_string(), "0-1,4-5");
        assert_eq!(
            t.cpus[&6],
            CpuInfo {
                core: 2,
                socket: 1,
                numa: 1
            }
        );
    }

    #[test]
    fn a_siblings_list_naming_only_offline_cpus_leaves_the_cpu_its_own_core() {
        let dir = tempfile::tempdir().unwrap();
        fake_sysfs(dir.path(), &[(0, "7", 0), (0, "1,9", 0)]);
        let t = Topology::read(dir.path()).unwrap();
        assert_eq!((t.cpus[&0].core, t.cpus[&1].core), (0, 1));
        let taken = super::super::assign::take_by_topology(&t, &t.all(), 2).unwrap();
        assert_eq!(taken.to_string(), "0-1");
    }

    #[test]
    fn a_missing_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = Topology::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("devices/system/cpu/online"), "{err}");
    }

    #[test]
    fn this_machine_reads() {
        let t = Topology::read(Path::new("/sys")).unwrap();
        assert!(!t.all().is_empty());
        assert_eq!(t.all().len(), t.cpus.len());
    }
}
