//! In-place resize as carried out: what each pod's cgroup and containers were last given, and
//! the writes that move them to what is allocated in an order that never oversubscribes.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use super::observed::ObservedPod;
use super::{AckedPod, RuntimeManager, resize};
use crate::pod::pod_uid;
use crate::pod::qos::{QosClass, qos_class};

impl RuntimeManager {
    pub(super) fn acked_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, AckedPod>> {
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

    pub(super) fn resize_plan(&self, pod: &Pod, observed: &ObservedPod) -> resize::ResizePlan {
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
    pub(super) async fn apply_resize(
        &self,
        pod: &Pod,
        plan: &resize::ResizePlan,
    ) -> Result<bool, String> {
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
}
