//! The memory manager (upstream's cm/memorymanager), policies `None` and `Static`.
//!
//! With `Static`, each container of a Guaranteed pod gets its memory and huge pages from a set
//! of NUMA nodes at admission (the topology manager's choice, widened when it cannot hold
//! them), booked in each node's table; the container is created with cpuset.mems naming those
//! nodes. `reservedMemory` says what each node keeps for the system, and must add up to what
//! node allocatable holds back (system- and kube-reserved plus the hard eviction threshold),
//! or the kubelet does not start, as upstream's does not. What is given out is kept in
//! `memory_manager_state`, upstream's file, written under either policy; a file written under
//! another policy, or one this machine or these reservations no longer match, stops the
//! kubelet until it is removed.
//!
//! As a topology manager hint provider it says which NUMA node masks could hold a container's
//! (or a pod's) memory, the narrowest preferred.
//!
//! Not here yet: memory of resized containers follows the spec's requests, not the allocated
//! resources upstream reads from the status.

pub mod machine;
pub mod policy;
pub mod state;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::{error, info, warn};

pub use policy::AllocateError;
use policy::{Reusable, StaticPolicy};
pub use state::Block;
use state::State;

use crate::cm::numa::{Hint, NumaMask, ResourceHints};
use crate::config::MemoryReservation;
use crate::pod::containers_in_order;
use crate::pod::qos::{HUGEPAGES_PREFIX, MEMORY, QosClass, pod_qos_class};
use crate::quantity::Amount;

pub const NONE: &str = "None";
pub const STATIC: &str = "Static";

#[derive(Debug, thiserror::Error)]
pub enum MemoryManagerError {
    #[error("unknown policy: \"{0}\"")]
    UnknownPolicy(String),
    #[error(transparent)]
    Policy(#[from] policy::PolicyError),
    #[error("reading the NUMA nodes' memory: {0}")]
    Machine(#[from] machine::MachineError),
    #[error(
        "could not restore state from checkpoint: {reason}, please drain this node and delete the memory manager checkpoint file {path:?} before restarting Kubelet"
    )]
    Restore { reason: String, path: PathBuf },
    #[error("{source}; please drain node and remove policy state file {path:?}")]
    InvalidState {
        source: policy::StateError,
        path: PathBuf,
    },
}

/// The settings the memory manager is made from.
#[derive(Clone, Debug)]
pub struct MemorySettings {
    pub policy: String,
    pub reserved_memory: Vec<MemoryReservation>,
    /// What node allocatable holds back of memory and each huge page size.
    pub node_reservation: BTreeMap<String, Amount>,
    pub root_dir: PathBuf,
    pub sysfs: PathBuf,
    /// The machine's memory and huge pages, as node 0 of a machine without NUMA node folders.
    pub whole: machine::NodeMemory,
}

impl MemorySettings {
    pub fn new(settings: &crate::config::Settings, facts: &crate::host::MachineFacts) -> Self {
        let cfg = &settings.config;
        let allocatable = crate::cm::allocatable::AllocatableSettings::from(settings);
        let capacity = crate::cm::allocatable::capacity(facts, &allocatable);
        let node_reservation = crate::cm::allocatable::reserved(&allocatable, &capacity)
            .into_iter()
            .filter(|(name, _)| name == MEMORY || name.starts_with(HUGEPAGES_PREFIX))
            .collect();
        MemorySettings {
            policy: cfg.memory_manager_policy.clone(),
            reserved_memory: cfg.reserved_memory.clone(),
            node_reservation,
            root_dir: settings.flags.root_dir.clone(),
            sysfs: PathBuf::from("/sys"),
            whole: machine::NodeMemory {
                id: 0,
                memory: facts.memory_bytes.unwrap_or(0),
                hugepages: facts.hugepages.clone(),
            },
        }
    }
}

pub struct MemoryManager {
    /// None is the `None` policy: nothing is booked, no cpuset.mems is set.
    policy: Option<StaticPolicy>,
    path: PathBuf,
    state: Mutex<State>,
}

fn policy_name(policy: &Option<StaticPolicy>) -> &'static str {
    if policy.is_some() { STATIC } else { NONE }
}

/// One pod's admission in progress (see [`MemoryManager::begin`]).
pub struct MemoryAdmission<'a> {
    manager: &'a MemoryManager,
    pod: &'a Pod,
    state: std::sync::MutexGuard<'a, State>,
    before: State,
    reusable: Reusable,
    done: bool,
}

impl MemoryAdmission<'_> {
    fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    /// Hints for what the container already holds: its blocks' masks, or no preference when
    /// they no longer match its request (upstream's regenerateHints).
    fn held_hints(blocks: &[Block], request: &policy::Request) -> BTreeMap<String, ResourceHints> {
        let matches = blocks.len() == request.len()
            && blocks
                .iter()
                .all(|b| request.get(&b.resource) == Some(&b.size));
        if !matches {
            return BTreeMap::new();
        }
        let mut out: BTreeMap<String, Vec<Hint>> = request
            .keys()
            .map(|name| (name.clone(), Vec::new()))
            .collect();
        for b in blocks {
            if let Some(hints) = out.get_mut(&b.resource) {
                hints.push(Hint {
                    affinity: Some(NumaMask::of(b.numa_affinity.iter().copied())),
                    preferred: true,
                });
            }
        }
        out.into_iter().map(|(name, h)| (name, Some(h))).collect()
    }

    fn computed(&self, request: &policy::Request) -> BTreeMap<String, ResourceHints> {
        let Some(policy) = &self.manager.policy else {
            return BTreeMap::new();
        };
        policy
            .hints(&self.state.machine, &self.reusable, request)
            .into_iter()
            .map(|(name, hints)| (name, Some(hints)))
            .collect()
    }

    /// The container's hints per resource (upstream's GetTopologyHints); empty (no
    /// preference) for a pod that is not Guaranteed or under the `None` policy.
    pub fn hints(&self, container: &Container) -> BTreeMap<String, ResourceHints> {
        if self.manager.policy.is_none() || pod_qos_class(self.pod) != QosClass::Guaranteed {
            return BTreeMap::new();
        }
        let Ok(request) = policy::requested(container) else {
            return BTreeMap::new();
        };
        if let Some(blocks) = self.state.blocks(self.uid(), &container.name) {
            return Self::held_hints(blocks, &request);
        }
        self.computed(&request)
    }

    /// The whole pod's hints (the topology manager's pod scope).
    pub fn pod_hints(&self) -> BTreeMap<String, ResourceHints> {
        if self.manager.policy.is_none() || pod_qos_class(self.pod) != QosClass::Guaranteed {
            return BTreeMap::new();
        }
        let Ok(request) = policy::pod_requested(self.pod) else {
            return BTreeMap::new();
        };
        for (container, _) in containers_in_order(self.pod) {
            if let Some(blocks) = self.state.blocks(self.uid(), &container.name) {
                return Self::held_hints(blocks, &request);
            }
        }
        self.computed(&request)
    }

    /// Books the container's memory on `hint`'s nodes (None: the topology manager has no
    /// choice to give, as under its `none` policy).
    pub fn allocate(
        &mut self,
        container: &Container,
        plain_init: bool,
        hint: Option<Hint>,
    ) -> Result<(), AllocateError> {
        let manager = self.manager;
        let Some(policy) = &manager.policy else {
            return Ok(());
        };
        let pod = self.pod;
        if pod_qos_class(pod) != QosClass::Guaranteed {
            return Ok(());
        }
        let m = crate::metrics::kubelet();
        m.memory_manager_pinning_requests.inc(&[]);
        let hint = hint.unwrap_or(Hint {
            affinity: None,
            preferred: false,
        });
        match policy.allocate(
            &mut self.state,
            &mut self.reusable,
            pod,
            container,
            plain_init,
            hint,
        ) {
            Ok(Some(blocks)) => {
                let nodes = blocks.first().map(|b| b.numa_affinity.clone());
                info!(pod = ?pod.metadata.name, container = %container.name, numa_nodes = ?nodes.unwrap_or_default(), "Static policy: exclusive memory");
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                m.memory_manager_pinning_errors.inc(&[]);
                warn!(pod = ?pod.metadata.name, container = %container.name, error = %e, "Unable to allocate memory");
                Err(e)
            }
        }
    }

    /// Keeps what was booked and writes the state when it changed.
    pub fn commit(mut self) {
        self.done = true;
        if self.manager.policy.is_some() && *self.state != self.before {
            self.manager.save(&self.state);
        }
    }
}

impl Drop for MemoryAdmission<'_> {
    fn drop(&mut self) {
        if !self.done {
            *self.state = std::mem::take(&mut self.before);
        }
    }
}

impl MemoryManager {
    /// Builds the policy and reads (or writes) the state file: a bad setting, a state written
    /// under another policy or one the machine no longer matches is an error, and the kubelet
    /// does not start.
    pub fn start(s: &MemorySettings) -> Result<Arc<Self>, MemoryManagerError> {
        let policy = match s.policy.as_str() {
            NONE | "" => None,
            STATIC => {
                let nodes = machine::read(&s.sysfs, &s.whole)?;
                Some(StaticPolicy::new(
                    nodes,
                    &s.reserved_memory,
                    &s.node_reservation,
                )?)
            }
            other => return Err(MemoryManagerError::UnknownPolicy(other.to_string())),
        };
        let path = state::path_in(&s.root_dir);
        let name = policy_name(&policy);
        let restore = |reason: String| MemoryManagerError::Restore {
            reason,
            path: path.clone(),
        };
        let restored = match state::read(&path).map_err(|e| restore(e.to_string()))? {
            None => None,
            Some(cp) => {
                if cp.policy_name != name {
                    return Err(restore(format!(
                        "[memorymanager] configured policy {name:?} differs from state checkpoint policy {:?}",
                        cp.policy_name
                    )));
                }
                Some(State {
                    machine: cp.machine_state,
                    entries: cp.entries,
                })
            }
        };
        let mut state = restored.clone().unwrap_or_default();
        if let Some(p) = &policy {
            p.validate(&mut state)
                .map_err(|source| MemoryManagerError::InvalidState {
                    source,
                    path: path.clone(),
                })?;
        }
        let manager = MemoryManager {
            policy,
            path,
            state: Mutex::new(state),
        };
        let state = manager.lock();
        if restored.as_ref() != Some(&*state) {
            manager.save(&state);
        }
        drop(state);
        info!(policy = name, "Starting memorymanager");
        Ok(Arc::new(manager))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn save(&self, state: &State) {
        if let Err(e) = state::write(&self.path, policy_name(&self.policy), state) {
            error!(error = %e, "Failed to store the memory manager state");
        }
    }

    /// Starts the admission of `pod`: hints and allocations container by container, kept only
    /// when [`MemoryAdmission::commit`] is called (dropping it gives everything back). The
    /// state stays locked meanwhile, so two admissions cannot book the same memory.
    pub fn begin<'a>(&'a self, pod: &'a Pod) -> MemoryAdmission<'a> {
        let state = self.lock();
        let before = state.clone();
        MemoryAdmission {
            manager: self,
            pod,
            state,
            before,
            reusable: Reusable::new(),
            done: false,
        }
    }

    /// Books memory for each container of the pod without NUMA guidance (no topology
    /// manager); all or nothing.
    pub fn admit(&self, pod: &Pod) -> Result<(), AllocateError> {
        let mut admission = self.begin(pod);
        for (container, plain_init) in containers_in_order(pod) {
            admission.allocate(container, plain_init, None)?;
        }
        admission.commit();
        Ok(())
    }

    /// The cpuset.mems a container is created with: the NUMA nodes of its blocks, as a list
    /// ("0,1"); None when it has none.
    pub fn cpuset_mems(&self, uid: &str, container: &str) -> Option<String> {
        self.policy.as_ref()?;
        let state = self.lock();
        let blocks = state.blocks(uid, container)?;
        let mut nodes: Vec<u32> = blocks
            .iter()
            .flat_map(|b| b.numa_affinity.iter().copied())
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        if nodes.is_empty() {
            return None;
        }
        let list: Vec<String> = nodes.iter().map(u32::to_string).collect();
        Some(list.join(","))
    }

    /// A container's blocks (pod-resources' memory).
    pub fn blocks(&self, uid: &str, container: &str) -> Vec<Block> {
        self.lock()
            .blocks(uid, container)
            .cloned()
            .unwrap_or_default()
    }

    /// Each node's allocatable memory per resource (pod-resources' allocatable memory); none
    /// under the `None` policy.
    pub fn allocatable(&self) -> Vec<Block> {
        match &self.policy {
            Some(p) => p.allocatable(&self.lock()),
            None => Vec::new(),
        }
    }

    /// A pod that is gone gives its memory back to its nodes.
    pub fn forget(&self, uid: &str) {
        let Some(policy) = &self.policy else {
            return;
        };
        let mut state = self.lock();
        let containers: Vec<String> = state
            .entries
            .get(uid)
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        if containers.is_empty() {
            return;
        }
        for name in &containers {
            policy.remove(&mut state, uid, name);
        }
        info!(%uid, "Static policy: memory given back to its NUMA nodes");
        self.save(&state);
    }

    /// Forgets every pod `keep` does not name (upstream's removal of stale state).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let stale: Vec<String> = self
            .lock()
            .entries
            .keys()
            .filter(|uid| !keep(uid))
            .cloned()
            .collect();
        for uid in stale {
            self.forget(&uid);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
