//! Which pod goes first, and what its eviction says. Upstream's order:
//! - memory: pods using more than they requested first, then lower priority, then the larger
//!   use above the request;
//! - disk: the same with the disk usage the starved filesystem holds;
//! - pids: lower priority, then more processes.
//!
//! A pod without stats goes first (upstream's rule: nothing proves it is small).

use std::cmp::Ordering;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Volume};

use super::thresholds::{Observations, Signal, Threshold};
use crate::quantity::{Amount, Style};
use crate::stats::types::{FsStats, PodStats};

/// Upstream's eviction reason.
pub const REASON: &str = "Evicted";

pub struct Candidate {
    pub pod: Arc<Pod>,
    pub stats: Option<PodStats>,
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

fn request(pod: &Pod, resource: &str) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| crate::pod::qos::pod_requests(s).ok())
        .and_then(|t| t.get(resource).copied())
        .and_then(Amount::units)
        .unwrap_or(0)
}

fn used(fs: &Option<FsStats>, inodes: bool) -> i64 {
    let v = fs
        .as_ref()
        .and_then(|f| if inodes { f.inodes_used } else { f.used_bytes });
    i64::try_from(v.unwrap_or(0)).unwrap_or(i64::MAX)
}

/// Volumes whose data lives on the node's disk (upstream's local ephemeral volumes and
/// hostPath).
fn is_local(v: &Volume) -> bool {
    v.host_path.is_some()
        || v.config_map.is_some()
        || v.downward_api.is_some()
        || v.git_repo.is_some()
        || v.empty_dir
            .as_ref()
            .is_some_and(|e| e.medium.as_deref() != Some("Memory"))
}

/// What the pod holds on the filesystem `signal` watches.
fn disk_usage(c: &Candidate, signal: Signal, dedicated_image_fs: bool) -> Option<i64> {
    let stats = c.stats.as_ref()?;
    let inodes = signal.resource() == "inodes";
    let on_image_fs = matches!(
        signal,
        Signal::ImageFsAvailable
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsAvailable
            | Signal::ContainerFsInodesFree
    );
    let (rootfs, logs_and_volumes) = match (dedicated_image_fs, on_image_fs) {
        (false, _) => (true, true),
        (true, true) => (true, false),
        (true, false) => (false, true),
    };
    let mut total = 0i64;
    for cs in &stats.containers {
        if rootfs {
            total = total.saturating_add(used(&cs.rootfs, inodes));
        }
        if logs_and_volumes {
            total = total.saturating_add(used(&cs.logs, inodes));
        }
    }
    if logs_and_volumes {
        let local: Vec<&str> = c
            .pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter(|v| is_local(v))
            .map(|v| v.name.as_str())
            .collect();
        for v in stats
            .volume_stats
            .iter()
            .filter(|v| local.contains(&v.name.as_str()))
        {
            total = total.saturating_add(used(&Some(v.fs.clone()), inodes));
        }
    }
    Some(total)
}

fn memory_usage(c: &Candidate) -> Option<i64> {
    let ws = c.stats.as_ref()?.memory.as_ref()?.working_set_bytes?;
    Some(i64::try_from(ws).unwrap_or(i64::MAX))
}

fn processes(c: &Candidate) -> Option<i64> {
    let n = c.stats.as_ref()?.process_stats.as_ref()?.process_count?;
    Some(i64::try_from(n).unwrap_or(i64::MAX))
}

/// Whether `a` goes before `b`, with a missing usage counted as worst.
fn by_usage(a: Option<i64>, b: Option<i64>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(&a),
    }
}

/// Orders `pods` so the first is the one to evict for `signal`.
pub fn rank(pods: &mut [Candidate], signal: Signal, dedicated_image_fs: bool) {
    let resource = signal.resource();
    let usage = |c: &Candidate| -> Option<i64> {
        match resource {
            "memory" => memory_usage(c),
            "pids" => processes(c),
            _ => disk_usage(c, signal, dedicated_image_fs),
        }
    };
    // Requests are in bytes for memory and disk; inodes and pids have none.
    let request_name = match resource {
        "memory" => Some("memory"),
        "ephemeral-storage" | "inodes" => Some("ephemeral-storage"),
        _ => None,
    };
    let above_request = |c: &Candidate| -> Option<i64> {
        let u = usage(c)?;
        Some(u.saturating_sub(request_name.map_or(0, |r| request(&c.pod, r))))
    };
    pods.sort_by(|a, b| {
        if resource == "pids" {
            return priority(&a.pod)
                .cmp(&priority(&b.pod))
                .then_with(|| by_usage(usage(a), usage(b)));
        }
        // Exceeding the request: true first; no stats counts as exceeding.
        let exceeds = |c: &Candidate| above_request(c).is_none_or(|v| v > 0);
        exceeds(b)
            .cmp(&exceeds(a))
            .then_with(|| priority(&a.pod).cmp(&priority(&b.pod)))
            .then_with(|| by_usage(above_request(a), above_request(b)))
    });
}

fn format(v: i64, style: Style) -> String {
    Amount::from_units(v).format(style)
}

/// Upstream's eviction message: the starved resource, the threshold against what is
/// available, and each container using more than it requested.
pub fn message(
    c: &Candidate,
    signal: Signal,
    acting: &[Threshold],
    observations: &Observations,
) -> String {
    let resource = signal.resource();
    let mut msg = format!("The node was low on resource: {resource}. ");
    if let Some((t, o)) = acting
        .iter()
        .filter(|t| t.signal.resource() == resource)
        .find_map(|t| observations.get(&t.signal).map(|o| (t, o)))
    {
        let style = t.signal.style();
        msg.push_str(&format!(
            "Threshold quantity: {}, available: {}. ",
            format(t.value.resolve(o.capacity), style),
            format(o.available, style),
        ));
    }
    let (Some(stats), Some(spec)) = (c.stats.as_ref(), c.pod.spec.as_ref()) else {
        return msg;
    };
    if resource != "memory" && resource != "ephemeral-storage" {
        return msg;
    }
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for container in containers {
        let Some(cs) = stats.containers.iter().find(|s| s.name == container.name) else {
            continue;
        };
        let usage = match resource {
            "memory" => cs
                .memory
                .as_ref()
                .and_then(|m| m.working_set_bytes)
                .map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
            _ => {
                let root = cs.rootfs.as_ref().and_then(|f| f.used_bytes);
                let logs = cs.logs.as_ref().and_then(|f| f.used_bytes);
                root.zip(logs)
                    .map(|(r, l)| i64::try_from(r.saturating_add(l)).unwrap_or(i64::MAX))
            }
        };
        let requested = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource));
        let request_units = requested
            .and_then(|q| Amount::of(q).ok())
            .and_then(Amount::units)
            .unwrap_or(0);
        let request_text = requested
            .and_then(|q| Amount::of(q).ok().map(|a| a.format(Style::of(q))))
            .unwrap_or_else(|| "0".to_string());
        if let Some(u) = usage
            && u > request_units
        {
            msg.push_str(&format!(
                "Container {} was using {}, request is {}, has larger consumption of {resource}. ",
                container.name,
                format(u, Style::Binary),
                request_text,
            ));
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::super::thresholds::{Observation, Value};
    use super::*;
    use crate::stats::types::{ContainerStats, MemoryStats, PodReference};
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn candidate(name: &str, request: Option<&str>, prio: i32, ws: Option<u64>) -> Candidate {
        let pod = Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                priority: Some(prio),
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: request
                            .map(|r| BTreeMap::from([("memory".to_string(), Quantity(r.into()))])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let stats = ws.map(|ws| PodStats {
            pod_ref: PodReference {
                name: name.into(),
                ..Default::default()
            },
            memory: Some(MemoryStats {
                working_set_bytes: Some(ws),
                ..Default::default()
            }),
            containers: vec![ContainerStats {
                name: "c".into(),
                memory: Some(MemoryStats {
                    working_set_bytes: Some(ws),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        Candidate {
            pod: Arc::new(pod),
            stats,
        }
    }

    fn names(pods: &[Candidate]) -> Vec<&str> {
        pods.iter()
            .map(|c| c.pod.metadata.name.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn memory_ranks_by_exceeding_requests_then_priority_then_usage() {
        let mut pods = vec![
            // Guaranteed-like: within its request.
            candidate("within", Some("100Mi"), 0, Some(50 << 20)),
            // Burstable over its request.
            candidate("burstable", Some("10Mi"), 0, Some(30 << 20)),
            // BestEffort using little.
            candidate("besteffort-small", None, 0, Some(1 << 20)),
            // BestEffort using much, but important.
            candidate("important", None, 1000, Some(500 << 20)),
            candidate("besteffort-big", None, 0, Some(40 << 20)),
        ];
        rank(&mut pods, Signal::MemoryAvailable, false);
        assert_eq!(
            names(&pods),
            [
                "besteffort-big",
                "burstable",
                "besteffort-small",
                "important",
                "within"
            ]
        );
        let mut pods = vec![
            candidate("has-stats", None, 0, Some(1 << 30)),
            candidate("no-stats", None, 0, None),
        ];
        rank(&mut pods, Signal::MemoryAvailable, false);
        assert_eq!(names(&pods), ["no-stats", "has-stats"]);
    }

    #[test]
    fn the_message_names_the_threshold_and_the_greedy_container() {
        let c = candidate("p", Some("10Mi"), 0, Some(30 << 20));
        let t = Threshold {
            signal: Signal::MemoryAvailable,
            value: Value::Quantity(100 << 20),
            grace: Duration::ZERO,
            min_reclaim: None,
        };
        let obs = Observations::from([(
            Signal::MemoryAvailable,
            Observation {
                available: 50 << 20,
                capacity: 1 << 30,
            },
        )]);
        assert_eq!(
            message(&c, Signal::MemoryAvailable, &[t], &obs),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
             Container c was using 30Mi, request is 10Mi, has larger consumption of memory. "
        );
    }
}
