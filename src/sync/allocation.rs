//! In-place pod resize, the admission half: what each pod was admitted with (its
//! *allocated* resources), and whether a changed spec's resources can be allocated now. The
//! pod workers always run the allocated resources; the runtime applies them (runtime::resize).
//! Kept on disk too (`allocation_checkpoint`): after a kubelet restart a pod is admitted with
//! what it was allocated before, and a resize still pending then is decided again, not taken
//! for granted.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use tracing::warn;

use super::admission::{self, Allocatable};
use super::allocation_checkpoint as checkpoint;
use crate::pod::qos::pod_qos_class;
use crate::status::ResizePending;

pub const DEFERRED: &str = "Deferred";
pub const INFEASIBLE: &str = "Infeasible";

/// Resources by container name, for the containers a resize may change.
type Resources = BTreeMap<String, Option<ResourceRequirements>>;

/// App containers and sidecars (restartable init containers) can be resized, as upstream.
fn resizable(c: &Container, init: bool) -> bool {
    !init || c.restart_policy.as_deref() == Some("Always")
}

fn resources_of(pod: &Pod) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::new();
    };
    let init = spec.init_containers.iter().flatten().map(|c| (c, true));
    let regular = spec.containers.iter().map(|c| (c, false));
    init.chain(regular)
        .filter(|(c, init)| resizable(c, *init))
        .map(|(c, _)| (c.name.clone(), c.resources.clone()))
        .collect()
}

/// `pod` with `resources` in place of its containers' own.
fn with_resources(pod: &Pod, resources: &Resources) -> Pod {
    let mut out = pod.clone();
    if let Some(spec) = out.spec.as_mut() {
        let init = spec.init_containers.iter_mut().flatten();
        for c in init.chain(spec.containers.iter_mut()) {
            if let Some(r) = resources.get(&c.name) {
                c.resources = r.clone();
            }
        }
    }
    out
}

/// Pods' allocated resources, by UID. Bounded by the pods with workers: an entry is added
/// when a worker starts and dropped when it ends.
#[derive(Debug, Default)]
pub struct Allocations {
    pods: HashMap<String, Resources>,
    /// What the checkpoint held at start for pods not admitted again yet; bounded by that
    /// file, and emptied of pods no source brought back once the sources have all spoken.
    restored: HashMap<String, Resources>,
    /// Where the allocations are written; none in tests that do not restart.
    checkpoint: Option<PathBuf>,
    /// Changed since the last write in ways a restart could derive again (an admission takes
    /// the spec, a pod gone is pruned): written at the next `flush`, so a start with many pods
    /// writes the file once, not once per pod. A resize's acceptance is written at once, and
    /// the sync loop flushes before it decides any resize.
    dirty: bool,
}

impl Allocations {
    /// Allocations that live in `path` too, starting from what it holds (a damaged file is
    /// reported and replaced: the pods are then admitted with what they ask for, as before
    /// there was a file).
    pub fn with_checkpoint(path: PathBuf) -> Self {
        let restored = match checkpoint::load(&path) {
            Ok(pods) => pods.into_iter().collect(),
            Err(e) => {
                warn!(error = %e, "Allocated resources not restored");
                HashMap::new()
            }
        };
        Allocations {
            pods: HashMap::new(),
            restored,
            checkpoint: Some(path),
            dirty: false,
        }
    }

    /// Writes what changed since the last write, if anything did (the housekeeping's call).
    pub fn flush(&mut self) {
        if self.dirty {
            self.save();
        }
    }

    fn save(&mut self) {
        let Some(path) = &self.checkpoint else {
            return;
        };
        self.dirty = false;
        let all = self
            .pods
            .iter()
            .chain(self.restored.iter())
            .map(|(uid, r)| (uid.as_str(), r))
            .collect();
        if let Err(e) = checkpoint::save(path, &all) {
            warn!(error = %e, "Allocated resources not checkpointed");
        }
    }

    /// Records what a newly admitted pod is allocated: what it had before a restart, else
    /// what it asks for.
    pub fn admit(&mut self, uid: &str, pod: &Pod) {
        if self.pods.contains_key(uid) {
            return;
        }
        let resources = match self.restored.remove(uid) {
            // Moved from one map to the other: the file's content is the same.
            Some(restored) => restored,
            None => {
                self.dirty = true;
                resources_of(pod)
            }
        };
        self.pods.insert(uid.to_string(), resources);
    }

    pub fn forget(&mut self, uid: &str) {
        if self.pods.remove(uid).is_some() || self.restored.remove(uid).is_some() {
            self.dirty = true;
        }
    }

    /// Drops what the checkpoint held for pods that did not come back (`keep` says which
    /// may still).
    pub fn prune_restored(&mut self, keep: impl Fn(&str) -> bool) {
        let before = self.restored.len();
        self.restored.retain(|uid, _| keep(uid));
        if self.restored.len() != before {
            self.dirty = true;
        }
    }

    /// The pod as admission weighs it: with what it is (or was, before a restart) allocated.
    pub fn as_admitted(&self, uid: &str, desired: Arc<Pod>) -> Arc<Pod> {
        match self.restored.get(uid) {
            Some(restored) if !self.pods.contains_key(uid) => {
                Arc::new(with_resources(&desired, restored))
            }
            _ => self.allocated_pod(uid, desired),
        }
    }

    /// Whether the spec asks for other resources than were allocated.
    pub fn wants_resize(&self, uid: &str, desired: &Pod) -> bool {
        self.pods
            .get(uid)
            .is_some_and(|allocated| allocated_differs(allocated, &resources_of(desired)))
    }

    /// Takes the desired resources as the allocation.
    pub fn accept(&mut self, uid: &str, desired: &Pod) {
        self.pods.insert(uid.to_string(), resources_of(desired));
        self.save();
    }

    /// The pod as its worker runs it: the desired spec with the allocated resources.
    pub fn allocated_pod(&self, uid: &str, desired: Arc<Pod>) -> Arc<Pod> {
        match self.pods.get(uid) {
            Some(allocated) if allocated_differs(allocated, &resources_of(&desired)) => {
                Arc::new(with_resources(&desired, allocated))
            }
            _ => desired,
        }
    }
}

/// Compares by amount ("1" and "1000m" are the same request).
fn allocated_differs(allocated: &Resources, desired: &Resources) -> bool {
    let same_list = |a: Option<&BTreeMap<String, Quantity>>,
                     b: Option<&BTreeMap<String, Quantity>>| {
        let (a, b) = (
            a.cloned().unwrap_or_default(),
            b.cloned().unwrap_or_default(),
        );
        a.len() == b.len()
            && a.iter().all(|(k, q)| {
                b.get(k)
                    .is_some_and(|other| crate::quantity::same_amount(q, other))
            })
    };
    desired.iter().any(|(name, want)| {
        let Some(have) = allocated.get(name) else {
            // A container the pod did not have (a changed manifest): not a resize.
            return false;
        };
        let (have, want) = (
            have.clone().unwrap_or_default(),
            want.clone().unwrap_or_default(),
        );
        !same_list(have.requests.as_ref(), want.requests.as_ref())
            || !same_list(have.limits.as_ref(), want.limits.as_ref())
    })
}

/// What the node offers, and the other pods' allocations, for a resize's fit.
pub struct Room<'a, I> {
    pub node: &'a Allocatable,
    pub node_labels: &'a BTreeMap<String, String>,
    pub others: I,
}

fn changed_beyond_cpu_and_memory(allocated: &Pod, desired: &Pod) -> bool {
    let strip = |pod: &Pod| {
        resources_of(pod)
            .into_iter()
            .map(|(name, r)| {
                let r = r.unwrap_or_default();
                let keep = |m: Option<BTreeMap<String, Quantity>>| {
                    m.unwrap_or_default()
                        .into_iter()
                        .filter(|(k, _)| k != "cpu" && k != "memory")
                        .collect::<BTreeMap<_, _>>()
                };
                (name, (keep(r.requests), keep(r.limits)))
            })
            .collect::<BTreeMap<_, _>>()
    };
    strip(allocated) != strip(desired)
}

/// Upstream's checks, in its order: what can never be allocated is `Infeasible`, what does
/// not fit next to the other pods now is `Deferred` (tried again when room may have freed).
pub fn check<'a>(
    allocated: &Pod,
    desired: &Pod,
    room: Option<Room<'a, impl Iterator<Item = &'a Pod>>>,
) -> Result<(), ResizePending> {
    let infeasible = |message: String| ResizePending {
        reason: INFEASIBLE,
        message,
    };
    if pod_qos_class(allocated) != pod_qos_class(desired) {
        return Err(infeasible(
            "Pod QOS Class may not change as a result of resizing".into(),
        ));
    }
    if changed_beyond_cpu_and_memory(allocated, desired) {
        return Err(infeasible(
            "only cpu and memory resources are mutable".into(),
        ));
    }
    let Some(room) = room else {
        return Ok(());
    };
    let (cpu, memory) = admission::requests(desired);
    if memory > room.node.memory_bytes {
        return Err(infeasible(format!(
            "Node didn't have enough capacity: memory, requested: {memory}, capacity: {}",
            room.node.memory_bytes
        )));
    }
    if cpu > room.node.cpu_millis {
        return Err(infeasible(format!(
            "Node didn't have enough capacity: cpu, requested: {cpu}, capacity: {}",
            room.node.cpu_millis
        )));
    }
    admission::admit(desired, room.others, room.node, room.node_labels).map_err(|r| ResizePending {
        reason: DEFERRED,
        message: r.message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(cpu: &str, mem: &str) -> Pod {
        let list = || {
            Some(
                [
                    ("cpu".to_string(), Quantity(cpu.into())),
                    ("memory".to_string(), Quantity(mem.into())),
                ]
                .into(),
            )
        };
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: list(),
                        limits: list(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn node() -> Allocatable {
        Allocatable {
            cpu_millis: 1000,
            memory_bytes: 1 << 30,
            pods: 10,
            ..Default::default()
        }
    }

    #[test]
    fn workers_run_the_allocation_until_a_resize_is_accepted() {
        let mut a = Allocations::default();
        let first = Arc::new(pod("100m", "64Mi"));
        a.admit("u", &first);
        assert!(!a.wants_resize("u", &pod("0.1", "64Mi")), "same amounts");
        let bigger = Arc::new(pod("200m", "64Mi"));
        assert!(a.wants_resize("u", &bigger));
        let run = a.allocated_pod("u", bigger.clone());
        assert_eq!(
            run.spec.as_ref().unwrap().containers[0]
                .resources
                .as_ref()
                .unwrap()
                .limits
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "100m"
        );
        a.accept("u", &bigger);
        assert!(Arc::ptr_eq(&a.allocated_pod("u", bigger.clone()), &bigger));
        a.forget("u");
        assert!(!a.wants_resize("u", &first));
    }

    #[test]
    fn a_restart_keeps_what_was_allocated_and_lets_go_of_pods_that_did_not_return() {
        let dir = tempfile::tempdir().unwrap();
        let path = checkpoint::path_in(dir.path());
        let mut a = Allocations::with_checkpoint(path.clone());
        a.admit("u", &pod("100m", "64Mi"));
        a.admit("gone", &pod("100m", "64Mi"));
        a.flush();
        let bigger = pod("200m", "64Mi");

        // As after a crash: a new kubelet reads the file.
        let mut b = Allocations::with_checkpoint(path.clone());
        let admitted = b.as_admitted("u", Arc::new(bigger.clone()));
        assert_eq!(resources_of(&admitted), resources_of(&pod("100m", "64Mi")));
        b.admit("u", &bigger);
        assert!(
            b.wants_resize("u", &bigger),
            "the resize is not taken as granted"
        );
        b.prune_restored(|_| false);
        b.flush();
        let on_disk = checkpoint::load(&path).unwrap();
        assert_eq!(on_disk.keys().collect::<Vec<_>>(), ["u"]);
        b.forget("u");
        b.flush();
        assert!(checkpoint::load(&path).unwrap().is_empty());
    }

    #[test]
    fn infeasible_then_deferred_in_upstreams_order() {
        let labels = BTreeMap::new();
        let room = |others: Vec<&'static Pod>| {
            Some(Room {
                node: Box::leak(Box::new(node())),
                node_labels: Box::leak(Box::new(labels.clone())),
                others: others.into_iter(),
            })
        };
        let old = pod("100m", "64Mi");
        let e = check(&old, &pod("100m", "2Gi"), room(vec![])).unwrap_err();
        assert_eq!(e.reason, INFEASIBLE);
        assert_eq!(
            e.message,
            format!(
                "Node didn't have enough capacity: memory, requested: {}, capacity: {}",
                2u64 << 30,
                1u64 << 30
            )
        );
        let neighbour: &'static Pod = Box::leak(Box::new(pod("800m", "64Mi")));
        let e = check(&old, &pod("300m", "64Mi"), room(vec![neighbour])).unwrap_err();
        assert_eq!(e.reason, DEFERRED);
        assert!(
            e.message
                .starts_with("Node didn't have enough resource: cpu"),
            "{}",
            e.message
        );
        assert!(check(&old, &pod("150m", "64Mi"), room(vec![neighbour])).is_ok());

        let mut best_effort = pod("100m", "64Mi");
        best_effort.spec.as_mut().unwrap().containers[0].resources = None;
        let e = check(&old, &best_effort, room(vec![])).unwrap_err();
        assert_eq!(
            e.message,
            "Pod QOS Class may not change as a result of resizing"
        );
        assert!(
            check(
                &old,
                &pod("300m", "64Mi"),
                None::<Room<std::iter::Empty<&Pod>>>
            )
            .is_ok()
        );
    }
}
