//! `memory_manager_state` in the kubelet's root dir, in upstream's shape: the policy that
//! wrote it, each NUMA node's memory table per resource (memory and each huge page size) and
//! each container's memory blocks, under upstream's checksum, so either kubelet reads what the
//! other wrote.
//!
//! The checksum is FNV-1a (32 bit) over go-spew's `%#v` rendering of upstream's
//! `*state.MemoryManagerCheckpoint` with its checksum at 0: types in parentheses on struct
//! fields, none on map keys, map values and slice elements, pointers inside maps as `<*>`,
//! map keys sorted. The figures in the tests below were printed by that rendering in Go.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::cm::checkpoint_file::CheckpointError;
use crate::cm::checkpoint_file::{FNV_OFFSET, fnv1a, read_checked, write_json};

pub const FILE_NAME: &str = "memory_manager_state";

/// One resource's memory on one NUMA node, in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTable {
    pub total: u64,
    #[serde(rename = "systemReserved")]
    pub system_reserved: u64,
    pub allocatable: u64,
    pub reserved: u64,
    pub free: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    /// Blocks placed on this node (a container with memory and huge pages counts twice).
    #[serde(rename = "numberOfAssignments")]
    pub assignments: i64,
    #[serde(rename = "memoryMap")]
    pub memory_map: BTreeMap<String, MemoryTable>,
    /// This node and the nodes it shares a cross-node allocation with.
    pub cells: Vec<u32>,
}

/// NUMA node id → its state.
pub type MachineState = BTreeMap<u32, NodeState>;

/// An amount of one resource given to a container on a set of NUMA nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    #[serde(rename = "numaAffinity")]
    pub numa_affinity: Vec<u32>,
    #[serde(rename = "type")]
    pub resource: String,
    pub size: u64,
}

/// Pod uid → container name → its blocks.
pub type Assignments = BTreeMap<String, BTreeMap<String, Vec<Block>>>;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub machine: MachineState,
    pub entries: Assignments,
}

impl State {
    pub fn blocks(&self, uid: &str, container: &str) -> Option<&Vec<Block>> {
        self.entries.get(uid)?.get(container)
    }

    pub fn set_blocks(&mut self, uid: &str, container: &str, blocks: Vec<Block>) {
        self.entries
            .entry(uid.to_string())
            .or_default()
            .insert(container.to_string(), blocks);
    }

    /// Drops a container's blocks, and the pod once it has none.
    pub fn delete(&mut self, uid: &str, container: &str) {
        if let Some(pod) = self.entries.get_mut(uid) {
            pod.remove(container);
            if pod.is_empty() {
                self.entries.remove(uid);
            }
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    #[serde(rename = "policyName")]
    pub policy_name: String,
    #[serde(rename = "machineState")]
    pub machine_state: MachineState,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub entries: Assignments,
    #[serde(default)]
    pub checksum: u64,
}

pub fn path_in(root_dir: &Path) -> PathBuf {
    root_dir.join(FILE_NAME)
}

fn list(out: &mut String, ids: &[u32]) {
    out.push_str("([]int)[");
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{id}");
    }
    out.push(']');
}

/// go-spew's `%#v` of upstream's `*state.MemoryManagerCheckpoint` with checksum 0.
pub fn render(cp: &Checkpoint) -> String {
    let mut out = String::from("(*state.MemoryManagerCheckpoint){PolicyName:(string)");
    out.push_str(&cp.policy_name);
    out.push_str(" MachineState:(state.NUMANodeMap)map[");
    for (i, (id, node)) in cp.machine_state.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(
            out,
            "{id}:<*>{{NumberOfAssignments:(int){} MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[",
            node.assignments
        );
        for (j, (name, t)) in node.memory_map.iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            let _ = write!(
                out,
                "{name}:<*>{{TotalMemSize:(uint64){} SystemReserved:(uint64){} Allocatable:(uint64){} Reserved:(uint64){} Free:(uint64){}}}",
                t.total, t.system_reserved, t.allocatable, t.reserved, t.free
            );
        }
        out.push_str("] Cells:");
        list(&mut out, &node.cells);
        out.push('}');
    }
    out.push_str("] Entries:(state.ContainerMemoryAssignments)map[");
    for (i, (uid, containers)) in cp.entries.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(uid);
        out.push_str(":map[");
        for (j, (name, blocks)) in containers.iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            out.push_str(name);
            out.push_str(":[");
            for (k, b) in blocks.iter().enumerate() {
                if k > 0 {
                    out.push(' ');
                }
                out.push_str("{NUMAAffinity:");
                list(&mut out, &b.numa_affinity);
                let _ = write!(
                    out,
                    " Type:(v1.ResourceName){} Size:(uint64){}}}",
                    b.resource, b.size
                );
            }
            out.push(']');
        }
        out.push(']');
    }
    out.push_str("] Checksum:(checksum.Checksum)0}");
    out
}

pub fn checksum(cp: &Checkpoint) -> u64 {
    u64::from(fnv1a(FNV_OFFSET, render(cp).as_bytes()))
}

/// The checkpoint on disk; None when there is none. A checksum of 0 is accepted, as upstream
/// does for files of its old backend.
pub fn read(path: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    read_checked(path, |cp: &Checkpoint| (cp.checksum, checksum(cp)))
}

/// Writes through a temporary file and a rename, so a crash leaves the old file or the new.
pub fn write(path: &Path, policy: &str, state: &State) -> Result<(), CheckpointError> {
    let mut cp = Checkpoint {
        policy_name: policy.to_string(),
        machine_state: state.machine.clone(),
        entries: state.entries.clone(),
        checksum: 0,
    };
    cp.checksum = checksum(&cp);
    write_json(path, &cp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(total: u64, reserved_for_system: u64, reserved: u64) -> MemoryTable {
        let allocatable = total - reserved_for_system;
        MemoryTable {
            total,
            system_reserved: reserved_for_system,
            allocatable,
            reserved,
            free: allocatable - reserved,
        }
    }

    /// Two nodes, huge pages on node 0, one container across both nodes.
    pub(super) fn two_nodes() -> State {
        let gi = 1 << 30;
        let mut machine = MachineState::new();
        machine.insert(
            0,
            NodeState {
                assignments: 2,
                memory_map: BTreeMap::from([
                    ("hugepages-2Mi".to_string(), table(4 << 20, 0, 0)),
                    ("memory".to_string(), table(8 * gi, gi, 2 * gi)),
                ]),
                cells: vec![0, 1],
            },
        );
        machine.insert(
            1,
            NodeState {
                assignments: 1,
                memory_map: BTreeMap::from([("memory".to_string(), table(8 * gi, 0, 0))]),
                cells: vec![0, 1],
            },
        );
        let mut state = State {
            machine,
            entries: Assignments::new(),
        };
        state.set_blocks(
            "pod-a",
            "app",
            vec![Block {
                numa_affinity: vec![0, 1],
                resource: "memory".into(),
                size: 2 * gi,
            }],
        );
        state
    }

    #[test]
    fn the_rendering_is_go_spews() {
        let cp = Checkpoint {
            policy_name: "Static".into(),
            machine_state: two_nodes().machine,
            entries: two_nodes().entries,
            checksum: 5,
        };
        assert_eq!(
            render(&cp),
            "(*state.MemoryManagerCheckpoint){PolicyName:(string)Static MachineState:(state.NUMANodeMap)map[\
0:<*>{NumberOfAssignments:(int)2 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[\
hugepages-2Mi:<*>{TotalMemSize:(uint64)4194304 SystemReserved:(uint64)0 Allocatable:(uint64)4194304 Reserved:(uint64)0 Free:(uint64)4194304} \
memory:<*>{TotalMemSize:(uint64)8589934592 SystemReserved:(uint64)1073741824 Allocatable:(uint64)7516192768 Reserved:(uint64)2147483648 Free:(uint64)5368709120}] Cells:([]int)[0 1]} \
1:<*>{NumberOfAssignments:(int)1 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[\
memory:<*>{TotalMemSize:(uint64)8589934592 SystemReserved:(uint64)0 Allocatable:(uint64)8589934592 Reserved:(uint64)0 Free:(uint64)8589934592}] Cells:([]int)[0 1]}] \
Entries:(state.ContainerMemoryAssignments)map[pod-a:map[app:[{NUMAAffinity:([]int)[0 1] Type:(v1.ResourceName)memory Size:(uint64)2147483648}]]] Checksum:(checksum.Checksum)0}"
        );
    }

    #[test]
    fn checksums_are_the_ones_upstreams_code_prints() {
        let none = Checkpoint {
            policy_name: "None".into(),
            ..Checkpoint::default()
        };
        assert_eq!(checksum(&none), GO_NONE);
        let two = two_nodes();
        let cp = Checkpoint {
            policy_name: "Static".into(),
            machine_state: two.machine,
            entries: two.entries,
            checksum: 0,
        };
        assert_eq!(checksum(&cp), GO_TWO_NODES);
    }

    // Printed by go-spew (Kubernetes' vendored copy) with upstream's hashing configuration
    // over the same checkpoints built from upstream's types.
    const GO_NONE: u64 = 4_236_770_233;
    const GO_TWO_NODES: u64 = 3_358_983_668;

    #[test]
    fn round_trip_and_a_changed_byte_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        write(&path, "None", &State::default()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            format!(r#"{{"policyName":"None","machineState":{{}},"checksum":{GO_NONE}}}"#)
        );
        let state = two_nodes();
        write(&path, "Static", &state).unwrap();
        let back = read(&path).unwrap().unwrap();
        assert_eq!(back.policy_name, "Static");
        assert_eq!(back.machine_state, state.machine);
        assert_eq!(back.entries, state.entries);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""numaAffinity":[0,1],"type":"memory","size":2147483648"#));
        std::fs::write(&path, text.replace("\"size\":2147483648", "\"size\":1")).unwrap();
        assert!(matches!(read(&path), Err(CheckpointError::Corrupt)));
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(read(&path), Err(CheckpointError::Parse { .. })));
        assert!(read(&dir.path().join("missing")).unwrap().is_none());
    }
}
