//! Stopping: containers within their grace period and preStop hooks, whole pods in sidecar
//! order, and the cgroup left once a pod is gone.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use tracing::debug;

use super::observed::{ContainerInfo, ObservedPod};
use super::{Grace, MIN_GRACE_SECONDS, RuntimeError, RuntimeManager, cri, hooks, sidecars};
use crate::cri::CriError;
use crate::events::EventType;

impl RuntimeManager {
    /// Stops one container, running its preStop hook first within the grace period; the
    /// runtime gets what is left of the period (at least the minimum).
    pub(super) async fn stop_container(
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
            if let Err(err) = ran {
                let message = err.to_string();
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
