//! Node allocatable enforcement: the limits on the cgroup every pod lives under, so pods
//! together cannot eat what system-reserved and kube-reserved keep for the node.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::quantity::parse_str_nano;
use super::resources::milli_cpu_to_shares;
use super::{CgroupManager, PodResources};
use crate::events::{EventRecorder, EventType};

/// The enforceNodeAllocatable key that limits the pods' cgroup.
pub const PODS_KEY: &str = "pods";
/// Upstream retries a failed update this often: pods may use more memory than the new limit
/// until evictions bring them under it.
const RETRY: Duration = Duration::from_secs(60);

/// What the node has, before anything is reserved.
#[derive(Clone, Copy, Debug)]
pub struct Capacity {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    /// The kernel's pid_max, when readable.
    pub pids: Option<i64>,
}

/// /proc/sys/kernel/pid_max, the node's pid capacity.
pub fn pid_max() -> Option<i64> {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse().ok())
}

/// The limits for the pods' cgroup: capacity minus system-reserved and kube-reserved when
/// "pods" is enforced, else the whole capacity (the cgroup's default cpu share is too low to
/// leave alone). Hard eviction thresholds are not subtracted here, as upstream: they shape the
/// reported allocatable, not the cgroup.
pub fn pods_limits(
    capacity: Capacity,
    enforce: &[String],
    reserved: [&BTreeMap<String, String>; 2],
) -> PodResources {
    let enforced = enforce.iter().any(|k| k == PODS_KEY);
    let held = |name: &str, scale: i128| -> i64 {
        if !enforced {
            return 0;
        }
        reserved
            .iter()
            .filter_map(|r| r.get(name))
            .filter_map(|v| parse_str_nano(v).ok())
            .map(|n| (n / scale) as i64)
            .sum()
    };
    let cpu = (capacity.cpu_millis - held("cpu", 1_000_000)).max(0);
    let memory = (capacity.memory_bytes - held("memory", 1_000_000_000)).max(0);
    PodResources {
        cpu_shares: Some(milli_cpu_to_shares(cpu)),
        memory_limit: Some(memory),
        pids_limit: capacity
            .pids
            .map(|max| (max - held("pid", 1_000_000_000)).max(0)),
        ..Default::default()
    }
}

/// Applies `limits` to the pods' cgroup, retrying every minute until it takes, and says so
/// with upstream's node events.
pub async fn enforce(
    cgroups: std::sync::Arc<CgroupManager>,
    limits: PodResources,
    node_name: String,
    events: EventRecorder,
    cancel: CancellationToken,
) {
    loop {
        // cgroupfs writes block; they go where the pod cgroup writes go.
        let (c, l) = (cgroups.clone(), limits.clone());
        let applied = match tokio::task::spawn_blocking(move || c.apply_node_limits(&l)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(format!("cgroup task: {e}")),
        };
        match applied {
            Ok(()) => {
                info!(
                    ?limits,
                    "Node allocatable limits applied to the pods' cgroup"
                );
                events.node(
                    &node_name,
                    None,
                    EventType::Normal,
                    "NodeAllocatableEnforced",
                    "Updated Node Allocatable limit across pods",
                );
                return;
            }
            Err(err) => {
                warn!(%err, "Failed to update Node Allocatable limits");
                events.node(
                    &node_name,
                    None,
                    EventType::Warning,
                    "FailedNodeAllocatableEnforcement",
                    &format!("Failed to update Node Allocatable Limits: {err}"),
                );
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Capacity = Capacity {
        cpu_millis: 4000,
        memory_bytes: 8 << 30,
        pids: Some(4_194_304),
    };

    fn reserved(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn enforced_pods_get_capacity_minus_reservations() {
        let system = reserved(&[("cpu", "500m"), ("memory", "1Gi"), ("pid", "1000")]);
        let kube = reserved(&[("cpu", "250m"), ("memory", "512Mi")]);
        let r = pods_limits(CAP, &["pods".into()], [&system, &kube]);
        assert_eq!(r.cpu_shares, Some(milli_cpu_to_shares(3250)));
        assert_eq!(r.memory_limit, Some((8 << 30) - (1 << 30) - (512 << 20)));
        assert_eq!(r.pids_limit, Some(4_194_304 - 1000));
    }

    #[test]
    fn not_enforced_means_whole_capacity() {
        let system = reserved(&[("cpu", "1"), ("memory", "1Gi")]);
        let r = pods_limits(CAP, &["none".into()], [&system, &BTreeMap::new()]);
        assert_eq!(r.cpu_shares, Some(milli_cpu_to_shares(4000)));
        assert_eq!(r.memory_limit, Some(8 << 30));
        assert_eq!(r.pids_limit, Some(4_194_304));
    }
}
