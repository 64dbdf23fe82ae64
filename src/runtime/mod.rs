//! The runtime manager: converges one pod towards its spec over the CRI. `actions` decides,
//! this module carries the decisions out (sandbox, images, containers, teardown).

pub mod actions;
pub mod apparmor;
pub mod backoff;
pub mod container;
pub mod dns;
pub mod env;
pub mod ephemeral;
mod hooks;
pub mod images;
pub mod labels;
mod metrics;
pub mod observed;
pub mod pull_secrets;
pub mod resize;
pub mod sandbox;
pub mod seccomp;
pub mod sidecars;
mod termination_message;
#[cfg(test)]
pub(crate) mod tests;
pub mod userns;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::field::Empty;
use tracing::{Instrument, debug, info_span, warn};

use crate::cm::CgroupManager;
use crate::cri::{CriError, RuntimeClient, api};
use crate::events::{EventRecorder, EventType};
use crate::pod::qos::{QosClass, qos_class};
use crate::pod::{hostname, paths, pod_uid};
use crate::podinputs::runtime_class::RuntimeClassError;
use crate::podinputs::{Needs, PodInputs};
use crate::telemetry::trace::TARGET;
use actions::{ContainerKind, PodActions, StartAction, compute_pod_actions};
use backoff::Backoff;
use env::PodFacts;
use images::{ImageError, ImagePuller};
use observed::{ContainerInfo, ContainerState, ObservedPod, SandboxInfo};

use crate::volume::{PodVolumes, etc_hosts, mounts};

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

/// How long a failed sandbox or CRI step waits before the worker tries again.
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(5);

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
            acked: Default::default(),
        }
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

    /// Everything the runtime knows about one pod, by its UID label.
    pub async fn pod_status(&self, uid: &str) -> Result<ObservedPod, RuntimeError> {
        let selector: HashMap<String, String> =
            HashMap::from([(labels::POD_UID.to_string(), uid.to_string())]);
        let sandboxes = self
            .cri
            .list_pod_sandbox(Some(api::PodSandboxFilter {
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await
            .map_err(cri("ListPodSandbox"))?;
        let containers = self
            .cri
            .list_containers(Some(api::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await
            .map_err(cri("ListContainers"))?;

        let mut observed = ObservedPod {
            uid: uid.to_string(),
            ..Default::default()
        };
        let identity = sandboxes
            .iter()
            .find_map(|s| s.metadata.as_ref())
            .map(|m| (m.name.clone(), m.namespace.clone()))
            .or_else(|| {
                containers.first().map(|c| {
                    let l = &c.labels;
                    let get = |k: &str| l.get(k).cloned().unwrap_or_default();
                    (get(labels::POD_NAME), get(labels::POD_NAMESPACE))
                })
            });
        if let Some((name, namespace)) = identity {
            observed.name = name;
            observed.namespace = namespace;
        }
        for sb in &sandboxes {
            let ready = sb.state == api::PodSandboxState::SandboxReady as i32;
            let mut ips = Vec::new();
            if ready {
                match self.cri.pod_sandbox_status(&sb.id).await {
                    Ok(status) => {
                        if let Some(net) = status.network {
                            ips.extend(Some(net.ip).filter(|ip| !ip.is_empty()));
                            ips.extend(net.additional_ips.into_iter().map(|p| p.ip));
                        }
                    }
                    Err(e) if e.is_not_found() => continue,
                    Err(e) => return Err(cri("PodSandboxStatus")(e)),
                }
            }
            observed.sandboxes.push(SandboxInfo {
                id: sb.id.clone(),
                attempt: sb.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
                ready,
                created_at: sb.created_at,
                ips,
            });
        }
        let statuses = join_all(containers.iter().map(|c| self.cri.container_status(&c.id))).await;
        for (c, status) in containers.iter().zip(statuses) {
            match status {
                Ok(s) => {
                    let mut info = ContainerInfo::from_status(&s, &c.pod_sandbox_id);
                    if info.state == ContainerState::Exited {
                        info.message = termination_message(&s, info.exit_code);
                        if self.oom_kills.contains(&info.id) {
                            info.reason = crate::oom::OOM_KILLED.to_string();
                        }
                    }
                    observed.containers.push(info);
                }
                // Removed between the list and the status call: it simply is not there.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(cri("ContainerStatus")(e)),
            }
        }
        observed.sort();
        Ok(observed)
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

    fn sandbox_config(
        &self,
        pod: &Pod,
        attempt: u32,
    ) -> Result<api::PodSandboxConfig, RuntimeError> {
        let cgroup_parent = self.cgroups.pod_cgroup_parent(pod);
        let mut config = sandbox::sandbox_config(
            pod,
            attempt,
            &sandbox::SandboxParams {
                logs_root: &self.settings.logs_root,
                cgroup_parent: &cgroup_parent,
                dns: &self.settings.dns,
            },
        );
        config.hostname = hostname::kernel_hostname(pod, &self.settings.dns.cluster_domain)?;
        if let Some(sc) = config
            .linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
        {
            sc.seccomp = Some(self.settings.seccomp.for_sandbox(pod)?);
            let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
            sc.supplemental_groups_policy = container::supplemental_groups_policy(psc) as i32;
        }
        Ok(config)
    }

    /// The pod's cgroup and sandbox, traced as `createPodSandbox`.
    async fn create_sandbox(
        &self,
        pod: &Pod,
        attempt: u32,
        handler: &Result<String, RuntimeClassError>,
    ) -> Result<(String, Vec<String>), RuntimeError> {
        let span = info_span!(
            target: TARGET,
            "createPodSandbox",
            attempt,
        );
        let created = self
            .create_sandbox_untraced(pod, attempt, handler)
            .instrument(span.clone())
            .await;
        match &created {
            Ok(_) => {
                crate::startup::tracker().mark(pod_uid(pod), crate::startup::Phase::SandboxCreated)
            }
            Err(err) => crate::telemetry::trace::record_error(&span, err),
        }
        created
    }

    async fn create_sandbox_untraced(
        &self,
        pod: &Pod,
        attempt: u32,
        handler: &Result<String, RuntimeClassError>,
    ) -> Result<(String, Vec<String>), RuntimeError> {
        let handler = handler.clone()?;
        if userns::wanted(pod) {
            let status = self.cri.status(false).await.map_err(cri("Status"))?;
            userns::check(&status.runtime_handlers, &handler)?;
        }
        let cgroups = self.cgroups.clone();
        let owned = pod.clone();
        tokio::task::spawn_blocking(move || cgroups.create_pod_cgroup(&owned))
            .await
            .map_err(|e| RuntimeError::Blocking(e.to_string()))??;
        if let Ok(resources) = self.cgroups.pod_cgroup_resources(pod) {
            self.acked_lock()
                .entry(pod_uid(pod).to_string())
                .or_default()
                .pod_cgroup = resources;
        }
        let config = self.sandbox_config(pod, attempt)?;
        let log_dir = PathBuf::from(&config.log_directory);
        tokio::fs::create_dir_all(&log_dir)
            .await
            .map_err(|source| RuntimeError::Io {
                path: log_dir.clone(),
                source,
            })?;
        if !handler.is_empty() {
            tracing::debug!(%handler, "Running pod with runtime handler");
        }
        metrics::record_pod_started();
        let id = self
            .cri
            .run_pod_sandbox(config, &handler)
            .await
            .map_err(cri("RunPodSandbox"))?;
        let status = self
            .cri
            .pod_sandbox_status(&id)
            .await
            .map_err(cri("PodSandboxStatus"))?;
        let ips = status
            .network
            .map(|n| {
                std::iter::once(n.ip)
                    .filter(|ip| !ip.is_empty())
                    .chain(n.additional_ips.into_iter().map(|p| p.ip))
                    .collect()
            })
            .unwrap_or_default();
        Ok((id, ips))
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_one(
        &self,
        pod: &Pod,
        start: &StartAction,
        sandbox_id: &str,
        sandbox_config: &api::PodSandboxConfig,
        facts: &PodFacts,
        volumes: &PodVolumes,
        backoff: &mut Backoff,
        outcome: &mut SyncOutcome,
    ) {
        let spec = pod.spec.as_ref();
        let debug_container;
        let container: Option<&Container> = match start.kind {
            ContainerKind::Init => spec
                .and_then(|s| s.init_containers.as_ref())
                .and_then(|c| c.get(start.index)),
            ContainerKind::Regular => spec.and_then(|s| s.containers.get(start.index)),
            ContainerKind::Ephemeral => {
                debug_container = ephemeral::container_at(pod, start.index);
                debug_container.as_ref()
            }
        };
        let Some(container) = container else { return };
        let span = info_span!(
            target: TARGET,
            "startContainer",
            k8s.container.name = %container.name,
            k8s.container.restart_count = start.restart_count,
        );
        let traced = span.clone();
        async {
            match self
                .start_container(
                    pod,
                    container,
                    start,
                    sandbox_id,
                    sandbox_config,
                    facts,
                    volumes,
                    backoff,
                )
                .await
            {
                Ok(()) => outcome.started += 1,
                Err((reason, message, retry)) => {
                    crate::telemetry::trace::record_error(&traced, &message);
                    self.events.pod(pod, EventType::Warning, "Failed", &message);
                    outcome.waiting.insert(
                        container.name.clone(),
                        Waiting {
                            reason: reason.to_string(),
                            message,
                        },
                    );
                    outcome.requeue(retry);
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Pull, create and start one container. An error carries the waiting reason, message and
    /// when to retry.
    #[allow(clippy::too_many_arguments)]
    async fn start_container(
        &self,
        pod: &Pod,
        container: &Container,
        start: &StartAction,
        sandbox_id: &str,
        sandbox_config: &api::PodSandboxConfig,
        facts: &PodFacts,
        volumes: &PodVolumes,
        backoff: &mut Backoff,
    ) -> Result<(), (&'static str, String, Duration)> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let now = SystemTime::now();
        let pull_key = Backoff::key(uid, &format!("pull:{}", container.name), 0);
        if let Some(remaining) = backoff.remaining_since_last(&pull_key, now) {
            let image = container.image.clone().unwrap_or_default();
            return Err((
                "ImagePullBackOff",
                format!("Back-off pulling image \"{image}\""),
                remaining,
            ));
        }
        let image = container.image.as_deref().unwrap_or_default();
        let init = start.kind == ContainerKind::Init;
        let tracker = crate::startup::tracker();
        let announce = || {
            tracker.pull_started(uid, &container.name, image);
            self.events.pod(
                pod,
                EventType::Normal,
                "Pulling",
                &format!("Pulling image \"{image}\""),
            )
        };
        let keyring = async || pull_secrets::Keyring::from_secrets(&facts.pull_secrets);
        let span = info_span!(
            target: TARGET,
            "pullImage",
            container.image.name = image,
            pulled = Empty,
        );
        let ensured = self
            .images
            .ensure(container, keyring, announce)
            .instrument(span.clone())
            .await;
        let pulled = match ensured {
            Ok(p) => {
                span.record("pulled", p.pulled);
                tracker.image_ready(uid, &container.name, image);
                backoff.forget(&pull_key);
                p
            }
            Err(err) => {
                crate::telemetry::trace::record_error(&span, &err);
                let delay = match err {
                    ImageError::NeverPull(_) | ImageError::InvalidName(_) => backoff::MAX,
                    // Nothing was pulled, so there is nothing to back off from.
                    ImageError::Inspect { .. } => RETRY_AFTER_ERROR,
                    ImageError::Pull { .. } => backoff.record_restart(&pull_key, now),
                };
                return Err((err.reason(), err.to_string(), delay));
            }
        };
        if pulled.pulled {
            self.events.pod(
                pod,
                EventType::Normal,
                "Pulled",
                &format!("Successfully pulled image \"{image}\" in {:?}", pulled.took),
            );
        } else {
            self.events.pod(
                pod,
                EventType::Normal,
                "Pulled",
                &format!("Container image \"{image}\" already present on machine"),
            );
        }

        container::verify_run_as_non_root(pod, container, pulled.uid, &pulled.username)
            .map_err(|e| ("CreateContainerConfigError", e, RETRY_AFTER_ERROR))?;
        let qos: QosClass = pod
            .spec
            .as_ref()
            .map(qos_class)
            .unwrap_or(QosClass::BestEffort);
        for skipped in env::skipped_env_from_keys(container, facts) {
            self.events.pod(
                pod,
                EventType::Warning,
                "InvalidEnvironmentVariableNames",
                &skipped.message,
            );
        }
        let config = container::container_config(
            pod,
            container,
            &container::ContainerParams {
                image_ref: &pulled.image_ref,
                restart_count: start.restart_count,
                qos,
                machine_memory: self.settings.machine_memory,
                cgroup_options: &self.settings.cgroup_options,
                facts,
                seccomp: &self.settings.seccomp,
            },
        )
        .map_err(|e| {
            (
                "CreateContainerConfigError",
                e.to_string(),
                RETRY_AFTER_ERROR,
            )
        })?;
        let mut config = config;
        if start.kind == ContainerKind::Ephemeral
            && let Some(target) = ephemeral::target_name(pod, start.index)
        {
            let target_id = ephemeral::resolve_target(&self.cri, pod, sandbox_id, target)
                .await
                .map_err(|e| ("CreateContainerConfigError", e, RETRY_AFTER_ERROR))?;
            let options = config
                .linux
                .as_mut()
                .and_then(|l| l.security_context.as_mut())
                .and_then(|s| s.namespace_options.as_mut());
            if let Some(options) = options {
                ephemeral::target_namespace(options, &target_id);
            }
        }
        config.mounts = self
            .prepare_mounts(
                pod,
                container,
                start.restart_count,
                &config.envs,
                facts,
                volumes,
            )
            .await
            .map_err(|e| ("CreateContainerConfigError", e, RETRY_AFTER_ERROR))?;

        let log_dir = PathBuf::from(&sandbox_config.log_directory).join(&container.name);
        tokio::fs::create_dir_all(&log_dir).await.map_err(|e| {
            (
                "CreateContainerError",
                format!("{}: {e}", log_dir.display()),
                RETRY_AFTER_ERROR,
            )
        })?;
        if let Some(key) = &start.backoff_key {
            backoff.record_restart(key, now);
        }
        metrics::record_container_started(pod, &container.name);
        let limits = config
            .linux
            .as_ref()
            .and_then(|l| l.resources.as_ref())
            .map(resize::Limits::from);
        let id = self
            .cri
            .create_container(sandbox_id, config, sandbox_config.clone())
            .await
            .map_err(|e| {
                // Upstream shows the runtime's own message (a missing seccomp profile, say).
                let message = e.message().map_or_else(|| e.to_string(), str::to_string);
                ("CreateContainerError", message, RETRY_AFTER_ERROR)
            })?;
        if let Some(limits) = limits {
            self.acked_lock()
                .entry(uid.to_string())
                .or_default()
                .containers
                .insert(id.clone(), limits);
        }
        tracker.container_created(uid, &container.name, init);
        self.events.pod(
            pod,
            EventType::Normal,
            "Created",
            &format!("Created container {}", container.name),
        );
        self.cri
            .start_container(&id)
            .await
            .map_err(|e| ("RunContainerError", e.to_string(), RETRY_AFTER_ERROR))?;
        tracker.container_started(uid, &container.name, init);
        self.events.pod(
            pod,
            EventType::Normal,
            "Started",
            &format!("Started container {}", container.name),
        );
        let post_start = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref());
        if let Some(handler) = post_start {
            let pod_ip = facts
                .pod_ips
                .first()
                .map(String::as_str)
                .unwrap_or_default();
            let ran = hooks::run(
                &self.cri,
                pod,
                container,
                &id,
                handler,
                pod_ip,
                hooks::UNBOUNDED_HOOK_LIMIT,
            )
            .await;
            if let Err(message) = ran {
                // Like upstream: the container is killed and counts as failed to start.
                self.events
                    .pod(pod, EventType::Warning, "FailedPostStartHook", &message);
                let grace = Grace::Pod(grace_seconds(pod));
                if let Err(e) = self
                    .stop_container(pod, &container.name, &id, grace, pod_ip)
                    .await
                {
                    warn!(container = %container.name, err = %e, "Failed to kill the container after its postStart hook failed");
                }
                return Err(("PostStartHookError", message, RETRY_AFTER_ERROR));
            }
        }
        Ok(())
    }

    /// Stops one container, running its preStop hook first within the grace period; the
    /// runtime gets what is left of the period (at least the minimum).
    async fn stop_container(
        &self,
        pod: &Pod,
        name: &str,
        id: &str,
        grace: Grace,
        pod_ip: &str,
    ) -> Result<(), CriError> {
        self.stop_container_after(pod, name, id, grace, pod_ip, std::future::ready(()))
            .await
    }

    /// [`Self::stop_container`], with the stop signal held back until `turn` resolves (the
    /// containers this one must outlive have stopped) or the grace period runs out; the
    /// preStop hook does not wait, and the wait counts against the same period.
    async fn stop_container_after(
        &self,
        pod: &Pod,
        name: &str,
        id: &str,
        grace: Grace,
        pod_ip: &str,
        turn: impl std::future::Future<Output = ()>,
    ) -> Result<(), CriError> {
        let began = std::time::Instant::now();
        let (Grace::Pod(g) | Grace::Override(g)) = grace;
        let minimum = match grace {
            Grace::Pod(_) => MIN_GRACE_SECONDS,
            Grace::Override(_) => 0,
        };
        let grace = g.max(0);
        let spec = pod.spec.as_ref().and_then(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .find(|c| c.name == name)
        });
        let pre_stop = spec.and_then(|c| Some((c, c.lifecycle.as_ref()?.pre_stop.as_ref()?)));
        let mut remaining = grace;
        if let Some((container, handler)) = pre_stop
            && grace > 0
        {
            let budget = Duration::from_secs(grace as u64);
            let started = std::time::Instant::now();
            let ran = hooks::run(&self.cri, pod, container, id, handler, pod_ip, budget).await;
            if let Err(message) = ran {
                self.events
                    .pod(pod, EventType::Warning, "FailedPreStopHook", &message);
            }
            remaining = grace - started.elapsed().as_secs() as i64;
        }
        if remaining > 0 {
            let left = Duration::from_secs(remaining as u64);
            if tokio::time::timeout(left, turn).await.is_err() {
                debug!(
                    container = name,
                    "Grace period over before its turn to stop"
                );
            }
            remaining = grace - began.elapsed().as_secs() as i64;
        }
        self.cri.stop_container(id, remaining.max(minimum)).await
    }

    /// The container's mounts over the volumes the volume manager prepared, plus its
    /// termination-message file and the managed /etc/hosts.
    async fn prepare_mounts(
        &self,
        pod: &Pod,
        container: &Container,
        restart_count: u32,
        envs: &[api::KeyValue],
        facts: &PodFacts,
        volumes: &PodVolumes,
    ) -> Result<Vec<api::Mount>, String> {
        let (pod, container, volumes) = (pod.clone(), container.clone(), volumes.clone());
        let env: HashMap<String, String> = envs
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect();
        let pod_dir = paths::pod_dir(
            &self.settings.root_dir,
            pod.metadata.uid.as_deref().unwrap_or_default(),
        );
        let pod_ips = facts.pod_ips.clone();
        let domain = self.settings.dns.cluster_domain.clone();
        tokio::task::spawn_blocking(move || {
            let mut mounts =
                mounts::container_mounts(&pod_dir, &container, &volumes, restart_count, &env)?;
            mounts.extend(etc_hosts::etc_hosts_mount(
                &pod, &container, &pod_dir, &pod_ips, &domain,
            )?);
            Ok::<_, crate::volume::MountError>(mounts)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
    }

    /// Stops every container (in parallel, each with the grace period, sidecars after the app
    /// containers and in reverse order, see [`sidecars::stop_order`]) and then the sandboxes.
    pub async fn kill_pod(
        &self,
        pod: &Pod,
        observed: &ObservedPod,
        grace: Grace,
    ) -> Result<(), RuntimeError> {
        let pod_ip = observed
            .newest_sandbox()
            .and_then(|s| s.ips.first().cloned())
            .unwrap_or_default();
        let running: Vec<&ContainerInfo> = observed.running_containers().collect();
        let names: Vec<&str> = running.iter().map(|c| c.name.as_str()).collect();
        let order = sidecars::stop_order(pod, &names);
        let stopped: HashMap<&str, tokio::sync::watch::Sender<bool>> = names
            .iter()
            .map(|n| (*n, tokio::sync::watch::Sender::new(false)))
            .collect();
        let stops = running.iter().map(|c| {
            self.events.pod(
                pod,
                EventType::Normal,
                "Killing",
                &format!("Stopping container {}", c.name),
            );
            let waits_for = order.get(&c.name).cloned().unwrap_or_default();
            let (stopped, pod_ip) = (&stopped, &pod_ip);
            let turn = async move {
                for name in &waits_for {
                    if let Some(tx) = stopped.get(name.as_str()) {
                        let _ = tx.subscribe().wait_for(|done| *done).await;
                    }
                }
            };
            async move {
                let r = self
                    .stop_container_after(pod, &c.name, &c.id, grace, pod_ip, turn)
                    .await;
                if let Some(tx) = stopped.get(c.name.as_str()) {
                    tx.send_replace(true);
                }
                r
            }
        });
        for r in join_all(stops).await {
            match r {
                Err(e) if !e.is_not_found() => return Err(cri("StopContainer")(e)),
                _ => {}
            }
        }
        for sb in &observed.sandboxes {
            match self.cri.stop_pod_sandbox(&sb.id).await {
                Err(e) if !e.is_not_found() => return Err(cri("StopPodSandbox")(e)),
                _ => {}
            }
        }
        Ok(())
    }

    fn acked_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, AckedPod>> {
        self.acked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the pod's running containers were last given, by container ID: their actual
    /// settings as far as the kubelet knows (containerd 1.6 does not report them back).
    pub fn acknowledged(&self, uid: &str) -> resize::Acknowledged {
        self.acked_lock()
            .get(uid)
            .map(|a| a.containers.clone())
            .unwrap_or_default()
    }

    /// Whether the pod's allocated resources still have to be applied to what runs.
    pub fn resize_in_progress(&self, pod: &Pod, observed: &ObservedPod) -> bool {
        !self.resize_plan(pod, observed).is_empty()
    }

    fn resize_plan(&self, pod: &Pod, observed: &ObservedPod) -> resize::ResizePlan {
        let acked = {
            let mut all = self.acked_lock();
            match all.get_mut(pod_uid(pod)) {
                Some(entry) => {
                    entry
                        .containers
                        .retain(|id, _| observed.containers.iter().any(|c| &c.id == id));
                    entry.containers.clone()
                }
                None => resize::Acknowledged::new(),
            }
        };
        let qos = pod
            .spec
            .as_ref()
            .map(qos_class)
            .unwrap_or(QosClass::BestEffort);
        resize::plan(
            pod,
            observed,
            &acked,
            &resize::PlanInputs {
                qos,
                machine_memory: self.settings.machine_memory,
                cgroup_options: &self.settings.cgroup_options,
            },
        )
    }

    async fn write_pod_cgroup(
        &self,
        pod: &Pod,
        resources: crate::cm::PodResources,
    ) -> Result<(), String> {
        let cgroups = self.cgroups.clone();
        let owned = pod.clone();
        tokio::task::spawn_blocking(move || cgroups.update_pod_cgroup(&owned, &resources))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("pod cgroup: {e}"))
    }

    async fn update_container(&self, uid: &str, u: &resize::ContainerUpdate) -> Result<(), String> {
        self.cri
            .update_container_resources(&u.container_id, u.target.clone())
            .await
            .map_err(|e| format!("container {}: {e}", u.name))?;
        self.acked_lock()
            .entry(uid.to_string())
            .or_default()
            .containers
            .insert(u.container_id.clone(), resize::Limits::from(&u.target));
        Ok(())
    }

    /// Applies a resize in upstream's order: the pod cgroup's rises, the containers' cuts, the
    /// pod cgroup's cuts, the containers' rises. After a failed cut nothing is raised, so the
    /// containers never add up to more than their pod. True when anything was written.
    async fn apply_resize(&self, pod: &Pod, plan: &resize::ResizePlan) -> Result<bool, String> {
        let uid = pod_uid(pod);
        let new_pod = self
            .cgroups
            .pod_cgroup_resources(pod)
            .map_err(|e| format!("pod cgroup: {e}"))?;
        let old_pod = self
            .acked_lock()
            .get(uid)
            .and_then(|a| a.pod_cgroup.clone());
        let pod_changes = new_pod
            .as_ref()
            .is_some_and(|n| old_pod.as_ref() != Some(n));
        if plan.updates.is_empty() && !pod_changes {
            return Ok(false);
        }
        let (before, after) = match &new_pod {
            Some(new) => {
                let (before, after) = resize::pod_cgroup_steps(old_pod.as_ref(), new);
                (before, Some(after))
            }
            None => (None, None),
        };
        if let Some(before) = before {
            self.write_pod_cgroup(pod, before).await?;
        }
        let (cuts, rises): (Vec<_>, Vec<_>) = plan.updates.iter().partition(|u| u.lowers);
        let mut failed = None;
        for u in cuts {
            if let Err(e) = self.update_container(uid, u).await {
                failed.get_or_insert(e);
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if let Some(after) = after {
            self.write_pod_cgroup(pod, after).await?;
            self.acked_lock()
                .entry(uid.to_string())
                .or_default()
                .pod_cgroup = new_pod;
        }
        for u in rises {
            if let Err(e) = self.update_container(uid, u).await {
                failed.get_or_insert(e);
            }
        }
        failed.map_or(Ok(true), Err)
    }

    /// Removes the cgroup of a pod that is gone. Its stopped containers, sandboxes and logs
    /// stay for the container garbage collector, which takes the logs only after the
    /// containers (its folder and volumes are the volume manager's).
    pub async fn remove_pod(&self, uid: &str) -> Result<(), RuntimeError> {
        self.acked_lock().remove(uid);
        let cgroups = self.cgroups.clone();
        let uid = uid.to_string();
        tokio::task::spawn_blocking(move || cgroups.remove_pod_cgroup(&uid))
            .await
            .map_err(|e| RuntimeError::Blocking(e.to_string()))??;
        Ok(())
    }
}

/// The message an exited container leaves: its termination-message file, or with
/// FallbackToLogsOnError and a failure, the end of its log.
fn termination_message(status: &api::ContainerStatus, exit_code: i32) -> String {
    let ann = &status.annotations;
    let target = ann
        .get(labels::TERMINATION_MESSAGE_PATH)
        .map(String::as_str)
        .unwrap_or("/dev/termination-log");
    if let Some(msg) = termination_message::read_termination_message(status, target) {
        return msg;
    }
    let fallback = ann
        .get(labels::TERMINATION_MESSAGE_POLICY)
        .map(String::as_str)
        == Some("FallbackToLogsOnError");
    if fallback && exit_code != 0 {
        return termination_message::message_from_log(&status.log_path).unwrap_or_default();
    }
    status.message.clone()
}
