//! Which dead containers, sandboxes and pod log folders go: pure decisions over a runtime
//! listing, as upstream's container GC makes them. `containers` carries them out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use super::known::PodStates;
use crate::cri::api;
use crate::runtime::labels;

/// `--minimum-container-ttl-duration`, `--maximum-dead-containers-per-container` and
/// `--maximum-dead-containers` (negative: no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerPolicy {
    pub min_age: Duration,
    pub max_per_pod_container: i32,
    pub max_containers: i32,
}

impl Default for ContainerPolicy {
    /// Upstream's defaults.
    fn default() -> Self {
        ContainerPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// A container that is not running, considered for removal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dead {
    pub id: String,
    pub pod_uid: String,
    pub name: String,
    pub created_at: i64,
    /// The runtime does not know its state: it is stopped before it is removed.
    pub unknown: bool,
}

fn pod_uid(labels_map: &HashMap<String, String>) -> Option<&str> {
    labels_map
        .get(labels::POD_UID)
        .map(String::as_str)
        .filter(|u| !u.is_empty())
}

/// Dead containers of kubelet pods created at least `min_age` before `now_nanos`, grouped by
/// (pod UID, container name) — upstream's evict units — newest first within each.
fn evict_units(
    containers: &[api::Container],
    min_age: Duration,
    now_nanos: i64,
) -> BTreeMap<(String, String), Vec<Dead>> {
    let newest = now_nanos.saturating_sub(i64::try_from(min_age.as_nanos()).unwrap_or(i64::MAX));
    let mut units: BTreeMap<(String, String), Vec<Dead>> = BTreeMap::new();
    for c in containers {
        if c.state == api::ContainerState::ContainerRunning as i32 || c.created_at > newest {
            continue;
        }
        let Some(uid) = pod_uid(&c.labels) else {
            continue;
        };
        let name = c
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        units
            .entry((uid.to_string(), name.clone()))
            .or_default()
            .push(Dead {
                id: c.id.clone(),
                pod_uid: uid.to_string(),
                name,
                created_at: c.created_at,
                unknown: c.state == api::ContainerState::ContainerUnknown as i32,
            });
    }
    for unit in units.values_mut() {
        newest_first(unit);
    }
    units
}

fn newest_first(v: &mut [Dead]) {
    v.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
}

/// Keeps the newest `keep` of every unit; the rest go to `out`, oldest first.
fn enforce_per_unit(
    units: &mut BTreeMap<(String, String), Vec<Dead>>,
    keep: usize,
    out: &mut Vec<Dead>,
) {
    for unit in units.values_mut() {
        if unit.len() > keep {
            out.extend(unit.drain(keep..).rev());
        }
    }
}

/// The dead containers to remove, in removal order. A pod that is gone (once every source has
/// spoken) loses all of them, as does a finished one when `evict_non_deleted` (the eviction
/// manager's DeleteAllUnusedContainers); then each (pod, container name) keeps its newest
/// `max_per_pod_container`, and with `max_containers` the node keeps at most that many, spread
/// evenly over the units (at least one each) and then the newest overall.
pub fn containers_to_remove(
    containers: &[api::Container],
    states: &PodStates,
    policy: &ContainerPolicy,
    now_nanos: i64,
    evict_non_deleted: bool,
) -> Vec<Dead> {
    let mut units = evict_units(containers, policy.min_age, now_nanos);
    let mut out = Vec::new();
    if states.synced {
        units.retain(|(uid, _), unit| {
            let all = states.content_removable(uid)
                || (evict_non_deleted && states.runtime_removable(uid));
            if all {
                out.extend(unit.drain(..).rev());
            }
            !all
        });
    }
    if let Ok(keep) = usize::try_from(policy.max_per_pod_container) {
        enforce_per_unit(&mut units, keep, &mut out);
    }
    let total = |u: &BTreeMap<(String, String), Vec<Dead>>| u.values().map(Vec::len).sum::<usize>();
    if let Ok(max) = usize::try_from(policy.max_containers)
        && total(&units) > max
    {
        let per_unit = (max / units.len().max(1)).max(1);
        enforce_per_unit(&mut units, per_unit, &mut out);
        let left = total(&units);
        if left > max {
            let mut flat: Vec<Dead> = units.into_values().flatten().collect();
            newest_first(&mut flat);
            out.extend(flat.drain(max..).rev());
        }
    }
    out
}

/// Sandboxes to remove: never a ready one nor one that still holds containers; of a pod that
/// still exists the newest stays (its status and IP come from it), of a pod that is gone (or
/// finished, with `evict_non_deleted`) none does.
pub fn sandboxes_to_remove(
    sandboxes: &[api::PodSandbox],
    containers: &[api::Container],
    states: &PodStates,
    evict_non_deleted: bool,
) -> Vec<String> {
    let holding: HashSet<&str> = containers
        .iter()
        .map(|c| c.pod_sandbox_id.as_str())
        .collect();
    let mut by_pod: BTreeMap<&str, Vec<&api::PodSandbox>> = BTreeMap::new();
    for sb in sandboxes {
        let uid = sb
            .metadata
            .as_ref()
            .map(|m| m.uid.as_str())
            .filter(|u| !u.is_empty())
            .or_else(|| pod_uid(&sb.labels));
        if let Some(uid) = uid
            && pod_uid(&sb.labels).is_some()
        {
            by_pod.entry(uid).or_default().push(sb);
        }
    }
    let mut out = Vec::new();
    for (uid, mut list) in by_pod {
        list.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        let keep = if states.content_removable(uid)
            || (evict_non_deleted && states.runtime_removable(uid))
        {
            0
        } else {
            1
        };
        for sb in list.into_iter().skip(keep).rev() {
            let ready = sb.state == api::PodSandboxState::SandboxReady as i32;
            if !ready && !holding.contains(sb.id.as_str()) {
                out.push(sb.id.clone());
            }
        }
    }
    out
}

/// The pod UID in a pod log folder's name (`<namespace>_<name>_<uid>`).
pub fn uid_of_log_dir(name: &str) -> &str {
    name.rsplit('_').next().unwrap_or(name)
}

/// Pod log folders to remove: those of pods that are gone and have no container left.
pub fn log_dirs_to_remove<'a>(
    names: &'a [String],
    containers: &[api::Container],
    states: &PodStates,
) -> Vec<&'a str> {
    let with_containers: HashSet<&str> = containers
        .iter()
        .filter_map(|c| pod_uid(&c.labels))
        .collect();
    names
        .iter()
        .map(String::as_str)
        .filter(|n| {
            let uid = uid_of_log_dir(n);
            states.content_removable(uid) && !with_containers.contains(uid)
        })
        .collect()
}
