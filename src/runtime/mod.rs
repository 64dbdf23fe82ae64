//! The runtime manager: converges one pod towards its spec over the CRI, and speaks only CRI.
//! `plan` decides with `actions`; `sync_pod` carries the decisions out, with the pod inputs the
//! worker read for them, through the files beside it (`create_sandbox`, `start`, `stop`,
//! `apply_resize`, `pod_status`).

pub mod actions;
pub mod apparmor;
mod apply_resize;
pub mod backoff;
pub mod container;
mod create_sandbox;
pub mod dns;
pub mod env;
pub mod ephemeral;
mod hooks;
pub mod images;
pub mod labels;
mod metrics;
pub mod observed;
mod pod_status;
pub mod pull_secrets;
pub mod resize;
pub mod sandbox;
pub mod seccomp;
pub mod sidecars;
mod start;
mod stop;
mod termination_message;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
pub mod userns;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use tracing::{debug, warn};

use crate::cm::CgroupManager;
use crate::cri::{CriError, RuntimeClient};
use crate::events::{EventRecorder, EventType};
use crate::pod::hostname;
use crate::podinputs::runtime_class::RuntimeClassError;
use crate::podinputs::{Needs, PodInputs};
use actions::{PodActions, compute_pod_actions};
use backoff::Backoff;
use env::PodFacts;
use images::ImagePuller;
use observed::ObservedPod;

use crate::volume::PodVolumes;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{op}: {source}")]
    Cri {
        op: &'static str,
        #[source]
        source: CriError,
    },
    #[error("pod cgroup: {0}")]
    Cgroup(#[from] crate::cm::CgroupError),
    #[error("blocking task failed: {0}")]
    Blocking(String),
    #[error(transparent)]
    RuntimeClass(#[from] RuntimeClassError),
    #[error(transparent)]
    Hostname(#[from] hostname::HostnameError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error(transparent)]
    UserNamespace(#[from] userns::UsernsError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn cri(op: &'static str) -> impl FnOnce(CriError) -> RuntimeError {
    move |source| RuntimeError::Cri { op, source }
}

/// Why a container is not running, as the pod status will show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Default)]
pub struct SyncOutcome {
    pub waiting: HashMap<String, Waiting>,
    /// Containers this sync started.
    pub started: usize,
    /// The earliest moment the pod needs another look (backoff expiry, retry after an error).
    pub requeue_after: Option<Duration>,
    pub finished: bool,
    /// Why an in-place resize could not be applied (it is tried again on the next sync).
    pub resize_error: Option<String>,
}

impl SyncOutcome {
    fn requeue(&mut self, after: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(after, |d| d.min(after)));
    }
}

/// What one sync step will do; see [`RuntimeManager::plan`].
#[derive(Debug)]
pub struct SyncPlan {
    actions: PodActions,
    resize: Option<resize::ResizePlan>,
}

impl SyncPlan {
    /// The pod inputs the step reads: a new sandbox's handler, new containers' env and pull
    /// secrets. A pod that has finished reads none.
    pub fn needs(&self) -> Needs {
        let a = &self.actions;
        Needs {
            sandbox: a.create_sandbox && !a.pod_finished,
            containers: !a.start.is_empty() && !a.pod_finished,
        }
    }
}

pub struct RuntimeSettings {
    pub node_ip: String,
    pub logs_root: PathBuf,
    pub root_dir: PathBuf,
    pub dns: dns::DnsSettings,
    pub machine_memory: i64,
    pub machine_cpu_millis: i64,
    pub cgroup_options: crate::cm::PodCgroupOptions,
    pub runtime_handler: String,
    pub seccomp: seccomp::SeccompSettings,
}

impl RuntimeSettings {
    pub fn new(settings: &crate::config::Settings, host: &crate::host::Host) -> Self {
        let cfg = &settings.config;
        RuntimeSettings {
            node_ip: host.node_ip.clone(),
            logs_root: PathBuf::from(&cfg.pod_logs_dir),
            root_dir: settings.flags.root_dir.clone(),
            dns: dns::DnsSettings {
                cluster_dns: cfg.cluster_dns.clone(),
                cluster_domain: cfg.cluster_domain.clone(),
                host: dns::load_host_resolv_conf(std::path::Path::new(&cfg.resolv_conf)),
            },
            machine_memory: host.memory_bytes(),
            machine_cpu_millis: host.cpu_millis(),
            cgroup_options: crate::cm::CgroupSettings::from(settings).pod,
            runtime_handler: String::new(),
            seccomp: seccomp::SeccompSettings::new(&settings.flags.root_dir, cfg.seccomp_default),
        }
    }

    /// What stands in for a limit a container does not set, in downward-API values.
    pub fn node_allocatable(&self) -> crate::fieldpath::NodeAllocatable {
        crate::fieldpath::NodeAllocatable {
            cpu_millis: self.machine_cpu_millis,
            memory_bytes: self.machine_memory,
        }
    }
}

pub struct RuntimeManager {
    cri: RuntimeClient,
    cgroups: Arc<CgroupManager>,
    images: ImagePuller,
    events: EventRecorder,
    settings: RuntimeSettings,
    /// Containers the kernel's OOM killer hit, which report `OOMKilled` whatever the runtime
    /// says (see crate::oom).
    oom_kills: Arc<crate::oom::OomKills>,
    /// Device plugins' devices for the containers that ask for them; None in tests that have
    /// no device manager.
    devices: Option<Arc<crate::cm::devicemanager::DeviceManager>>,
    /// The CPU manager's cpuset for each container; None in tests that have none.
    cpus: Option<Arc<crate::cm::cpumanager::CpuManager>>,
    /// The memory manager's cpuset.mems for each container; None in tests that have none.
    memory: Option<Arc<crate::cm::memorymanager::MemoryManager>>,
    /// What each pod's cgroup and running containers were last given, for in-place resize.
    /// Bounded by the pods with workers: pruned to the observed containers on every sync and
    /// dropped when the pod is removed.
    acked: std::sync::Mutex<HashMap<String, AckedPod>>,
}

#[derive(Clone, Debug, Default)]
struct AckedPod {
    pod_cgroup: Option<crate::cm::PodResources>,
    containers: resize::Acknowledged,
}

/// How long a failed sandbox or CRI step, or a failed sync as a whole, waits before the worker
/// tries again.
pub const RETRY_AFTER_ERROR: Duration = Duration::from_secs(5);

/// Upstream never stops a container with less than this, so SIGTERM always comes first.
pub const MIN_GRACE_SECONDS: i64 = 2;

/// How long a container gets to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grace {
    /// The pod's (or its deletion's) period: never below [`MIN_GRACE_SECONDS`], as upstream.
    Pod(i64),
    /// An eviction's or node shutdown's override: used as is, as upstream applies it after the
    /// minimum (a hard eviction stops the pod within 1 s).
    Override(i64),
}

pub fn grace_seconds(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
        .max(MIN_GRACE_SECONDS)
}

impl RuntimeManager {
    pub fn new(
        cri: RuntimeClient,
        cgroups: Arc<CgroupManager>,
        images: ImagePuller,
        events: EventRecorder,
        settings: RuntimeSettings,
    ) -> Self {
        RuntimeManager {
            cri,
            cgroups,
            images,
            events,
            settings,
            oom_kills: Arc::default(),
            devices: None,
            cpus: None,
            memory: None,
            acked: Default::default(),
        }
    }

    pub fn with_devices(mut self, devices: Arc<crate::cm::devicemanager::DeviceManager>) -> Self {
        self.devices = Some(devices);
        self
    }

    pub fn with_cpus(mut self, cpus: Arc<crate::cm::cpumanager::CpuManager>) -> Self {
        self.cpus = Some(cpus);
        self
    }

    pub fn with_memory(mut self, memory: Arc<crate::cm::memorymanager::MemoryManager>) -> Self {
        self.memory = Some(memory);
        self
    }

    pub fn with_oom_kills(mut self, oom_kills: Arc<crate::oom::OomKills>) -> Self {
        self.oom_kills = oom_kills;
        self
    }

    pub fn settings(&self) -> &RuntimeSettings {
        &self.settings
    }

    pub fn events(&self) -> &EventRecorder {
        &self.events
    }

    /// What the next step towards the spec will do, from the spec and what is observed.
    pub fn plan(
        &self,
        pod: &Pod,
        observed: &ObservedPod,
        backoff: &Backoff,
        probes: &HashMap<String, crate::probe::Verdicts>,
    ) -> SyncPlan {
        let now = SystemTime::now();
        let mut actions = compute_pod_actions(pod, observed, backoff, probes, now);
        // A resize applies to the running containers of a sandbox that stays.
        let resize = if actions.create_sandbox || actions.pod_finished || actions.kill_pod {
            None
        } else {
            let plan = self.resize_plan(pod, observed);
            resize::add_restarts(&mut actions, &plan);
            Some(plan)
        };
        debug!(?actions, "Computed pod actions");
        SyncPlan { actions, resize }
    }

    /// One step towards the spec, as `plan` decided it: whatever can be done now is done, and
    /// the outcome says when to look again. `inputs` holds what the plan [needs](SyncPlan::needs).
    pub async fn sync_pod(
        &self,
        pod: &Pod,
        observed: &ObservedPod,
        plan: SyncPlan,
        inputs: PodInputs,
        backoff: &mut Backoff,
        volumes: &PodVolumes,
    ) -> Result<SyncOutcome, RuntimeError> {
        let SyncPlan {
            actions,
            resize: resize_plan,
        } = plan;
        let mut outcome = SyncOutcome::default();
        self.note_backoffs(pod, &actions, &mut outcome);

        if actions.kill_pod {
            self.kill_pod(pod, observed, Grace::Pod(grace_seconds(pod)))
                .await?;
        }
        if actions.pod_finished {
            outcome.finished = true;
            if !actions.kill_pod && observed.running_containers().next().is_some() {
                // Sidecars still running in a completed pod: stopped in order, with the
                // pod's grace period, sandbox after them.
                self.kill_pod(pod, observed, Grace::Pod(grace_seconds(pod)))
                    .await?;
                return Ok(outcome);
            }
            for sb in observed.sandboxes.iter().filter(|s| s.ready) {
                self.cri
                    .stop_pod_sandbox(&sb.id)
                    .await
                    .map_err(cri("StopPodSandbox"))?;
            }
            return Ok(outcome);
        }

        let (sandbox_id, ips) = if actions.create_sandbox {
            match self
                .create_sandbox(pod, actions.sandbox_attempt, &inputs.runtime_handler)
                .await
            {
                Ok(created) => created,
                Err(err) => {
                    self.events.pod(
                        pod,
                        EventType::Warning,
                        "FailedCreatePodSandBox",
                        &format!("Failed to create pod sandbox: {err}"),
                    );
                    outcome.requeue(RETRY_AFTER_ERROR);
                    return Err(err);
                }
            }
        } else {
            let sb = observed.newest_sandbox();
            (
                actions.sandbox_id.clone().unwrap_or_default(),
                sb.map(|s| s.ips.clone()).unwrap_or_default(),
            )
        };

        let pod_ip = ips.first().cloned().unwrap_or_default();
        let kills = actions.kill.iter().map(|k| {
            self.events
                .pod(pod, EventType::Normal, "Killing", &k.message);
            let grace = Grace::Pod(k.grace.unwrap_or_else(|| grace_seconds(pod)));
            self.stop_container(pod, &k.name, &k.container_id, grace, &pod_ip)
        });
        for r in join_all(kills).await {
            r.map_err(cri("StopContainer"))?;
        }
        if let Some(plan) = &resize_plan {
            match self.apply_resize(pod, plan).await {
                // Shown in the status on the next sync, right away.
                Ok(true) => outcome.requeue(Duration::ZERO),
                Ok(false) => {}
                Err(message) => {
                    warn!(pod = %crate::pod::pod_full_name(pod), %message, "Pod resize failed");
                    outcome.resize_error = Some(message);
                    outcome.requeue(RETRY_AFTER_ERROR);
                }
            }
        }

        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let facts = PodFacts {
            host_ip: self.settings.node_ip.clone(),
            // A host-network pod has the node's addresses.
            pod_ips: if host_network && ips.is_empty() {
                vec![self.settings.node_ip.clone()]
            } else {
                ips
            },
            node: self.settings.node_allocatable(),
            service_env: inputs.service_env,
            env_objects: inputs.env_objects,
            pull_secrets: inputs.pull_secrets,
        };
        let sandbox_config = self.sandbox_config(pod, actions.sandbox_attempt)?;
        for start in &actions.start {
            self.start_one(
                pod,
                start,
                &sandbox_id,
                &sandbox_config,
                &facts,
                volumes,
                backoff,
                &mut outcome,
            )
            .await;
        }
        Ok(outcome)
    }

    fn note_backoffs(&self, pod: &Pod, actions: &PodActions, outcome: &mut SyncOutcome) {
        for wait in &actions.backoff {
            let message = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                crate::config::GoDuration(wait.delay),
                wait.name,
                pod.metadata.name.as_deref().unwrap_or_default(),
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.uid.as_deref().unwrap_or_default()
            );
            self.events
                .pod(pod, EventType::Warning, "BackOff", &message);
            outcome.waiting.insert(
                wait.name.clone(),
                Waiting {
                    reason: "CrashLoopBackOff".into(),
                    message,
                },
            );
            outcome.requeue(wait.remaining);
        }
    }
}
