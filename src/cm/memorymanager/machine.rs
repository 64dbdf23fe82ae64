//! Each NUMA node's memory and huge pages, read from sysfs as cAdvisor reads them for
//! upstream's memory manager: `node<N>/meminfo`'s MemTotal and `node<N>/hugepages`. A machine
//! without NUMA node folders is one node, 0, holding all the machine has.

use std::path::{Path, PathBuf};

use crate::host::facts::{HugePages, read_hugepages};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeMemory {
    pub id: u32,
    pub memory: u64,
    pub hugepages: Vec<HugePages>,
}

#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no MemTotal line in kB")]
    NoTotal { path: PathBuf },
}

/// The nodes under `<sysfs>/devices/system/node`, by id; `whole` (the machine's memory and
/// huge pages) when there are none.
pub fn read(sysfs: &Path, whole: &NodeMemory) -> Result<Vec<NodeMemory>, MachineError> {
    let dir = sysfs.join("devices/system/node");
    let ids = crate::cm::numa::node_ids(sysfs);
    if ids.is_empty() {
        return Ok(vec![whole.clone()]);
    }
    ids.into_iter()
        .map(|id| {
            let node = dir.join(format!("node{id}"));
            let path = node.join("meminfo");
            let text = std::fs::read_to_string(&path).map_err(|source| MachineError::Read {
                path: path.clone(),
                source,
            })?;
            let memory = mem_total(&text).ok_or(MachineError::NoTotal { path })?;
            Ok(NodeMemory {
                id,
                memory,
                hugepages: read_hugepages(&node.join("hugepages")),
            })
        })
        .collect()
}

/// `Node 0 MemTotal:  32791652 kB` in bytes.
fn mem_total(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (_, rest) = line.split_once("MemTotal:")?;
        let kb = rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
        kb.checked_mul(1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_with_their_memory_and_huge_pages() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = dir.path().join("devices/system/node");
        for (id, kb) in [(1, 2048), (0, 1024)] {
            let node = nodes.join(format!("node{id}"));
            std::fs::create_dir_all(node.join("hugepages/hugepages-2048kB")).unwrap();
            std::fs::write(
                node.join("meminfo"),
                format!("Node {id} MemTotal:       {kb} kB\nNode {id} MemFree: 1 kB\n"),
            )
            .unwrap();
            std::fs::write(node.join("hugepages/hugepages-2048kB/nr_hugepages"), "3\n").unwrap();
        }
        std::fs::create_dir_all(nodes.join("possible")).unwrap();
        let got = read(dir.path(), &NodeMemory::default()).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].id, got[0].memory), (0, 1024 * 1024));
        assert_eq!((got[1].id, got[1].memory), (1, 2048 * 1024));
        assert_eq!(
            got[1].hugepages,
            vec![HugePages {
                page_size_bytes: 2 << 20,
                pages: 3
            }]
        );
        std::fs::write(nodes.join("node1/meminfo"), "garbage\n").unwrap();
        let err = read(dir.path(), &NodeMemory::default()).unwrap_err();
        assert!(
            err.to_string().contains("node1/meminfo: no MemTotal"),
            "{err}"
        );
    }

    #[test]
    fn a_machine_without_node_folders_is_node_0() {
        let dir = tempfile::tempdir().unwrap();
        let whole = NodeMemory {
            id: 0,
            memory: 7,
            hugepages: Vec::new(),
        };
        assert_eq!(read(dir.path(), &whole).unwrap(), vec![whole]);
    }
}
