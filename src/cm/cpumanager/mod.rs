//! The CPU manager (upstream's cm/cpumanager), policies `none` and `static`.
//!
//! With `static`, a container of a Guaranteed pod that asks for a whole number of CPUs gets
//! CPUs of its own at admission; every other container runs on the shared pool, which is
//! every CPU less those given out (the reserved ones stay in it). Each container's cpuset goes
//! into its CRI config when it is created, and a reconcile loop (cpuManagerReconcilePeriod)
//! moves running containers to the pool's new extent when exclusive CPUs are taken or given
//! back. What is given out is kept in `cpu_manager_state`, upstream's file, so a restarted
//! kubelet (ours or upstream's) keeps it; a file written under another policy stops the
//! kubelet, as upstream's does, until it is removed.
//!
//! As a topology manager hint provider it says which NUMA nodes could hold a container's (or
//! a pod's) exclusive CPUs, and takes them from the nodes chosen first.
//!
//! Not here yet: the `strict-cpu-reservation`, `prefer-align-cpus-by-uncorecache`,
//! `align-by-socket` and `distribute-cpus-across-cores` options (refused when set), and
//! dropping the CFS quota of containers with exclusive CPUs (DisableCPUQuotaWithExclusiveCPUs).

pub mod assign;
pub mod checkpoint;
pub mod cpuset;
pub mod policy;
pub mod topology;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

pub use cpuset::CpuSet;
pub use policy::AllocateError;
use policy::{Assignments, StaticPolicy};

use crate::cm::numa::{NumaMask, ResourceHints};
use crate::pod::containers_in_order;
use crate::quantity::Amount;

pub const NONE: &str = "none";
pub const STATIC: &str = "static";

#[derive(Debug, thiserror::Error)]
pub enum CpuManagerError {
    #[error("unknown policy: \"{0}\"")]
    UnknownPolicy(String),
    #[error("new none policy error: None policy: received unsupported options={0:?}")]
    NoneOptions(BTreeMap<String, String>),
    #[error("new static policy error: {0}")]
    Policy(#[from] policy::PolicyError),
    #[error("reading the CPU topology: {0}")]
    Topology(#[from] topology::TopologyError),
    #[error("[cpumanager] unable to determine reserved CPU resources for static policy")]
    NoReservation,
    #[error(
        "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"
    )]
    ZeroReservation,
    #[error("unable to parse reserved-cpus list: {0}")]
    ReservedList(cpuset::CpuSetError),
    #[error("reserved-cpus: {given} is not a subset of online-cpus: {online}")]
    ReservedOffline { given: String, online: CpuSet },
    #[error(
        "could not restore state from checkpoint: {reason}, please drain this node and delete the CPU manager checkpoint file {path:?} before restarting Kubelet"
    )]
    Restore { reason: String, path: PathBuf },
    #[error(
        "start cpu manager error: {source}; please drain the node and remove the policy state file {path:?}"
    )]
    InvalidState {
        source: policy::StateError,
        path: PathBuf,
    },
}

/// The settings the CPU manager is made from.
#[derive(Clone, Debug)]
pub struct CpuSettings {
    pub policy: String,
    pub options: BTreeMap<String, String>,
    pub reconcile_period: Duration,
    pub reserved_system_cpus: String,
    /// system-reserved + kube-reserved cpu (after reservedSystemCPUs replaced them); None when
    /// neither names cpu.
    pub reserved_cpu: Option<Amount>,
    pub feature_gates: BTreeMap<String, bool>,
    pub root_dir: PathBuf,
    pub sysfs: PathBuf,
}

impl From<&crate::config::Settings> for CpuSettings {
    fn from(settings: &crate::config::Settings) -> Self {
        let cfg = &settings.config;
        let (system, kube) = crate::cm::allocatable::with_reserved_cpus(
            &cfg.system_reserved,
            &cfg.kube_reserved,
            &cfg.reserved_system_cpus,
        );
        let reserved_cpu = [&system, &kube]
            .iter()
            .filter_map(|r| r.get(crate::pod::qos::CPU))
            .map(|v| Amount::parse(v).unwrap_or_default())
            .reduce(|a, b| a + b);
        CpuSettings {
            policy: cfg.cpu_manager_policy.clone(),
            options: cfg.cpu_manager_policy_options.clone(),
            reconcile_period: cfg.cpu_manager_reconcile_period.0,
            reserved_system_cpus: cfg.reserved_system_cpus.clone(),
            reserved_cpu,
            feature_gates: cfg.feature_gates.clone(),
            root_dir: settings.flags.root_dir.clone(),
            sysfs: PathBuf::from("/sys"),
        }
    }
}

pub struct CpuManager {
    /// None is the `none` policy: no cpuset is set, nothing is exclusive.
    policy: Option<StaticPolicy>,
    path: PathBuf,
    reconcile_period: Duration,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    state: Assignments,
    /// Pods admitted and not yet forgotten: the ones whose containers are reconciled.
    pods: HashSet<String>,
    /// The cpuset each running container was last given (by container id), pruned to the
    /// running containers on every reconcile.
    last_update: HashMap<String, CpuSet>,
}

/// One pod's admission in progress (see [`CpuManager::begin`]).
pub struct CpuAdmission<'a> {
    manager: &'a CpuManager,
    pod: &'a Pod,
    inner: std::sync::MutexGuard<'a, Inner>,
    before: Assignments,
    /// CPUs the pod's finished init containers held, which the next container may take.
    reusable: CpuSet,
    done: bool,
}

impl CpuAdmission<'_> {
    fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    /// The container's hints (upstream's GetTopologyHints): None when it gets no exclusive
    /// CPUs; an empty list when what it holds no longer matches its request.
    pub fn hints(&self, container: &Container) -> ResourceHints {
        let policy = self.manager.policy.as_ref()?;
        let n = policy::guaranteed_cpus(self.pod, container);
        if n == 0 {
            return None;
        }
        if let Some(held) = self.inner.state.get(self.uid(), &container.name) {
            if held.len() != n {
                return Some(Vec::new());
            }
            return Some(policy.hints(held, &CpuSet::new(), n));
        }
        let available = self.inner.state.default.difference(&policy.reserved);
        Some(policy.hints(&available, &self.reusable, n))
    }

    /// The whole pod's hints (the topology manager's pod scope).
    pub fn pod_hints(&self) -> ResourceHints {
        let policy = self.manager.policy.as_ref()?;
        let n = policy::pod_guaranteed_cpus(self.pod);
        if n == 0 {
            return None;
        }
        let mut held = CpuSet::new();
        for (container, _) in containers_in_order(self.pod) {
            if let Some(cpus) = self.inner.state.get(self.uid(), &container.name) {
                if cpus.len() != policy::guaranteed_cpus(self.pod, container) {
                    return Some(Vec::new());
                }
                held = held.union(cpus);
            }
        }
        if held.len() == n {
            return Some(policy.hints(&held, &CpuSet::new(), n));
        }
        let available = self.inner.state.default.difference(&policy.reserved);
        Some(policy.hints(&available, &held, n))
    }

    /// Exclusive CPUs for the container when it gets them, from `affinity`'s NUMA nodes first.
    pub fn allocate(
        &mut self,
        container: &Container,
        plain_init: bool,
        affinity: Option<NumaMask>,
    ) -> Result<(), AllocateError> {
        let manager = self.manager;
        let Some(policy) = &manager.policy else {
            return Ok(());
        };
        let pod = self.pod;
        match policy.allocate(
            &mut self.inner.state,
            pod,
            container,
            &self.reusable,
            affinity,
        ) {
            Ok(Some(cpus)) => {
                let m = crate::metrics::kubelet();
                m.cpu_manager_pinning_requests.inc(&[]);
                if policy.options.full_pcpus_only {
                    m.aligned_compute_resources
                        .inc(&["container", "physical_cpu"]);
                }
                if plain_init {
                    self.reusable = self.reusable.union(&cpus);
                } else {
                    self.reusable = self.reusable.difference(&cpus);
                }
                info!(pod = ?pod.metadata.name, container = %container.name, cpus = %cpus, "Static policy: exclusive CPUs");
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                let m = crate::metrics::kubelet();
                m.cpu_manager_pinning_requests.inc(&[]);
                m.cpu_manager_pinning_errors.inc(&[]);
                if policy.options.full_pcpus_only {
                    m.aligned_compute_resources_failures
                        .inc(&["container", "physical_cpu"]);
                }
                warn!(pod = ?pod.metadata.name, container = %container.name, error = %e, "Unable to allocate CPUs");
                Err(e)
            }
        }
    }

    /// Keeps what was allocated and writes the state when it changed.
    pub fn commit(mut self) {
        self.done = true;
        if self.manager.policy.is_none() {
            return;
        }
        let uid = self.uid().to_string();
        self.inner.pods.insert(uid);
        if self.inner.state != self.before {
            self.manager.save(&self.inner.state);
        }
    }
}

impl Drop for CpuAdmission<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.inner.state = std::mem::take(&mut self.before);
        }
    }
}

fn policy_name(policy: &Option<StaticPolicy>) -> &'static str {
    if policy.is_some() { STATIC } else { NONE }
}

impl CpuManager {
    /// Builds the policy and reads (or writes) the state file: a bad setting, a state written
    /// under another policy or one the machine no longer matches is an error, and the kubelet
    /// does not start.
    pub fn start(s: &CpuSettings) -> Result<Arc<Self>, CpuManagerError> {
        let policy = match s.policy.as_str() {
            NONE | "" => {
                if !s.options.is_empty() {
                    return Err(CpuManagerError::NoneOptions(s.options.clone()));
                }
                None
            }
            STATIC => Some(static_policy(s)?),
            other => return Err(CpuManagerError::UnknownPolicy(other.to_string())),
        };
        let path = checkpoint::path_in(&s.root_dir);
        let name = policy_name(&policy);
        let restore = |reason: String| CpuManagerError::Restore {
            reason,
            path: path.clone(),
        };
        let restored = match checkpoint::read(&path).map_err(|e| restore(e.to_string()))? {
            None => None,
            Some(cp) => {
                if cp.policy_name != name {
                    return Err(restore(format!(
                        "configured policy {name:?} differs from state checkpoint policy {:?}",
                        cp.policy_name
                    )));
                }
                Some(from_checkpoint(&cp).map_err(restore)?)
            }
        };
        let mut state = restored.clone().unwrap_or_default();
        if let Some(p) = &policy {
            p.validate(&mut state)
                .map_err(|source| CpuManagerError::InvalidState {
                    source,
                    path: path.clone(),
                })?;
            info!(reserved = %p.reserved, shared = %state.default, "Static policy: reserved CPUs not available for exclusive assignment");
        }
        let manager = CpuManager {
            policy,
            path,
            reconcile_period: s.reconcile_period,
            inner: Mutex::new(Inner {
                state,
                ..Inner::default()
            }),
        };
        // Written when missing or when the policy's start changed it (an empty state fills
        // the pool), as upstream stores it.
        let inner = manager.lock();
        if restored.as_ref() != Some(&inner.state) {
            manager.save(&inner.state);
        } else {
            manager.set_gauges(&inner.state);
        }
        drop(inner);
        info!(policy = name, reconcile_period = ?s.reconcile_period, "Starting CPU manager");
        Ok(Arc::new(manager))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pool gauges, from the state.
    fn set_gauges(&self, state: &Assignments) {
        if let Some(policy) = &self.policy {
            let m = crate::metrics::kubelet();
            let shared = state.default.difference(&policy.reserved).len();
            m.cpu_manager_shared_pool_millicores
                .set(&[], (shared * 1000) as f64);
            let exclusive = state
                .entries
                .values()
                .flat_map(|c| c.values())
                .fold(CpuSet::new(), |acc, c| acc.union(c));
            m.cpu_manager_exclusive_cpus
                .set(&[], exclusive.len() as f64);
        }
    }

    /// Writes the state (every change is saved, so the gauges follow it here).
    fn save(&self, state: &Assignments) {
        self.set_gauges(state);
        let cp = to_checkpoint(policy_name(&self.policy), state);
        if let Err(e) = checkpoint::write(&self.path, &cp) {
            error!(error = %e, "Failed to store the CPU manager state");
        }
    }

    /// Exclusive CPUs for each container of the pod that gets them, in the order the pod's
    /// containers run (init containers' CPUs go on to the app containers); all or nothing.
    /// No NUMA alignment: the topology manager's admission goes through [`CpuManager::begin`].
    pub fn admit(&self, pod: &Pod) -> Result<(), AllocateError> {
        let mut admission = self.begin(pod);
        for (container, plain_init) in containers_in_order(pod) {
            admission.allocate(container, plain_init, None)?;
        }
        admission.commit();
        Ok(())
    }

    /// Starts the admission of `pod`: hints and allocations container by container, kept only
    /// when [`CpuAdmission::commit`] is called (dropping it gives every CPU back). The state
    /// stays locked meanwhile, so two admissions cannot hand out the same CPUs.
    pub fn begin<'a>(&'a self, pod: &'a Pod) -> CpuAdmission<'a> {
        let inner = self.lock();
        let before = inner.state.clone();
        CpuAdmission {
            manager: self,
            pod,
            inner,
            before,
            reusable: CpuSet::new(),
            done: false,
        }
    }

    /// The cpuset a container is created with: its exclusive CPUs or the shared pool; None
    /// with the `none` policy.
    pub fn cpuset_for(&self, uid: &str, container: &str) -> Option<CpuSet> {
        self.policy.as_ref()?;
        let inner = self.lock();
        Some(
            inner
                .state
                .get(uid, container)
                .unwrap_or(&inner.state.default)
                .clone(),
        )
    }

    /// What a running container was created with, so the reconcile loop does not set it again.
    pub fn started(&self, container_id: &str, cpus: &CpuSet) {
        if self.policy.is_some() {
            self.lock()
                .last_update
                .insert(container_id.to_string(), cpus.clone());
        }
    }

    pub fn exclusive_cpus(&self, uid: &str, container: &str) -> CpuSet {
        self.lock()
            .state
            .get(uid, container)
            .cloned()
            .unwrap_or_default()
    }

    /// CPUs that can be given out exclusively; none with the `none` policy.
    pub fn allocatable_cpus(&self) -> CpuSet {
        self.policy
            .as_ref()
            .map(StaticPolicy::allocatable)
            .unwrap_or_default()
    }

    /// A pod that is gone gives its CPUs back to the shared pool.
    pub fn forget(&self, uid: &str) {
        let Some(policy) = &self.policy else {
            return;
        };
        let mut inner = self.lock();
        inner.pods.remove(uid);
        let containers: Vec<String> = inner
            .state
            .entries
            .get(uid)
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        if containers.is_empty() {
            return;
        }
        for name in &containers {
            policy.remove(&mut inner.state, uid, name);
        }
        info!(%uid, shared = %inner.state.default, "Static policy: CPUs given back to the shared pool");
        self.save(&inner.state);
    }

    /// Forgets every pod `keep` does not name (upstream's removal of stale state, once all
    /// sources are ready).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let stale: Vec<String> = {
            let inner = self.lock();
            inner
                .state
                .entries
                .keys()
                .chain(inner.pods.iter())
                .filter(|uid| !keep(uid))
                .cloned()
                .collect()
        };
        for uid in stale {
            self.forget(&uid);
        }
    }

    /// The running containers whose cpuset differs from what they were last given.
    fn due(&self, running: &[(String, String, String)]) -> Vec<(String, CpuSet)> {
        let mut inner = self.lock();
        let ids: HashSet<&str> = running.iter().map(|(id, _, _)| id.as_str()).collect();
        inner.last_update.retain(|id, _| ids.contains(id.as_str()));
        running
            .iter()
            .filter(|(_, uid, _)| inner.pods.contains(uid))
            .filter_map(|(id, uid, name)| {
                let want = inner
                    .state
                    .get(uid, name)
                    .unwrap_or(&inner.state.default)
                    .clone();
                let current = want.is_empty() || inner.last_update.get(id) == Some(&want);
                (!current).then(|| (id.clone(), want))
            })
            .collect()
    }

    /// One pass: running containers of admitted pods get their cpuset again when it changed.
    pub async fn reconcile(&self, cri: &crate::cri::RuntimeClient) {
        use crate::cri::api;
        use crate::runtime::labels::{CONTAINER_NAME, POD_UID};
        let filter = api::ContainerFilter {
            state: Some(api::ContainerStateValue {
                state: api::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        };
        let containers = match cri.list_containers(Some(filter)).await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "ReconcileState: listing the running containers failed");
                return;
            }
        };
        let running: Vec<(String, String, String)> = containers
            .into_iter()
            .filter_map(|c| {
                let uid = c.labels.get(POD_UID)?.clone();
                let name = c.labels.get(CONTAINER_NAME)?.clone();
                Some((c.id, uid, name))
            })
            .collect();
        for (id, cpus) in self.due(&running) {
            let resources = api::LinuxContainerResources {
                cpuset_cpus: cpus.to_string(),
                ..Default::default()
            };
            match cri.update_container_resources(&id, resources).await {
                Ok(()) => {
                    debug!(container = %id, cpus = %cpus, "ReconcileState: updated the container's cpuset");
                    self.lock().last_update.insert(id, cpus);
                }
                Err(e) => {
                    warn!(container = %id, cpus = %cpus, error = %e, "ReconcileState: failed to update container");
                }
            }
        }
    }

    /// Runs the reconcile loop (static policy only) until cancelled.
    pub fn spawn_reconcile(
        self: &Arc<Self>,
        cri: crate::cri::RuntimeClient,
        tasks: &mut crate::tasks::Tasks,
        cancel: &CancellationToken,
    ) {
        if self.policy.is_none() {
            return;
        }
        let period = if self.reconcile_period.is_zero() {
            Duration::from_secs(10)
        } else {
            self.reconcile_period
        };
        let manager = self.clone();
        let cancel = cancel.child_token();
        tasks.background("cpu manager reconcile", async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tick.tick() => manager.reconcile(&cri).await,
                }
            }
        });
    }
}

fn static_policy(s: &CpuSettings) -> Result<StaticPolicy, CpuManagerError> {
    let topology = topology::Topology::read(&s.sysfs)?;
    info!(cpus = %topology.all(), cores = topology.cores().len(), sockets = topology.sockets().len(), numa_nodes = topology.numa_nodes().len(), "Detected CPU topology");
    let reserved_cpus =
        CpuSet::parse(&s.reserved_system_cpus).map_err(CpuManagerError::ReservedList)?;
    if !reserved_cpus.is_subset(&topology.all()) {
        return Err(CpuManagerError::ReservedOffline {
            given: s.reserved_system_cpus.clone(),
            online: topology.all(),
        });
    }
    let reserved = s.reserved_cpu.ok_or(CpuManagerError::NoReservation)?;
    if reserved <= Amount::ZERO {
        return Err(CpuManagerError::ZeroReservation);
    }
    // Fractions of a CPU cannot be kept apart: round up.
    let millis = reserved.millis().unwrap_or(0);
    let num_reserved = usize::try_from((millis + 999) / 1000).unwrap_or(0);
    let options = policy::options(&s.options, &s.feature_gates)?;
    Ok(StaticPolicy::new(
        topology,
        num_reserved,
        reserved_cpus,
        options,
    )?)
}

fn from_checkpoint(cp: &checkpoint::Checkpoint) -> Result<Assignments, String> {
    let default = CpuSet::parse(&cp.default_cpu_set).map_err(|e| {
        format!(
            "could not parse default cpu set {:?}: {e}",
            cp.default_cpu_set
        )
    })?;
    let mut entries: BTreeMap<String, BTreeMap<String, CpuSet>> = BTreeMap::new();
    for (pod, containers) in cp.entries.iter().flatten() {
        for (container, text) in containers {
            let cpus = CpuSet::parse(text).map_err(|e| {
                format!("could not parse cpuset {text:?} for container {container:?} in pod {pod:?}: {e}")
            })?;
            entries
                .entry(pod.clone())
                .or_default()
                .insert(container.clone(), cpus);
        }
    }
    Ok(Assignments { default, entries })
}

fn to_checkpoint(policy: &str, state: &Assignments) -> checkpoint::Checkpoint {
    checkpoint::Checkpoint {
        policy_name: policy.to_string(),
        default_cpu_set: state.default.to_string(),
        entries: Some(
            state
                .entries
                .iter()
                .map(|(pod, containers)| {
                    let containers = containers
                        .iter()
                        .map(|(name, cpus)| (name.clone(), cpus.to_string()))
                        .collect();
                    (pod.clone(), containers)
                })
                .collect(),
        ),
        checksum: 0,
    }
}

#[cfg(test)]
pub(crate) mod tests;
