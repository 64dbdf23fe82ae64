//! The node lease in kube-node-lease: a cheap heartbeat renewed every quarter of its
//! duration, owned by the Node so it goes away with it (upstream's lease controller with the
//! kubelet's owner-reference hook).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::{NodeContext, NodeError, api_call, sleep_or_cancel};

pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// Immediate renewal attempts before waiting for the next interval.
const UPDATE_RETRIES: usize = 5;
const MAX_BACKOFF: Duration = Duration::from_secs(7);

/// Upstream renews at a quarter of the lease duration (10 s for the default 40 s).
pub fn renew_interval(lease_duration_seconds: i32) -> Duration {
    let secs = u64::try_from(lease_duration_seconds).unwrap_or(0).max(1);
    Duration::from_millis(secs * 250)
}

/// The lease to write: a copy of `base` (or a new one) with holder, duration and renew time
/// asserted.
pub fn renewed_lease(
    base: Option<&Lease>,
    node_name: &str,
    duration_seconds: i32,
    now: jiff::Timestamp,
) -> Lease {
    let mut lease = base.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(node_name.to_string()),
            namespace: Some(LEASE_NAMESPACE.to_string()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node_name.to_string()),
            ..Default::default()
        }),
    });
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.lease_duration_seconds = Some(duration_seconds);
    spec.renew_time = Some(MicroTime(now));
    lease
}

pub fn needs_owner(lease: &Lease) -> bool {
    lease
        .metadata
        .owner_references
        .as_ref()
        .is_none_or(|o| o.is_empty())
}

/// The owner reference that ties the lease to its Node.
pub fn node_owner(node_name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_string(),
        kind: "Node".to_string(),
        name: node_name.to_string(),
        uid: uid.to_string(),
        ..Default::default()
    }
}

struct LeaseClient<'a> {
    ctx: &'a NodeContext,
    leases: Api<Lease>,
    nodes: Api<Node>,
    cancel: &'a CancellationToken,
}

impl LeaseClient<'_> {
    /// The lease to write next. Until the Node can be read (and so its UID known), this
    /// fails and nothing is written, as upstream does.
    async fn prepare(&self, base: Option<&Lease>) -> Result<Lease, NodeError> {
        let s = &self.ctx.settings;
        let mut lease = renewed_lease(
            base,
            &self.ctx.node_name,
            s.lease_duration_seconds,
            jiff::Timestamp::now(),
        );
        if needs_owner(&lease) {
            let node = api_call(
                self.cancel,
                s.api_timeout,
                "getting the node for the lease owner",
                self.nodes.get(&self.ctx.node_name),
            )
            .await?;
            let uid = node.metadata.uid.unwrap_or_default();
            lease.metadata.owner_references = Some(vec![node_owner(&self.ctx.node_name, &uid)]);
        }
        Ok(lease)
    }

    /// Gets the lease, creating it when missing. `Ok((None, false))` when it could not be
    /// prepared this time.
    async fn ensure(&self) -> Result<(Option<Lease>, bool), NodeError> {
        let t = self.ctx.settings.api_timeout;
        match api_call(
            self.cancel,
            t,
            "getting the node lease",
            self.leases.get(&self.ctx.node_name),
        )
        .await
        {
            Ok(l) => Ok((Some(l), false)),
            Err(e) if e.is_not_found() => {
                let lease = match self.prepare(None).await {
                    Ok(l) => l,
                    Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
                    Err(e) => {
                        warn!(err = %e, "Not creating the node lease yet");
                        return Ok((None, false));
                    }
                };
                let created = api_call(
                    self.cancel,
                    t,
                    "creating the node lease",
                    self.leases.create(&PostParams::default(), &lease),
                )
                .await?;
                Ok((Some(created), true))
            }
            Err(e) => Err(e),
        }
    }

    /// `ensure` with a doubling wait (capped at 7 s) between failures; None when cancelled
    /// or when the lease could not be prepared.
    async fn backoff_ensure(&self) -> Option<(Option<Lease>, bool)> {
        let mut sleep = Duration::from_millis(100);
        loop {
            match self.ensure().await {
                Ok(r) => return Some(r),
                Err(NodeError::Cancelled) => return None,
                Err(e) => {
                    sleep = (sleep * 2).min(MAX_BACKOFF);
                    error!(err = %e, interval = ?sleep, "Failed to ensure lease exists, will retry");
                    if !sleep_or_cancel(self.cancel, sleep).await {
                        return None;
                    }
                }
            }
        }
    }

    async fn retry_update(&self, mut base: Lease) -> Result<Lease, NodeError> {
        let t = self.ctx.settings.api_timeout;
        for _ in 0..UPDATE_RETRIES {
            let lease = match self.prepare(Some(&base)).await {
                Ok(l) => l,
                Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
                Err(e) => {
                    error!(err = %e, "Failed to prepare lease");
                    continue;
                }
            };
            match api_call(
                self.cancel,
                t,
                "updating the node lease",
                self.leases
                    .replace(&self.ctx.node_name, &PostParams::default(), &lease),
            )
            .await
            {
                Ok(l) => return Ok(l),
                Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
                Err(e) if e.is_conflict() => {
                    error!(err = %e, "Failed to update lease");
                    match self.backoff_ensure().await {
                        Some((Some(fresh), _)) => base = fresh,
                        Some((None, _)) => {}
                        None => return Err(NodeError::Cancelled),
                    }
                }
                Err(e) => error!(err = %e, "Failed to update lease"),
            }
        }
        Err(NodeError::Other(format!(
            "failed {UPDATE_RETRIES} attempts to update lease"
        )))
    }

    /// One renewal round; returns the lease to start from next time.
    async fn sync(&self, latest: Option<Lease>) -> Result<Option<Lease>, NodeError> {
        if let Some(base) = latest {
            match self.retry_update(base).await {
                Ok(l) => return Ok(Some(l)),
                Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
                Err(e) => {
                    info!(err = %e, "failed to update lease using latest lease, fallback to ensure lease")
                }
            }
        }
        let Some((lease, created)) = self.backoff_ensure().await else {
            return Err(NodeError::Cancelled);
        };
        match lease {
            Some(l) if !created => match self.retry_update(l.clone()).await {
                Ok(updated) => Ok(Some(updated)),
                Err(NodeError::Cancelled) => Err(NodeError::Cancelled),
                Err(e) => {
                    error!(err = %e, "Will retry updating lease");
                    Ok(Some(l))
                }
            },
            other => Ok(other),
        }
    }
}

/// Renews the lease every quarter of its duration until cancelled.
pub async fn run_lease_loop(ctx: &NodeContext, cancel: &CancellationToken) {
    let client = LeaseClient {
        ctx,
        leases: Api::namespaced(ctx.client.clone(), LEASE_NAMESPACE),
        nodes: Api::all(ctx.client.clone()),
        cancel,
    };
    let interval = renew_interval(ctx.settings.lease_duration_seconds);
    let mut latest: Option<Lease> = None;
    loop {
        match client.sync(latest.take()).await {
            Ok(l) => latest = l,
            Err(_) => return,
        }
        if !sleep_or_cancel(cancel, interval).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn renews_at_a_quarter_of_the_duration() {
        assert_eq!(renew_interval(40), Duration::from_secs(10));
        assert_eq!(renew_interval(10), Duration::from_millis(2500));
        assert_eq!(renew_interval(0), Duration::from_millis(250));
    }

    #[test]
    fn new_lease_shape() {
        let now = ts("2025-01-02T03:04:05.123456Z");
        let l = renewed_lease(None, "n1", 40, now);
        assert_eq!(l.metadata.name.as_deref(), Some("n1"));
        assert_eq!(l.metadata.namespace.as_deref(), Some(LEASE_NAMESPACE));
        let spec = l.spec.clone().unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        assert!(needs_owner(&l));
        let v = serde_json::to_value(&l).unwrap_or_default();
        assert_eq!(v["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(v["kind"], "Lease");
        assert_eq!(v["spec"]["renewTime"], "2025-01-02T03:04:05.123456Z");
    }

    #[test]
    fn renewal_keeps_the_base_and_moves_the_time() {
        let mut base = renewed_lease(None, "n1", 40, ts("2025-01-01T00:00:00Z"));
        base.metadata.resource_version = Some("7".into());
        base.metadata.owner_references = Some(vec![node_owner("n1", "uid-1")]);
        if let Some(s) = base.spec.as_mut() {
            s.lease_duration_seconds = Some(15);
        }
        let now = ts("2025-01-01T00:00:10Z");
        let l = renewed_lease(Some(&base), "n1", 40, now);
        assert_eq!(l.metadata.resource_version.as_deref(), Some("7"));
        assert!(!needs_owner(&l));
        let spec = l.spec.unwrap_or_default();
        assert_eq!(spec.lease_duration_seconds, Some(40), "config wins");
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
    }

    #[test]
    fn owner_points_at_the_node() {
        let o = node_owner("n1", "abc");
        let v = serde_json::to_value(&o).unwrap_or_default();
        assert_eq!(
            v,
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "abc"})
        );
    }
}
