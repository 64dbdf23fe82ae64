//! The static policy's bookkeeping: the shared pool (upstream's default CPU set, where every
//! container without exclusive CPUs runs), the reserved CPUs (in the pool, never given out)
//! and each Guaranteed container's exclusive CPUs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::assign::{self, TakeError};
use super::cpuset::CpuSet;
use super::topology::Topology;
use crate::cm::numa::{Hint, NumaMask};
use crate::pod::qos::{CPU, QosClass, pod_qos_class};
use crate::quantity::Amount;

pub const FULL_PCPUS_ONLY: &str = "full-pcpus-only";
pub const DISTRIBUTE_ACROSS_NUMA: &str = "distribute-cpus-across-numa";
/// Upstream v1.34's other options, by maturity; this kubelet refuses them (see `options`).
const BETA_UNSUPPORTED: &[&str] = &["strict-cpu-reservation", "prefer-align-cpus-by-uncorecache"];
const ALPHA_UNSUPPORTED: &[&str] = &["align-by-socket", "distribute-cpus-across-cores"];

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PolicyError {
    #[error("unknown CPU Manager Policy option: {0:?}")]
    UnknownOption(String),
    #[error("CPU Manager Policy Alpha-level Options not enabled, but option {0:?} provided")]
    AlphaNotEnabled(String),
    #[error("CPU Manager Policy Beta-level Options not enabled, but option {0:?} provided")]
    BetaNotEnabled(String),
    #[error("CPU Manager Policy option {0:?} is not implemented by this version of kubelet-rs")]
    NotImplemented(String),
    #[error("bad value for option {name:?}: {value:?} is not a boolean")]
    BadValue { name: String, value: String },
    #[error(
        "[cpumanager] unable to reserve the required amount of CPUs (size of {reserved} did not equal {want})"
    )]
    Reserve { reserved: CpuSet, want: usize },
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StateError {
    #[error("default cpuset cannot be empty")]
    EmptyDefault,
    #[error("not all reserved cpus: \"{reserved}\" are present in defaultCpuSet: \"{default}\"")]
    ReservedMissing { reserved: CpuSet, default: CpuSet },
    #[error(
        "pod: {pod}, container: {container} cpuset: \"{cpus}\" overlaps with default cpuset \"{default}\""
    )]
    Overlap {
        pod: String,
        container: String,
        cpus: CpuSet,
        default: CpuSet,
    },
    #[error(
        "current set of available CPUs \"{online}\" doesn't match with CPUs in state \"{known}\""
    )]
    Mismatch { online: CpuSet, known: CpuSet },
}

/// Why a container gets no exclusive CPUs; the reason is upstream's admission reason.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AllocateError {
    #[error(transparent)]
    Take(#[from] TakeError),
    #[error(
        "SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {per_core}"
    )]
    SmtNotMultiple { requested: usize, per_core: usize },
    #[error(
        "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {available}, requested CPUs = {requested}, CPUs per core = {per_core}"
    )]
    SmtNotEnough {
        available: usize,
        requested: usize,
        per_core: usize,
    },
}

impl AllocateError {
    pub fn reason(&self) -> &'static str {
        match self {
            AllocateError::Take(_) => "UnexpectedAdmissionError",
            _ => "SMTAlignmentError",
        }
    }

    /// The status message: upstream wraps errors that are not its own admission errors.
    pub fn message(&self) -> String {
        match self {
            AllocateError::Take(e) => format!("Allocate failed due to {e}, which is unexpected"),
            e => e.to_string(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Options {
    pub full_pcpus_only: bool,
    pub distribute_across_numa: bool,
}

/// The static policy's options, checked as upstream v1.34 checks them: known names, their
/// maturity gate, a boolean value. Options this kubelet does not implement are refused rather
/// than accepted and ignored.
pub fn options(
    given: &BTreeMap<String, String>,
    gates: &BTreeMap<String, bool>,
) -> Result<Options, PolicyError> {
    let gate = |name: &str, default: bool| gates.get(name).copied().unwrap_or(default);
    let mut out = Options::default();
    for (name, value) in given {
        let beta = [DISTRIBUTE_ACROSS_NUMA].contains(&name.as_str())
            || BETA_UNSUPPORTED.contains(&name.as_str());
        let alpha = ALPHA_UNSUPPORTED.contains(&name.as_str());
        if !beta && !alpha && name != FULL_PCPUS_ONLY {
            return Err(PolicyError::UnknownOption(name.clone()));
        }
        if alpha && !gate("CPUManagerPolicyAlphaOptions", false) {
            return Err(PolicyError::AlphaNotEnabled(name.clone()));
        }
        if beta && !gate("CPUManagerPolicyBetaOptions", true) {
            return Err(PolicyError::BetaNotEnabled(name.clone()));
        }
        let on = crate::config::parse_go_bool(value).ok_or_else(|| PolicyError::BadValue {
            name: name.clone(),
            value: value.clone(),
        })?;
        match name.as_str() {
            FULL_PCPUS_ONLY => out.full_pcpus_only = on,
            DISTRIBUTE_ACROSS_NUMA => out.distribute_across_numa = on,
            _ if on => return Err(PolicyError::NotImplemented(name.clone())),
            _ => {}
        }
    }
    Ok(out)
}

/// The shared pool and the exclusive assignments (pod uid → container → CPUs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assignments {
    pub default: CpuSet,
    pub entries: BTreeMap<String, BTreeMap<String, CpuSet>>,
}

impl Assignments {
    pub fn get(&self, uid: &str, container: &str) -> Option<&CpuSet> {
        self.entries.get(uid).and_then(|c| c.get(container))
    }
}

#[derive(Clone, Debug)]
pub struct StaticPolicy {
    pub topology: Topology,
    pub reserved: CpuSet,
    pub options: Options,
}

impl StaticPolicy {
    /// `reserved_cpus` when given (reservedSystemCPUs), else `num_reserved` CPUs taken by
    /// topology from the lowest cores.
    pub fn new(
        topology: Topology,
        num_reserved: usize,
        reserved_cpus: CpuSet,
        options: Options,
    ) -> Result<Self, PolicyError> {
        let reserved = if reserved_cpus.is_empty() {
            assign::take_by_topology(&topology, &topology.all(), num_reserved).unwrap_or_default()
        } else {
            reserved_cpus
        };
        if reserved.len() != num_reserved {
            return Err(PolicyError::Reserve {
                reserved,
                want: num_reserved,
            });
        }
        Ok(StaticPolicy {
            topology,
            reserved,
            options,
        })
    }

    /// Upstream's checks of a state read back: an empty one starts with every CPU shared.
    pub fn validate(&self, state: &mut Assignments) -> Result<(), StateError> {
        if state.default.is_empty() {
            if !state.entries.is_empty() {
                return Err(StateError::EmptyDefault);
            }
            state.default = self.topology.all();
            return Ok(());
        }
        if !self.reserved.is_subset(&state.default) {
            return Err(StateError::ReservedMissing {
                reserved: self.reserved.clone(),
                default: state.default.clone(),
            });
        }
        let mut known = state.default.clone();
        for (pod, containers) in &state.entries {
            for (container, cpus) in containers {
                if !cpus.intersection(&state.default).is_empty() {
                    return Err(StateError::Overlap {
                        pod: pod.clone(),
                        container: container.clone(),
                        cpus: cpus.clone(),
                        default: state.default.clone(),
                    });
                }
                known = known.union(cpus);
            }
        }
        if known != self.topology.all() {
            return Err(StateError::Mismatch {
                online: self.topology.all(),
                known,
            });
        }
        Ok(())
    }

    pub fn allocatable(&self) -> CpuSet {
        self.topology.all().difference(&self.reserved)
    }

    /// Exclusive CPUs for the container when it is Guaranteed with a whole number of CPUs;
    /// `reusable` are the CPUs the pod's finished init containers held.
    pub fn allocate(
        &self,
        state: &mut Assignments,
        pod: &Pod,
        container: &Container,
        reusable: &CpuSet,
        affinity: Option<NumaMask>,
    ) -> Result<Option<CpuSet>, AllocateError> {
        let n = guaranteed_cpus(pod, container);
        if n == 0 {
            return Ok(None);
        }
        let per_core = self.topology.cpus_per_core();
        if self.options.full_pcpus_only && !n.is_multiple_of(per_core) {
            return Err(AllocateError::SmtNotMultiple {
                requested: n,
                per_core,
            });
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if let Some(cpus) = state.get(uid, &container.name) {
            return Ok(Some(cpus.clone()));
        }
        let available = state.default.difference(&self.reserved).union(reusable);
        if self.options.full_pcpus_only {
            let whole = self
                .topology
                .cores()
                .into_iter()
                .filter(|&c| self.topology.cpus_in_core(c).is_subset(&available))
                .count()
                * per_core;
            if whole < n {
                return Err(AllocateError::SmtNotEnough {
                    available: whole,
                    requested: n,
                    per_core,
                });
            }
        }
        // CPUs on the NUMA nodes the topology manager chose first, the rest wherever they are
        // free (upstream's allocateCPUs).
        let mut cpus = CpuSet::new();
        if let Some(mask) = affinity {
            let aligned = self.cpus_in(mask).intersection(&available);
            cpus = self.take(&aligned, n.min(aligned.len()))?;
        }
        let rest = self.take(&available.difference(&cpus), n - cpus.len())?;
        let cpus = cpus.union(&rest);
        state.default = state.default.difference(&cpus);
        state
            .entries
            .entry(uid.to_string())
            .or_default()
            .insert(container.name.clone(), cpus.clone());
        Ok(Some(cpus))
    }

    /// `n` of `available`: spread over NUMA nodes with distribute-cpus-across-numa when that
    /// applies, else packed by topology.
    fn take(&self, available: &CpuSet, n: usize) -> Result<CpuSet, assign::TakeError> {
        if n == 0 {
            return Ok(CpuSet::new());
        }
        if self.options.distribute_across_numa {
            let group = if self.options.full_pcpus_only {
                self.topology.cpus_per_core()
            } else {
                1
            };
            if let Some(taken) = assign::take_distributed(&self.topology, available, n, group) {
                return taken;
            }
        }
        assign::take_by_topology(&self.topology, available, n)
    }

    fn cpus_in(&self, mask: NumaMask) -> CpuSet {
        mask.nodes().into_iter().fold(CpuSet::new(), |acc, n| {
            acc.union(&self.topology.cpus_in_numa(n))
        })
    }

    /// The NUMA placements `n` exclusive CPUs can have, given the free CPUs and those the pod
    /// hands on (upstream's generateCPUTopologyHints).
    pub fn hints(&self, available: &CpuSet, reusable: &CpuSet, n: usize) -> Vec<Hint> {
        let node_of = |cpus: &CpuSet| -> Vec<Vec<u32>> {
            cpus.iter()
                .filter_map(|c| self.topology.cpus.get(&c))
                .map(|info| vec![info.numa])
                .collect()
        };
        let nodes: Vec<u32> = self.topology.numa_nodes().into_iter().collect();
        crate::cm::numa::hints_for(
            &nodes,
            n,
            &node_of(&self.topology.all()),
            &node_of(available),
            &node_of(reusable),
        )
    }

    /// Gives the container's CPUs back to the pool, except those a sibling still holds (an
    /// app container may hold what an init container of the pod held before it).
    pub fn remove(&self, state: &mut Assignments, uid: &str, container: &str) {
        let Some(containers) = state.entries.get_mut(uid) else {
            return;
        };
        let Some(cpus) = containers.remove(container) else {
            return;
        };
        let in_use = containers
            .values()
            .fold(CpuSet::new(), |acc, c| acc.union(c));
        if containers.is_empty() {
            state.entries.remove(uid);
        }
        state.default = state.default.union(&cpus.difference(&in_use));
    }
}

/// Exclusive CPUs the whole pod needs at once: its longest-running containers' sum (app
/// containers and sidecars) or, when more, the most a plain init container needs beside the
/// sidecars started before it.
pub fn pod_guaranteed_cpus(pod: &Pod) -> usize {
    let spec = pod.spec.as_ref();
    let mut init_peak = 0;
    let mut sidecars = 0;
    for c in spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
    {
        let n = guaranteed_cpus(pod, c);
        if crate::pod::is_sidecar(c) {
            sidecars += n;
        } else {
            init_peak = init_peak.max(sidecars + n);
        }
    }
    let apps: usize = spec
        .map(|s| s.containers.iter().map(|c| guaranteed_cpus(pod, c)).sum())
        .unwrap_or(0);
    init_peak.max(apps + sidecars)
}

/// Upstream's rule: a Guaranteed pod's container whose CPU request is a whole number.
pub fn guaranteed_cpus(pod: &Pod, container: &Container) -> usize {
    if pod_qos_class(pod) != QosClass::Guaranteed {
        return 0;
    }
    let resources = container.resources.as_ref();
    // A static pod's request defaults to its limit, as the API server defaults others.
    let quantity = resources
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(CPU))
        .or_else(|| {
            resources
                .and_then(|r| r.limits.as_ref())
                .and_then(|l| l.get(CPU))
        });
    let Some(millis) = quantity
        .and_then(|q| Amount::of(q).ok())
        .and_then(Amount::millis)
    else {
        return 0;
    };
    if millis <= 0 || millis % 1000 != 0 {
        return 0;
    }
    usize::try_from(millis / 1000).unwrap_or(0)
}
