//! The Static policy (upstream's memorymanager policy_static): a Guaranteed pod's containers
//! get their memory and huge pages from a set of NUMA nodes, booked in each node's memory
//! table, and their cpuset.mems names those nodes. A node serves either single-node
//! allocations or one group of nodes shared by cross-node allocations, never both, so an
//! allocation never has to spill onto a node another container counts on alone.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::machine::NodeMemory;
use super::state::{Block, MachineState, MemoryTable, NodeState, State};
use crate::cm::allocatable::hugepage_resource;
use crate::cm::numa::{Hint, NumaMask};
use crate::config::MemoryReservation;
use crate::pod::qos::{HUGEPAGES_PREFIX, MEMORY, QosClass, pod_qos_class};
use crate::quantity::{Amount, NANO};

/// Resource name → bytes.
pub type Request = BTreeMap<String, u64>;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PolicyError {
    #[error(
        "the reserved memory configuration references a NUMA node {0} that does not exist on this machine"
    )]
    NoSuchNode(i32),
    #[error(
        "the total amount {reserved:?} of type {resource:?} is not equal to the value {allocatable:?} determined by Node Allocatable feature"
    )]
    NotNodeAllocatable {
        reserved: String,
        resource: String,
        allocatable: String,
    },
    #[error("could not covert a variable of type Quantity to int64")]
    NotInt64,
    #[error("[memorymanager] you should specify the system reserved memory")]
    NoSystemReserved,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StateError {
    #[error("[memorymanager] machine state can not be empty when it has memory assignments")]
    EmptyMachine,
    #[error(
        "[memorymanager] (pod: {pod}, container: {container}) the memory assignment uses the NUMA that does not exist"
    )]
    NoSuchNode { pod: String, container: String },
    #[error(
        "[memorymanager] (pod: {pod}, container: {container}) the memory assignment uses memory resource that does not exist"
    )]
    NoSuchResource { pod: String, container: String },
    #[error("[memorymanager] the expected machine state is different from the real one")]
    Mismatch,
}

/// Why a container's memory could not be given, in upstream's words.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AllocateError {
    #[error("[memorymanager] failed to represent quantity as int64")]
    Quantity,
    #[error(
        "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available"
    )]
    NoDefault,
    #[error("[memorymanager] failed to find the default preferred hint")]
    NoDefaultPreferred,
    #[error("[memorymanager] failed to find NUMA nodes to extend the current topology hint")]
    NoExtension,
    #[error("[memorymanager] failed to find the extended preferred hint")]
    NoExtendedPreferred,
    #[error("[memorymanager] preferred hint violates NUMA node allocation")]
    Violation,
}

/// Memory a pod's finished init containers held, by NUMA mask, that its next containers take
/// first (upstream's reusable memory; restartable init containers hold theirs).
pub type Reusable = BTreeMap<NumaMask, Request>;

pub struct StaticPolicy {
    nodes: Vec<NodeMemory>,
    /// NUMA node → resource → bytes held back for the system.
    system_reserved: BTreeMap<u32, Request>,
}

fn is_memory(name: &str) -> bool {
    name == MEMORY || name.starts_with(HUGEPAGES_PREFIX)
}

/// A quantity as a whole number of bytes (upstream's AsInt64), None when it is not one.
fn whole(amount: Amount) -> Option<u64> {
    if amount.nano() % NANO != 0 {
        return None;
    }
    u64::try_from(amount.nano() / NANO).ok()
}

impl StaticPolicy {
    /// `node_reservation` is what node allocatable holds back of memory and each huge page
    /// size (system- and kube-reserved plus the hard eviction threshold); `reservedMemory`
    /// must split exactly that over the NUMA nodes.
    pub fn new(
        nodes: Vec<NodeMemory>,
        reservations: &[MemoryReservation],
        node_reservation: &BTreeMap<String, Amount>,
    ) -> Result<Self, PolicyError> {
        let mut totals: BTreeMap<String, Amount> = BTreeMap::new();
        for r in reservations {
            if !nodes
                .iter()
                .any(|n| i64::from(n.id) == i64::from(r.numa_node))
            {
                return Err(PolicyError::NoSuchNode(r.numa_node));
            }
            for (name, value) in &r.limits {
                let v = Amount::parse(value).unwrap_or_default();
                *totals.entry(name.clone()).or_default() += v;
            }
        }
        let mut kinds: Vec<&String> = totals.keys().collect();
        kinds.extend(node_reservation.keys().filter(|k| is_memory(k)));
        kinds.sort();
        kinds.dedup();
        for name in kinds {
            let want = node_reservation.get(name).copied().unwrap_or_default();
            let have = totals.get(name).copied().unwrap_or_default();
            if want != have {
                let style = crate::cm::allocatable::style_for(name);
                return Err(PolicyError::NotNodeAllocatable {
                    reserved: have.format(style),
                    resource: name.clone(),
                    allocatable: want.format(style),
                });
            }
        }
        let mut system_reserved: BTreeMap<u32, Request> =
            nodes.iter().map(|n| (n.id, Request::new())).collect();
        for r in reservations {
            let node = system_reserved.entry(r.numa_node as u32).or_default();
            for (name, value) in &r.limits {
                let v = Amount::parse(value).ok().and_then(whole);
                node.insert(name.clone(), v.ok_or(PolicyError::NotInt64)?);
            }
        }
        let total = saturating_sum(
            system_reserved
                .values()
                .filter_map(|r| r.get(MEMORY))
                .copied(),
        );
        if total == 0 {
            return Err(PolicyError::NoSystemReserved);
        }
        Ok(StaticPolicy {
            nodes,
            system_reserved,
        })
    }

    fn reserved_for_system(&self, node: u32, resource: &str) -> u64 {
        self.system_reserved
            .get(&node)
            .and_then(|r| r.get(resource))
            .copied()
            .unwrap_or(0)
    }

    /// Every node's tables with nothing given out: huge pages less what the system keeps,
    /// memory less what the system keeps and what backs the huge pages.
    pub fn default_machine_state(&self) -> MachineState {
        let mut out = MachineState::new();
        for node in &self.nodes {
            let mut map = BTreeMap::new();
            let mut in_hugepages = 0u64;
            for hp in &node.hugepages {
                let name = hugepage_resource(hp.page_size_bytes);
                let total = hp.pages.saturating_mul(hp.page_size_bytes);
                let system = self.reserved_for_system(node.id, &name);
                let allocatable = total.saturating_sub(system);
                map.insert(name, table(total, system, allocatable));
                in_hugepages = in_hugepages.saturating_add(total);
            }
            let system = self.reserved_for_system(node.id, MEMORY);
            let allocatable = node
                .memory
                .saturating_sub(system)
                .saturating_sub(in_hugepages);
            map.insert(MEMORY.to_string(), table(node.memory, system, allocatable));
            out.insert(
                node.id,
                NodeState {
                    assignments: 0,
                    memory_map: map,
                    cells: vec![node.id],
                },
            );
        }
        out
    }

    /// Checks a restored state against this machine and these reservations (upstream's
    /// validateState); an empty one becomes the default.
    pub fn validate(&self, state: &mut State) -> Result<(), StateError> {
        if state.machine.is_empty() {
            if !state.entries.is_empty() {
                return Err(StateError::EmptyMachine);
            }
            state.machine = self.default_machine_state();
            return Ok(());
        }
        let mut expected = self.default_machine_state();
        for (pod, containers) in &state.entries {
            for (container, blocks) in containers {
                for b in blocks {
                    let err_node = || StateError::NoSuchNode {
                        pod: pod.clone(),
                        container: container.clone(),
                    };
                    let err_resource = || StateError::NoSuchResource {
                        pod: pod.clone(),
                        container: container.clone(),
                    };
                    for id in &b.numa_affinity {
                        let node = expected.get_mut(id).ok_or_else(err_node)?;
                        if !node.memory_map.contains_key(&b.resource) {
                            return Err(err_resource());
                        }
                    }
                    book(&mut expected, &b.numa_affinity, &b.resource, b.size);
                }
            }
        }
        if !machine_states_equal(&state.machine, &expected) {
            return Err(StateError::Mismatch);
        }
        Ok(())
    }

    /// Upstream's GetAllocatableMemory: each node's allocatable amount per resource.
    pub fn allocatable(&self, state: &State) -> Vec<Block> {
        let mut out = Vec::new();
        for (id, node) in &state.machine {
            for (name, t) in &node.memory_map {
                if t.allocatable > 0 {
                    out.push(Block {
                        numa_affinity: vec![*id],
                        resource: name.clone(),
                        size: t.allocatable,
                    });
                }
            }
        }
        out
    }

    /// The hints for `request` (upstream's calculateHints): every mask whose nodes have room,
    /// and may take an allocation of this shape, the narrowest that could hold it preferred.
    /// A request no mask can hold gets no hints at all, which the topology manager reads as
    /// no preference (upstream does the same; the allocation then fails).
    pub fn hints(
        &self,
        machine: &MachineState,
        reusable: &Reusable,
        request: &Request,
    ) -> BTreeMap<String, Vec<Hint>> {
        let ids: Vec<u32> = machine.keys().copied().collect();
        let mut min_size = ids.len() as u32;
        let mut masks = Vec::new();
        for mask in NumaMask::all_of(&ids) {
            let nodes = mask.nodes();
            let sum = |f: fn(&MemoryTable) -> u64, name: &str| over(machine, &nodes, name, f);
            if request
                .iter()
                .any(|(name, &size)| sum(|t| t.allocatable, name) < size)
            {
                continue;
            }
            min_size = min_size.min(mask.count());
            if violates(machine, mask, false) {
                continue;
            }
            let fits = request.iter().all(|(name, &size)| {
                let reuse = reusable.get(&mask).and_then(|r| r.get(name)).copied();
                sum(|t| t.free, name).saturating_add(reuse.unwrap_or(0)) >= size
            });
            if fits {
                masks.push(mask);
            }
        }
        if masks.is_empty() {
            return BTreeMap::new();
        }
        let hints: Vec<Hint> = masks
            .into_iter()
            .map(|m| Hint {
                affinity: Some(m),
                preferred: m.count() == min_size,
            })
            .collect();
        request
            .keys()
            .map(|name| (name.clone(), hints.clone()))
            .collect()
    }

    /// Books the container's memory on the nodes of the topology manager's `hint` (or, without
    /// one, the best of this policy's own hints), widened when the hint's nodes cannot hold it.
    /// Returns the blocks given, None when the container gets no exclusive memory.
    pub fn allocate(
        &self,
        state: &mut State,
        reusable: &mut Reusable,
        pod: &Pod,
        container: &Container,
        plain_init: bool,
        hint: Hint,
    ) -> Result<Option<Vec<Block>>, AllocateError> {
        if pod_qos_class(pod) != QosClass::Guaranteed {
            return Ok(None);
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if let Some(blocks) = state.blocks(uid, &container.name).cloned() {
            update_reusable(reusable, &blocks, plain_init);
            return Ok(None);
        }
        let request = requested(container)?;
        let mut best = hint;
        if hint.affinity.is_none() {
            let default = self.hints(&state.machine, reusable, &request);
            let Some(memory) = default.get(MEMORY) else {
                return Err(AllocateError::NoDefault);
            };
            let default = best_of(memory);
            if !default.preferred && best.preferred {
                return Err(AllocateError::NoDefaultPreferred);
            }
            best = default;
        }
        let mask = best.affinity.unwrap_or_default();
        if !satisfies(&state.machine, mask, &request) {
            let extended = self.extend(&state.machine, reusable, &request, mask)?;
            if !extended.preferred && best.preferred {
                return Err(AllocateError::NoExtendedPreferred);
            }
            best = extended;
        }
        let mask = best.affinity.unwrap_or_default();
        if violates(&state.machine, mask, true) {
            return Err(AllocateError::Violation);
        }
        let nodes = mask.nodes();
        let mut blocks = Vec::new();
        for (name, &size) in &request {
            blocks.push(Block {
                numa_affinity: nodes.clone(),
                resource: name.clone(),
                size,
            });
            let reuse = reusable.get(&mask).and_then(|r| r.get(name)).copied();
            let left = size.saturating_sub(reuse.unwrap_or(0));
            book(&mut state.machine, &nodes, name, left);
        }
        update_reusable(reusable, &blocks, plain_init);
        state.set_blocks(uid, &container.name, blocks.clone());
        take_from_init_containers(state, pod, container, &blocks);
        Ok(Some(blocks))
    }

    /// The narrowest of this policy's hints that contain `mask` (upstream's
    /// extendTopologyManagerHint).
    fn extend(
        &self,
        machine: &MachineState,
        reusable: &Reusable,
        request: &Request,
        mask: NumaMask,
    ) -> Result<Hint, AllocateError> {
        let hints = self.hints(machine, reusable, request);
        let containing: Vec<Hint> = hints
            .get(MEMORY)
            .into_iter()
            .flatten()
            .filter(|h| h.affinity.is_some_and(|a| a.and(mask) == mask))
            .copied()
            .collect();
        if containing.is_empty() {
            return Err(AllocateError::NoExtension);
        }
        Ok(best_of(&containing))
    }

    /// Gives a container's blocks back to their nodes.
    pub fn remove(&self, state: &mut State, uid: &str, container: &str) {
        let Some(blocks) = state.blocks(uid, container).cloned() else {
            return;
        };
        state.delete(uid, container);
        for b in blocks {
            let mut released = b.size;
            for id in &b.numa_affinity {
                let Some(node) = state.machine.get_mut(id) else {
                    continue;
                };
                node.assignments -= 1;
                if node.assignments == 0 {
                    node.cells = vec![*id];
                }
                if released == 0 {
                    continue;
                }
                let Some(t) = node.memory_map.get_mut(&b.resource) else {
                    continue;
                };
                let back = released.min(t.reserved);
                t.reserved -= back;
                t.free = t.free.saturating_add(back);
                released -= back;
            }
        }
    }
}

fn table(total: u64, system: u64, allocatable: u64) -> MemoryTable {
    MemoryTable {
        total,
        system_reserved: system,
        allocatable,
        reserved: 0,
        free: allocatable,
    }
}

/// Memory and huge page requests in bytes. A static pod's request defaults to its limit, as
/// the API server defaults others.
pub fn requested(container: &Container) -> Result<Request, AllocateError> {
    let mut out = Request::new();
    let resources = container.resources.as_ref();
    let requests = resources.and_then(|r| r.requests.as_ref());
    let limits = resources.and_then(|r| r.limits.as_ref());
    let unrequested = limits
        .into_iter()
        .flatten()
        .filter(|(name, _)| !requests.is_some_and(|r| r.contains_key(*name)));
    for (name, q) in requests.into_iter().flatten().chain(unrequested) {
        if !is_memory(name) {
            continue;
        }
        let bytes = Amount::of(q)
            .ok()
            .and_then(whole)
            .ok_or(AllocateError::Quantity)?;
        out.insert(name.clone(), bytes);
    }
    Ok(out)
}

/// The whole pod's request: its app and restartable init containers together, or its
/// largest plain init container (with the sidecars started before it) when that is more.
pub fn pod_requested(pod: &Pod) -> Result<Request, AllocateError> {
    let spec = pod.spec.as_ref();
    let mut init_peak = Request::new();
    let mut sidecars = Request::new();
    for c in spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
    {
        for (name, size) in requested(c)? {
            if crate::pod::is_sidecar(c) {
                let held = sidecars.entry(name).or_default();
                *held = held.saturating_add(size);
            } else {
                let with = sidecars
                    .get(&name)
                    .copied()
                    .unwrap_or(0)
                    .saturating_add(size);
                let peak = init_peak.entry(name).or_default();
                *peak = (*peak).max(with);
            }
        }
    }
    let mut apps = Request::new();
    for c in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
        for (name, size) in requested(c)? {
            let total = apps.entry(name).or_default();
            *total = total.saturating_add(size);
        }
    }
    Ok(apps
        .into_iter()
        .map(|(name, size)| {
            let long_running = size.saturating_add(sidecars.get(&name).copied().unwrap_or(0));
            let peak = init_peak.get(&name).copied().unwrap_or(0);
            (name, long_running.max(peak))
        })
        .collect())
}

/// Upstream's findBestHint: a preferred hint over one that is not, then the narrowest.
pub fn best_of(hints: &[Hint]) -> Hint {
    let mut best: Option<Hint> = None;
    for &h in hints {
        best = Some(match best {
            None => h,
            Some(b) if h.preferred && !b.preferred => h,
            Some(b)
                if h.preferred == b.preferred
                    && h.affinity
                        .unwrap_or_default()
                        .is_narrower_than(b.affinity.unwrap_or_default()) =>
            {
                h
            }
            Some(b) => b,
        });
    }
    best.unwrap_or(Hint {
        affinity: None,
        preferred: false,
    })
}

fn satisfies(machine: &MachineState, mask: NumaMask, request: &Request) -> bool {
    let nodes = mask.nodes();
    request
        .iter()
        .all(|(name, &size)| over(machine, &nodes, name, |t| t.free) >= size)
}

/// One figure of `resource`'s tables summed over `nodes` (restored states and pod specs come
/// from outside: sums saturate).
fn over(machine: &MachineState, nodes: &[u32], resource: &str, f: fn(&MemoryTable) -> u64) -> u64 {
    saturating_sum(
        nodes
            .iter()
            .filter_map(|n| machine.get(n)?.memory_map.get(resource))
            .map(f),
    )
}

fn saturating_sum(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}

/// Whether `mask` breaks the rule that a node serves single-node allocations or one group of
/// nodes. For hints (upstream's calculateHints) a single node already in a group is refused
/// too; at allocation (its isAffinityViolatingNUMAAllocations) only groups are checked.
fn violates(machine: &MachineState, mask: NumaMask, at_allocation: bool) -> bool {
    let nodes = mask.nodes();
    let single = nodes.len() == 1;
    if single {
        if at_allocation {
            return false;
        }
        return machine.get(&nodes[0]).is_some_and(|n| n.cells.len() > 1);
    }
    nodes.iter().any(|id| {
        machine.get(id).is_some_and(|n| {
            n.assignments > 0 && (n.cells.len() == 1 || !same_group(&n.cells, &nodes))
        })
    })
}

fn same_group(a: &[u32], b: &[u32]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

/// Takes `size` of `resource` from the nodes in order, each as far as its free memory goes;
/// every node of the group counts the assignment.
fn book(machine: &mut MachineState, nodes: &[u32], resource: &str, mut size: u64) {
    for id in nodes {
        let Some(node) = machine.get_mut(id) else {
            continue;
        };
        node.assignments += 1;
        node.cells = nodes.to_vec();
        if size == 0 {
            continue;
        }
        let Some(t) = node.memory_map.get_mut(resource) else {
            continue;
        };
        let take = size.min(t.free);
        t.reserved += take;
        t.free -= take;
        size -= take;
    }
}

/// A plain init container's blocks become reusable (the largest per mask and resource); an
/// app or restartable container's blocks use up what they took.
fn update_reusable(reusable: &mut Reusable, blocks: &[Block], plain_init: bool) {
    for b in blocks {
        let mask = NumaMask::of(b.numa_affinity.iter().copied());
        if plain_init {
            let held = reusable
                .entry(mask)
                .or_default()
                .entry(b.resource.clone())
                .or_default();
            *held = (*held).max(b.size);
        } else if let Some(held) = reusable.get_mut(&mask).and_then(|r| r.get_mut(&b.resource)) {
            *held = held.saturating_sub(b.size);
        }
    }
}

/// What the container reused is taken off the blocks of the plain init containers before it,
/// so the pod's blocks add up to what its nodes booked (upstream's
/// updateInitContainersMemoryBlocks).
fn take_from_init_containers(
    state: &mut State,
    pod: &Pod,
    container: &Container,
    blocks: &[Block],
) {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let inits = pod.spec.as_ref().and_then(|s| s.init_containers.as_ref());
    for block in blocks {
        let mut size = block.size;
        for init in inits.into_iter().flatten() {
            if init.name == container.name || size == 0 {
                break;
            }
            if crate::pod::is_sidecar(init) {
                continue;
            }
            let Some(mut theirs) = state.blocks(uid, &init.name).cloned() else {
                continue;
            };
            for b in theirs.iter_mut() {
                if b.size == 0
                    || b.resource != block.resource
                    || NumaMask::of(b.numa_affinity.iter().copied())
                        != NumaMask::of(block.numa_affinity.iter().copied())
                {
                    continue;
                }
                let take = size.min(b.size);
                b.size -= take;
                size -= take;
            }
            state.set_blocks(uid, &init.name, theirs);
        }
    }
}

/// Upstream's areMachineStatesEqual: the same nodes, assignment counts, groups and tables,
/// and over each group the same free and reserved amounts.
fn machine_states_equal(a: &MachineState, b: &MachineState) -> bool {
    if a.len() != b.len() {
        return false;
    }
    for (id, na) in a {
        let Some(nb) = b.get(id) else {
            return false;
        };
        if na.assignments != nb.assignments
            || !same_group(&na.cells, &nb.cells)
            || na.memory_map.len() != nb.memory_map.len()
        {
            return false;
        }
        for (name, ta) in &na.memory_map {
            let Some(tb) = nb.memory_map.get(name) else {
                return false;
            };
            if (ta.total, ta.system_reserved, ta.allocatable)
                != (tb.total, tb.system_reserved, tb.allocatable)
            {
                return false;
            }
            let group = |m: &MachineState| -> (u64, u64) {
                na.cells
                    .iter()
                    .filter_map(|c| m.get(c)?.memory_map.get(name))
                    .fold((0u64, 0u64), |(f, r), t| {
                        (f.saturating_add(t.free), r.saturating_add(t.reserved))
                    })
            };
            if group(a) != group(b) {
                return false;
            }
        }
    }
    true
}
