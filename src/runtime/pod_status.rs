//! Observation: what the runtime reports about a pod, read back each sync so the plan starts
//! from what is, not from what the kubelet last asked for.

use std::collections::HashMap;

use futures::future::join_all;

use super::observed::{ContainerInfo, ContainerState, ObservedPod, SandboxInfo};
use super::{RuntimeError, RuntimeManager, cri, labels, termination_message};
use crate::cri::api;

impl RuntimeManager {
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
