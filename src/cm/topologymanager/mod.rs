//! The topology manager (upstream's cm/topologymanager): at admission it asks the hint
//! providers (the CPU, memory and device managers) where each container's resources could sit
//! by NUMA node, merges their hints under the policy, refuses the pod with upstream's
//! `TopologyAffinityError` when the policy cannot be met, and has the providers allocate on the
//! chosen nodes. Scope `container` does this container by container, scope `pod` once for
//! the whole pod. With policy `none` the CPU and memory managers allocate with no alignment
//! and devices are picked at container start, as before the topology manager existed.
//!
//! Not here yet: devices aligned at admission are picked without the plugin's
//! GetPreferredAllocation (the plugin still gets Allocate at start).

pub mod policy;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use tracing::{info, warn};

use crate::cm::cpumanager::{AllocateError, CpuAdmission, CpuManager};
use crate::cm::devicemanager::{AllocationError, DeviceManager};
use crate::cm::memorymanager::{self, MemoryAdmission, MemoryManager};
use crate::cm::numa::{Hint, ResourceHints};
use crate::pod::containers_in_order;
use policy::{NumaInfo, Options, Policy};

pub const SCOPE_CONTAINER: &str = "container";
pub const SCOPE_POD: &str = "pod";

#[derive(Debug, thiserror::Error)]
pub enum TopologyManagerError {
    #[error("unknown policy: \"{0}\"")]
    UnknownPolicy(String),
    #[error("unknown scope: \"{0}\"")]
    UnknownScope(String),
    #[error(transparent)]
    Option(#[from] policy::OptionError),
    #[error("unsupported on machines with more than {0} NUMA Nodes")]
    TooManyNodes(usize),
    #[error("NUMA node {0} is above the 63 this kubelet can align")]
    NodeId(u32),
    #[error("error getting NUMA distances from sysfs: problem reading {path}: {source}")]
    Distance {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("error getting NUMA distances from sysfs: cannot convert {0:?} to int")]
    DistanceValue(String),
}

/// Why a pod's resources were refused, in upstream's reasons.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error("Resources cannot be allocated with Topology locality")]
    Topology,
    #[error(transparent)]
    Cpu(#[from] AllocateError),
    #[error("Allocate failed due to {0}, which is unexpected")]
    Device(#[from] AllocationError),
    #[error("Allocate failed due to {0}, which is unexpected")]
    Memory(#[from] memorymanager::AllocateError),
}

impl AdmitError {
    pub fn reason(&self) -> &'static str {
        match self {
            AdmitError::Topology => "TopologyAffinityError",
            AdmitError::Cpu(e) => e.reason(),
            AdmitError::Device(_) | AdmitError::Memory(_) => "UnexpectedAdmissionError",
        }
    }

    pub fn message(&self) -> String {
        match self {
            AdmitError::Cpu(e) => e.message(),
            other => other.to_string(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct TopologySettings {
    pub policy: String,
    pub scope: String,
    pub options: BTreeMap<String, String>,
    pub feature_gates: BTreeMap<String, bool>,
    pub sysfs: PathBuf,
}

impl From<&crate::config::Settings> for TopologySettings {
    fn from(settings: &crate::config::Settings) -> Self {
        let cfg = &settings.config;
        TopologySettings {
            policy: cfg.topology_manager_policy.clone(),
            scope: cfg.topology_manager_scope.clone(),
            options: cfg.topology_manager_policy_options.clone(),
            feature_gates: cfg.feature_gates.clone(),
            sysfs: PathBuf::from("/sys"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    Container,
    Pod,
}

pub struct TopologyManager {
    policy: Policy,
    scope: Scope,
    options: Options,
    numa: NumaInfo,
    /// The hint each admitted container was given (pod uid → container), until the pod goes.
    hints: Mutex<HashMap<String, BTreeMap<String, Hint>>>,
}

/// The NUMA node ids under `<sysfs>/devices/system/node`; a machine without the folder is
/// one node, 0.
fn read_nodes(sysfs: &Path) -> Vec<u32> {
    let mut nodes = crate::cm::numa::node_ids(sysfs);
    if nodes.is_empty() {
        nodes.push(0);
    }
    nodes
}

fn read_distances(sysfs: &Path, node: u32) -> Result<Vec<u64>, TopologyManagerError> {
    let path = sysfs.join(format!("devices/system/node/node{node}/distance"));
    let text = std::fs::read_to_string(&path)
        .map_err(|source| TopologyManagerError::Distance { path, source })?;
    text.split_whitespace()
        .map(|d| {
            d.parse::<u64>()
                .map_err(|_| TopologyManagerError::DistanceValue(d.to_string()))
        })
        .collect()
}

impl TopologyManager {
    /// Checks the settings against the machine: a bad policy, scope or option, or more NUMA
    /// nodes than the policy allows, stops the kubelet as upstream's does.
    pub fn start(s: &TopologySettings) -> Result<Arc<Self>, TopologyManagerError> {
        let policy = Policy::parse(&s.policy)
            .ok_or_else(|| TopologyManagerError::UnknownPolicy(s.policy.clone()))?;
        let scope = match s.scope.as_str() {
            SCOPE_CONTAINER | "" => Scope::Container,
            SCOPE_POD => Scope::Pod,
            other => return Err(TopologyManagerError::UnknownScope(other.to_string())),
        };
        let options = policy::options(&s.options, &s.feature_gates)?;
        let nodes = read_nodes(&s.sysfs);
        if policy != Policy::None {
            if nodes.len() > options.max_allowable_numa_nodes {
                return Err(TopologyManagerError::TooManyNodes(
                    options.max_allowable_numa_nodes,
                ));
            }
            if let Some(&high) = nodes.iter().find(|&&n| n >= 64) {
                return Err(TopologyManagerError::NodeId(high));
            }
        }
        let mut distances = BTreeMap::new();
        if options.prefer_closest {
            for &n in &nodes {
                distances.insert(n, read_distances(&s.sysfs, n)?);
            }
        }
        info!(policy = policy.name(), scope = ?scope, numa_nodes = ?nodes, "Creating topology manager");
        if policy == Policy::SingleNumaNode {
            // Upstream shows the failure series from the start.
            let failures = &crate::metrics::kubelet().aligned_compute_resources_failures;
            for scope in [SCOPE_CONTAINER, SCOPE_POD] {
                failures.add(&[scope, "numa_node"], 0.0);
            }
        }
        Ok(Arc::new(TopologyManager {
            policy,
            scope,
            options,
            numa: NumaInfo { nodes, distances },
            hints: Mutex::new(HashMap::new()),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, BTreeMap<String, Hint>>> {
        self.hints.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The hint the container was admitted with; None with policy none or when unknown.
    #[cfg(test)]
    pub fn affinity(&self, uid: &str, container: &str) -> Option<Hint> {
        self.lock().get(uid)?.get(container).copied()
    }

    /// Admits the pod's CPUs, memory and devices (see the module's words); on refusal
    /// nothing the pod was given at admission stays with it.
    pub fn admit(
        &self,
        pod: &Pod,
        cpus: Option<&CpuManager>,
        memory: Option<&MemoryManager>,
        devices: Option<&DeviceManager>,
    ) -> Result<(), AdmitError> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let metrics = crate::metrics::kubelet();
        metrics.topology_manager_admission_requests.inc(&[]);
        let started = std::time::Instant::now();
        let mut cpu = cpus.map(|c| c.begin(pod));
        let mut mem = memory.map(|m| m.begin(pod));
        let result = self.admit_with(pod, cpu.as_mut(), mem.as_mut(), devices);
        // Whole milliseconds, as upstream observes them.
        metrics
            .topology_manager_admission_duration
            .observe(&[], started.elapsed().as_millis() as f64);
        match result {
            Ok(()) => {
                if let Some(cpu) = cpu {
                    cpu.commit();
                }
                if let Some(mem) = mem {
                    mem.commit();
                }
                Ok(())
            }
            Err(e) => {
                // The CPU and memory admissions give back what they took when dropped.
                drop(mem);
                drop(cpu);
                if self.policy != Policy::None {
                    metrics.topology_manager_admission_errors.inc(&[]);
                    if let Some(devices) = devices {
                        devices.forget(uid);
                    }
                    self.forget(uid);
                }
                warn!(pod = ?pod.metadata.name, reason = e.reason(), error = %e, "Resources of the pod cannot be admitted");
                Err(e)
            }
        }
    }

    fn admit_with(
        &self,
        pod: &Pod,
        mut cpu: Option<&mut CpuAdmission<'_>>,
        mut mem: Option<&mut MemoryAdmission<'_>>,
        devices: Option<&DeviceManager>,
    ) -> Result<(), AdmitError> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let nodes = &self.numa.nodes;
        if self.policy == Policy::None {
            for (container, plain_init) in containers_in_order(pod) {
                if let Some(cpu) = cpu.as_deref_mut() {
                    cpu.allocate(container, plain_init, None)?;
                }
                if let Some(mem) = mem.as_deref_mut() {
                    mem.allocate(container, plain_init, None)?;
                }
            }
            return Ok(());
        }
        let cpu_hints = |h: ResourceHints| -> BTreeMap<String, ResourceHints> {
            h.map(|h| BTreeMap::from([(crate::pod::qos::CPU.to_string(), Some(h))]))
                .unwrap_or_default()
        };
        let pod_hint = if self.scope == Scope::Pod {
            let providers = [
                cpu_hints(cpu.as_deref().and_then(CpuAdmission::pod_hints)),
                mem.as_deref()
                    .map(MemoryAdmission::pod_hints)
                    .unwrap_or_default(),
                devices.map(|d| d.pod_hints(pod, nodes)).unwrap_or_default(),
            ];
            let hint = self.merge(pod, "", &providers)?;
            self.aligned(SCOPE_POD, true);
            Some(hint)
        } else {
            None
        };
        for (container, plain_init) in containers_in_order(pod) {
            let hint = match pod_hint {
                Some(h) => h,
                None => {
                    let providers = [
                        cpu_hints(cpu.as_deref().and_then(|c| c.hints(container))),
                        mem.as_deref()
                            .map(|m| m.hints(container))
                            .unwrap_or_default(),
                        devices
                            .map(|d| d.hints(pod, container, nodes))
                            .unwrap_or_default(),
                    ];
                    self.merge(pod, &container.name, &providers)?
                }
            };
            self.lock()
                .entry(uid.to_string())
                .or_default()
                .insert(container.name.clone(), hint);
            if let Some(cpu) = cpu.as_deref_mut() {
                cpu.allocate(container, plain_init, hint.affinity)?;
            }
            if let Some(mem) = mem.as_deref_mut() {
                mem.allocate(container, plain_init, Some(hint))?;
            }
            if let Some(devices) = devices {
                devices.assign_aligned(pod, container, hint.affinity)?;
            }
            if pod_hint.is_none() {
                self.aligned(SCOPE_CONTAINER, true);
            }
        }
        Ok(())
    }

    /// Counts an alignment single-numa-node guaranteed, or one it refused.
    fn aligned(&self, scope: &str, ok: bool) {
        if self.policy != Policy::SingleNumaNode {
            return;
        }
        let m = crate::metrics::kubelet();
        let family = if ok {
            &m.aligned_compute_resources
        } else {
            &m.aligned_compute_resources_failures
        };
        family.inc(&[scope, "numa_node"]);
    }

    fn merge(
        &self,
        pod: &Pod,
        container: &str,
        providers: &[BTreeMap<String, ResourceHints>],
    ) -> Result<Hint, AdmitError> {
        let (best, admit) = policy::merge(self.policy, &self.numa, &self.options, providers);
        info!(pod = ?pod.metadata.name, container, best_hint = %best, admit, "Topology manager: best hint");
        if admit {
            return Ok(best);
        }
        let scope = match self.scope {
            Scope::Pod => SCOPE_POD,
            Scope::Container => SCOPE_CONTAINER,
        };
        self.aligned(scope, false);
        Err(AdmitError::Topology)
    }

    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Forgets the hints of every pod `keep` does not name.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|uid, _| keep(uid));
    }

    #[cfg(test)]
    pub fn affinity_mask(&self, uid: &str, container: &str) -> Option<crate::cm::numa::NumaMask> {
        self.affinity(uid, container)?.affinity
    }
}

#[cfg(test)]
mod tests;
