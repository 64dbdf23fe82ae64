//! What a node status is computed from: the machine's facts and what the container runtime
//! last said about itself, asked for before any object is touched. Registration and the status
//! loop both start from here.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerImage, NodeRuntimeHandler};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::build::{self, StatusInputs};
use super::{NodeContext, NodeError, cri_call};
use crate::config::duration::format_go_duration;
use crate::cri::api;
use crate::host::{FactSources, MachineFacts, read_machine_facts};

/// A runtime that has not reported ready for this long is "down".
const RUNTIME_SYNC_THRESHOLD: Duration = Duration::from_secs(30);
/// A PLEG that has not relisted for this long is unhealthy.
const PLEG_RELIST_THRESHOLD: Duration = Duration::from_secs(180);
/// Bound on reading machine facts (procfs, sysfs and one statvfs).
const FACTS_TIMEOUT: Duration = Duration::from_secs(10);

/// What the runtime last said about itself, kept between ticks like upstream's runtimeState.
#[derive(Clone, Debug, Default)]
pub struct RuntimeTracker {
    last_ready: Option<Instant>,
    runtime_error: Option<String>,
    network_error: Option<String>,
    handlers: Option<Vec<NodeRuntimeHandler>>,
    runtime_name: Option<String>,
    images: Vec<ContainerImage>,
}

/// How upstream prints a runtime condition, or its absence.
fn describe_condition(c: Option<&api::RuntimeCondition>) -> String {
    match c {
        None => "<nil>".to_string(),
        Some(c) => format!(
            "{}={} reason:{} message:{}",
            c.r#type, c.status, c.reason, c.message
        ),
    }
}

impl RuntimeTracker {
    /// Records a CRI Status answer. The runtime counts as synced only when RuntimeReady.
    pub fn observe_status(&mut self, resp: &api::StatusResponse, now: Instant) {
        let conds = resp
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let find = |t: &str| conds.iter().find(|c| c.r#type == t);
        let network = find("NetworkReady");
        self.network_error = match network {
            Some(c) if c.status => None,
            other => Some(format!(
                "container runtime network not ready: {}",
                describe_condition(other)
            )),
        };
        match find("RuntimeReady") {
            Some(c) if c.status => {
                self.runtime_error = None;
                self.handlers = Some(build::node_runtime_handlers(&resp.runtime_handlers));
                self.last_ready = Some(now);
            }
            other => {
                self.runtime_error = Some(format!(
                    "container runtime not ready: {}",
                    describe_condition(other)
                ));
            }
        }
    }

    pub fn observe_version(&mut self, v: &api::VersionResponse) {
        self.runtime_name = Some(v.runtime_name.clone());
    }

    /// Why the node is not ready, in upstream's order: runtime sync, PLEG health, runtime
    /// condition, network condition.
    pub fn ready_errors(&self, now: Instant, since_relist: Option<Duration>) -> Vec<String> {
        let mut errs = Vec::new();
        match self.last_ready {
            None => errs.push("container runtime status check may not have completed yet".into()),
            Some(t) if now.saturating_duration_since(t) >= RUNTIME_SYNC_THRESHOLD => {
                errs.push("container runtime is down".into())
            }
            Some(_) => {}
        }
        match since_relist {
            None => errs.push("PLEG is not healthy: pleg has yet to be successful".into()),
            Some(d) if d > PLEG_RELIST_THRESHOLD => errs.push(format!(
                "PLEG is not healthy: pleg was last seen active {} ago; threshold is {}",
                format_go_duration(d),
                format_go_duration(PLEG_RELIST_THRESHOLD)
            )),
            Some(_) => {}
        }
        errs.extend(self.runtime_error.iter().cloned());
        errs.extend(self.network_error.iter().cloned());
        errs
    }

    fn runtime_version(&self, version: Option<&api::VersionResponse>) -> String {
        let name = self.runtime_name.as_deref().unwrap_or("");
        match version {
            Some(v) => format!("{name}://{}", v.runtime_version),
            None => format!("{name}://Unknown"),
        }
    }
}

async fn machine_facts(ctx: &NodeContext) -> MachineFacts {
    let root = ctx.settings.root_dir.clone();
    let read =
        tokio::task::spawn_blocking(move || read_machine_facts(&FactSources::default(), &root));
    match tokio::time::timeout(FACTS_TIMEOUT, read).await {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => {
            warn!(err = %e, "Reading machine facts failed");
            MachineFacts::default()
        }
        Err(_) => {
            warn!(timeout = ?FACTS_TIMEOUT, "Reading machine facts timed out");
            MachineFacts::default()
        }
    }
}

/// Asks the machine and the runtime for everything a status needs. Runtime failures are
/// folded into the tracker (and so into readiness) rather than returned.
pub async fn gather(
    ctx: &NodeContext,
    tracker: &mut RuntimeTracker,
    cancel: &CancellationToken,
) -> Result<StatusInputs, NodeError> {
    let machine = machine_facts(ctx).await;
    let version = match cri_call(cancel, "CRI Version", ctx.cri.version()).await {
        Ok(v) => {
            tracker.observe_version(&v);
            Some(v)
        }
        Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
        Err(e) => {
            warn!(err = %e, "Getting the container runtime version failed");
            None
        }
    };
    match cri_call(cancel, "CRI Status", ctx.cri.status(false)).await {
        Ok(s) => tracker.observe_status(&s, Instant::now()),
        Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
        Err(e) => warn!(err = %e, "Container runtime sanity check failed"),
    }
    match cri_call(cancel, "CRI ListImages", ctx.cri.list_images()).await {
        Ok(images) => tracker.images = build::node_images(&images, ctx.settings.max_images),
        Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
        // The last good list stays, as upstream's image cache does.
        Err(e) => warn!(err = %e, "Listing images for the node status failed"),
    }
    let since_relist = ctx.pleg.since_last_relist();
    let mut ready_errors = tracker.ready_errors(Instant::now(), since_relist);
    if *ctx.shutting_down.borrow() {
        ready_errors.push(crate::nodeshutdown::NOT_READY.to_string());
    }
    let root = ctx.settings.root_dir.clone();
    let volumes_in_use = tokio::time::timeout(
        FACTS_TIMEOUT,
        tokio::task::spawn_blocking(move || crate::volume::csi::mount::in_use(&root)),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_default();
    Ok(StatusInputs {
        machine,
        container_runtime_version: tracker.runtime_version(version.as_ref()),
        images: tracker.images.clone(),
        runtime_handlers: tracker.handlers.clone(),
        ready_errors,
        pressure: *ctx.pressure.borrow(),
        volumes_in_use,
        devices: ctx
            .devices
            .as_ref()
            .map(|d| d.capacity())
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(t: &str, status: bool, reason: &str, message: &str) -> api::RuntimeCondition {
        api::RuntimeCondition {
            r#type: t.to_string(),
            status,
            reason: reason.to_string(),
            message: message.to_string(),
        }
    }

    fn status(conds: Vec<api::RuntimeCondition>) -> api::StatusResponse {
        api::StatusResponse {
            status: Some(api::RuntimeStatus { conditions: conds }),
            runtime_handlers: vec![api::RuntimeHandler {
                name: "runc".into(),
                features: None,
            }],
            ..Default::default()
        }
    }

    const HEALTHY_PLEG: Option<Duration> = Some(Duration::from_secs(1));

    #[test]
    fn nothing_known_yet_is_not_ready() {
        let t = RuntimeTracker::default();
        assert_eq!(
            t.ready_errors(Instant::now(), None),
            vec![
                "container runtime status check may not have completed yet".to_string(),
                "PLEG is not healthy: pleg has yet to be successful".to_string(),
            ]
        );
    }

    #[test]
    fn ready_runtime_and_network_give_no_errors() {
        let mut t = RuntimeTracker::default();
        let now = Instant::now();
        t.observe_status(
            &status(vec![
                cond("RuntimeReady", true, "", ""),
                cond("NetworkReady", true, "", ""),
            ]),
            now,
        );
        assert!(t.ready_errors(now, HEALTHY_PLEG).is_empty());
        assert_eq!(t.handlers.as_ref().map(Vec::len), Some(1));
        // Thirty seconds without a ready answer is a runtime that is down.
        let later = now + RUNTIME_SYNC_THRESHOLD;
        assert_eq!(
            t.ready_errors(later, HEALTHY_PLEG),
            vec!["container runtime is down".to_string()]
        );
    }

    #[test]
    fn network_not_ready_message_matches_upstream() {
        let mut t = RuntimeTracker::default();
        let now = Instant::now();
        t.observe_status(
            &status(vec![
                cond("RuntimeReady", true, "", ""),
                cond(
                    "NetworkReady",
                    false,
                    "NetworkPluginNotReady",
                    "Network plugin returns error: cni plugin not initialized",
                ),
            ]),
            now,
        );
        let errs = t.ready_errors(now, HEALTHY_PLEG);
        assert_eq!(
            errs,
            vec!["container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized".to_string()]
        );
        // A missing condition prints as upstream prints a nil pointer.
        t.observe_status(&status(vec![cond("RuntimeReady", true, "", "")]), now);
        assert_eq!(
            t.ready_errors(now, HEALTHY_PLEG),
            vec!["container runtime network not ready: <nil>".to_string()]
        );
    }

    #[test]
    fn runtime_not_ready_keeps_the_last_sync() {
        let mut t = RuntimeTracker::default();
        let now = Instant::now();
        t.observe_status(
            &status(vec![
                cond("RuntimeReady", false, "Broken", "it broke"),
                cond("NetworkReady", true, "", ""),
            ]),
            now,
        );
        assert_eq!(
            t.ready_errors(now, HEALTHY_PLEG),
            vec![
                "container runtime status check may not have completed yet".to_string(),
                "container runtime not ready: RuntimeReady=false reason:Broken message:it broke"
                    .to_string(),
            ]
        );
        assert!(t.handlers.is_none());
    }

    #[test]
    fn stale_pleg_is_reported_with_go_durations() {
        let mut t = RuntimeTracker::default();
        let now = Instant::now();
        t.observe_status(
            &status(vec![
                cond("RuntimeReady", true, "", ""),
                cond("NetworkReady", true, "", ""),
            ]),
            now,
        );
        assert!(t.ready_errors(now, Some(PLEG_RELIST_THRESHOLD)).is_empty());
        assert_eq!(
            t.ready_errors(now, Some(Duration::from_millis(195_500))),
            vec![
                "PLEG is not healthy: pleg was last seen active 3m15.5s ago; threshold is 3m0s"
                    .to_string()
            ]
        );
    }

    #[test]
    fn runtime_version_string() {
        let mut t = RuntimeTracker::default();
        let v = api::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "containerd".into(),
            runtime_version: "v2.1.4".into(),
            runtime_api_version: "v1".into(),
        };
        t.observe_version(&v);
        assert_eq!(t.runtime_version(Some(&v)), "containerd://v2.1.4");
        assert_eq!(t.runtime_version(None), "containerd://Unknown");
    }
}
