//! The pod sandbox's side of a sync: its config and its creation with the pod cgroup, kept
//! apart because a failure here blocks every container of the pod.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use tracing::{Instrument, info_span};

use super::{RuntimeError, RuntimeManager, container, cri, metrics, sandbox, userns};
use crate::cri::api;
use crate::pod::{hostname, pod_uid};
use crate::podinputs::runtime_class::RuntimeClassError;
use crate::telemetry::trace::TARGET;

impl RuntimeManager {
    pub(super) fn sandbox_config(
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
    pub(super) async fn create_sandbox(
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
}
