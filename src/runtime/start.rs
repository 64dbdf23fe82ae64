//! Starting one container: image, config, mounts, create, start and its postStart hook, each
//! failure turned into the waiting reason the pod status shows.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::field::Empty;
use tracing::{Instrument, info_span, warn};

use super::actions::{ContainerKind, StartAction};
use super::backoff::{self, Backoff};
use super::env::{self, PodFacts};
use super::images::{ImageError, PulledImage};
use super::{
    Grace, RETRY_AFTER_ERROR, RuntimeManager, SyncOutcome, Waiting, container, ephemeral,
    grace_seconds, hooks, metrics, pull_secrets, resize,
};
use crate::cri::api;
use crate::events::EventType;
use crate::pod::paths;
use crate::pod::qos::{QosClass, qos_class};
use crate::telemetry::trace::TARGET;
use crate::volume::{PodVolumes, etc_hosts, mounts};

/// Why a container did not start: the waiting reason, its message and when to retry.
type Failure = (&'static str, String, Duration);

impl RuntimeManager {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start_one(
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
    ) -> Result<(), Failure> {
        // One moment for the whole start: the pull's back-off and the restart's count from it.
        let now = SystemTime::now();
        let pulled = self.pull_image(pod, container, facts, backoff, now).await?;
        let config = self
            .build_config(pod, container, start, sandbox_id, facts, volumes, &pulled)
            .await?;
        let id = self
            .create(
                pod,
                container,
                start,
                sandbox_id,
                sandbox_config,
                config,
                backoff,
                now,
            )
            .await?;
        self.start_created(pod, container, start, &id).await?;
        self.run_post_start(pod, container, facts, &id).await
    }

    /// The container's image, present or pulled, under the pull's own back-off.
    async fn pull_image(
        &self,
        pod: &Pod,
        container: &Container,
        facts: &PodFacts,
        backoff: &mut Backoff,
        now: SystemTime,
    ) -> Result<PulledImage, Failure> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
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
        Ok(pulled)
    }

    /// What CreateContainer gets: the container's config with its mounts, once the image's
    /// user passes runAsNonRoot.
    #[allow(clippy::too_many_arguments)]
    async fn build_config(
        &self,
        pod: &Pod,
        container: &Container,
        start: &StartAction,
        sandbox_id: &str,
        facts: &PodFacts,
        volumes: &PodVolumes,
        pulled: &PulledImage,
    ) -> Result<api::ContainerConfig, Failure> {
        container::verify_run_as_non_root(pod, container, pulled.uid, &pulled.username).map_err(
            |e| {
                (
                    "CreateContainerConfigError",
                    e.to_string(),
                    RETRY_AFTER_ERROR,
                )
            },
        )?;
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
                .map_err(|e| {
                    (
                        "CreateContainerConfigError",
                        e.to_string(),
                        RETRY_AFTER_ERROR,
                    )
                })?;
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
        config.devices = mounts::container_devices(container, volumes).map_err(|e| {
            (
                "CreateContainerConfigError",
                e.to_string(),
                RETRY_AFTER_ERROR,
            )
        })?;
        if let Some(devices) = &self.devices {
            let options = devices.run_options(pod, container).await.map_err(|e| {
                (
                    "CreateContainerConfigError",
                    e.to_string(),
                    RETRY_AFTER_ERROR,
                )
            })?;
            add_device_options(&mut config, options);
        }
        // The CPU manager's cpuset: exclusive CPUs, or the shared pool (static policy only).
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if let Some(cpus) = self
            .cpus
            .as_ref()
            .and_then(|m| m.cpuset_for(uid, &container.name))
            && let Some(resources) = config.linux.as_mut().and_then(|l| l.resources.as_mut())
        {
            resources.cpuset_cpus = cpus.to_string();
        }
        // The memory manager's NUMA nodes (Static policy, Guaranteed pods only).
        if let Some(mems) = self
            .memory
            .as_ref()
            .and_then(|m| m.cpuset_mems(uid, &container.name))
            && let Some(resources) = config.linux.as_mut().and_then(|l| l.resources.as_mut())
        {
            resources.cpuset_mems = mems;
        }
        Ok(config)
    }

    /// Creates the container in the sandbox; the restart counts against its back-off from here.
    #[allow(clippy::too_many_arguments)]
    async fn create(
        &self,
        pod: &Pod,
        container: &Container,
        start: &StartAction,
        sandbox_id: &str,
        sandbox_config: &api::PodSandboxConfig,
        config: api::ContainerConfig,
        backoff: &mut Backoff,
        now: SystemTime,
    ) -> Result<String, Failure> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let init = start.kind == ContainerKind::Init;
        let tracker = crate::startup::tracker();
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
        let resources = config.linux.as_ref().and_then(|l| l.resources.as_ref());
        let limits = resources.map(resize::Limits::from);
        let cpuset = resources.map(|r| r.cpuset_cpus.clone());
        let id = self
            .cri
            .create_container(sandbox_id, config, sandbox_config.clone())
            .await
            .map_err(|e| {
                // Upstream shows the runtime's own message (a missing seccomp profile, say).
                let message = e.message().map_or_else(|| e.to_string(), str::to_string);
                ("CreateContainerError", message, RETRY_AFTER_ERROR)
            })?;
        if let (Some(cpus), Some(text)) = (&self.cpus, cpuset.filter(|s| !s.is_empty())) {
            cpus.started(
                &id,
                &crate::cm::cpumanager::CpuSet::parse(&text).unwrap_or_default(),
            );
        }
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
        Ok(id)
    }

    /// Starts the created container, which from here counts as started for the pod's startup.
    async fn start_created(
        &self,
        pod: &Pod,
        container: &Container,
        start: &StartAction,
        id: &str,
    ) -> Result<(), Failure> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let init = start.kind == ContainerKind::Init;
        let tracker = crate::startup::tracker();
        self.cri
            .start_container(id)
            .await
            .map_err(|e| ("RunContainerError", e.to_string(), RETRY_AFTER_ERROR))?;
        tracker.container_started(uid, &container.name, init);
        self.events.pod(
            pod,
            EventType::Normal,
            "Started",
            &format!("Started container {}", container.name),
        );
        Ok(())
    }

    /// Runs the postStart hook, if any; a failed hook kills the container.
    async fn run_post_start(
        &self,
        pod: &Pod,
        container: &Container,
        facts: &PodFacts,
        id: &str,
    ) -> Result<(), Failure> {
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
                id,
                handler,
                pod_ip,
                hooks::UNBOUNDED_HOOK_LIMIT,
            )
            .await;
            if let Err(err) = ran {
                // Like upstream: the container is killed and counts as failed to start.
                let message = err.to_string();
                self.events
                    .pod(pod, EventType::Warning, "FailedPostStartHook", &message);
                let grace = Grace::Pod(grace_seconds(pod));
                if let Err(e) = self
                    .stop_container(pod, &container.name, id, grace, pod_ip)
                    .await
                {
                    warn!(container = %container.name, err = %e, "Failed to kill the container after its postStart hook failed");
                }
                return Err(("PostStartHookError", message, RETRY_AFTER_ERROR));
            }
        }
        Ok(())
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
}

/// A container's device plugin answers in its CRI config: the plugins' env comes before the
/// container's own (which wins where both set a name, as upstream orders them), the kubelet's
/// own annotations win over a plugin's, and mounts and devices come after the volumes'.
fn add_device_options(
    config: &mut api::ContainerConfig,
    options: crate::cm::devicemanager::RunOptions,
) {
    let mut envs: Vec<api::KeyValue> = options
        .envs
        .into_iter()
        .map(|(key, value)| api::KeyValue { key, value })
        .collect();
    envs.append(&mut config.envs);
    config.envs = envs;
    for (k, v) in options.annotations {
        config.annotations.entry(k).or_insert(v);
    }
    config
        .mounts
        .extend(options.mounts.into_iter().map(|m| api::Mount {
            container_path: m.container_path,
            host_path: m.host_path,
            readonly: m.read_only,
            ..Default::default()
        }));
    config
        .devices
        .extend(options.devices.into_iter().map(|d| api::Device {
            container_path: d.container_path,
            host_path: d.host_path,
            permissions: d.permissions,
        }));
    config.cdi_devices.extend(
        options
            .cdi_devices
            .into_iter()
            .map(|name| api::CdiDevice { name }),
    );
}
