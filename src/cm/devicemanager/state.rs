//! What the device manager knows, without any I/O: each plugin resource's devices and their
//! health, which devices each container holds, and what admitted pods still have to be given.
//! Admission counts (no plugin is asked then); devices are picked when a container starts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::api::ContainerAllocateResponse;

/// How long a resource whose plugin went away stays in the node's capacity (upstream's
/// endpointStopGracePeriod); its devices count as unhealthy meanwhile.
pub const STOP_GRACE: Duration = Duration::from_secs(5 * 60);

/// Bounds on what plugins can make us keep.
pub const MAX_RESOURCES: usize = 256;
pub const MAX_DEVICES_PER_RESOURCE: usize = 10_000;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Device {
    pub healthy: bool,
    /// The NUMA nodes the plugin says the device sits on.
    pub numa: Vec<i64>,
}

#[derive(Clone, Debug, Default)]
pub struct Resource {
    pub devices: BTreeMap<String, Device>,
    /// When its plugin went away; None while one serves it.
    pub stopped_at: Option<Instant>,
    /// Whether its plugin sent a list since it connected.
    pub listed: bool,
}

/// What a plugin's list did to the state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The number of devices kept (the list may be longer than the bound).
    pub kept: usize,
    /// False when the list says what the state already held: nothing to save or report.
    pub changed: bool,
}

impl Resource {
    pub(super) fn healthy(&self) -> impl Iterator<Item = &String> {
        self.devices
            .iter()
            .filter(|(_, d)| d.healthy)
            .map(|(id, _)| id)
    }
}

/// What one container holds of one resource.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assigned {
    pub ids: BTreeSet<String>,
    /// The plugin's answer to Allocate; None until it answered (or for a container restored
    /// from a checkpoint without one).
    pub response: Option<ContainerAllocateResponse>,
}

/// Devices a container may be given: the handed-on ones first, then the free ones.
pub type Candidates = (Vec<String>, Vec<String>);

/// Pod UID → container name → resource name → what it holds.
pub type PodDevices = BTreeMap<String, BTreeMap<String, BTreeMap<String, Assigned>>>;

#[derive(Debug, Default)]
pub struct State {
    pub resources: BTreeMap<String, Resource>,
    pub pods: PodDevices,
    /// Pod UID → resource → devices admitted but not yet picked.
    reserved: BTreeMap<String, BTreeMap<String, usize>>,
    /// Resources gone past the grace period, still to be shown as zero once.
    removed: Vec<String>,
}

/// Why a pod or a container gets no devices.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    #[error(
        "requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}"
    )]
    Unavailable {
        resource: String,
        requested: usize,
        available: usize,
    },
    #[error(
        "pod {uid} container {container} changed request for resource {resource} from {from} to {to}"
    )]
    Changed {
        uid: String,
        container: String,
        resource: String,
        from: usize,
        to: usize,
    },
}

/// How many devices of each resource a container asks for: its limits (extended resources
/// have requests equal to limits), as upstream reads them.
pub fn container_needs(container: &Container) -> BTreeMap<String, usize> {
    let limits = container.resources.as_ref().and_then(|r| r.limits.as_ref());
    limits
        .into_iter()
        .flatten()
        .filter_map(|(name, q)| {
            let n = crate::quantity::Amount::parse(&q.0).ok()?;
            let whole = usize::try_from(n.nano() / crate::quantity::NANO).ok()?;
            Some((name.clone(), whole))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// What the pod needs of each resource at once: the most any plain init container needs, or
/// what the long-running containers need together, whichever is more.
pub(super) fn pod_needs(pod: &Pod) -> BTreeMap<String, usize> {
    let mut init_max: BTreeMap<String, usize> = BTreeMap::new();
    let mut running: BTreeMap<String, usize> = BTreeMap::new();
    for (c, plain_init) in crate::pod::containers_in_order(pod) {
        for (name, n) in container_needs(c) {
            if plain_init {
                let m = init_max.entry(name).or_default();
                *m = (*m).max(n);
            } else {
                *running.entry(name).or_default() += n;
            }
        }
    }
    for (name, n) in init_max {
        let r = running.entry(name).or_default();
        *r = (*r).max(n);
    }
    running
}

impl State {
    /// What `container` of pod `uid` holds of `resource`.
    pub fn held(&self, uid: &str, container: &str, resource: &str) -> Option<&Assigned> {
        self.pods.get(uid)?.get(container)?.get(resource)
    }

    pub fn is_plugin_resource(&self, name: &str) -> bool {
        self.resources.contains_key(name)
            || self
                .pods
                .values()
                .flat_map(|c| c.values())
                .any(|r| r.contains_key(name))
    }

    /// Device IDs of `resource` held by pods other than `uid`.
    pub(super) fn held_by_others(&self, resource: &str, uid: &str) -> BTreeSet<&String> {
        self.pods
            .iter()
            .filter(|(other, _)| other.as_str() != uid)
            .flat_map(|(_, c)| c.values())
            .filter_map(|r| r.get(resource))
            .flat_map(|a| a.ids.iter())
            .collect()
    }

    fn held_by_pod(&self, uid: &str, resource: &str) -> usize {
        self.pods
            .get(uid)
            .into_iter()
            .flat_map(|c| c.values())
            .filter_map(|r| r.get(resource))
            .flat_map(|a| a.ids.iter())
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Healthy devices of `resource` that no other pod holds or has been promised.
    fn free_for(&self, resource: &str, uid: &str) -> usize {
        let Some(r) = self.resources.get(resource) else {
            return 0;
        };
        let held = self.held_by_others(resource, uid);
        let free = r.healthy().filter(|id| !held.contains(id)).count();
        let promised: usize = self
            .reserved
            .iter()
            .filter(|(other, _)| other.as_str() != uid)
            .filter_map(|(_, r)| r.get(resource))
            .sum();
        free.saturating_sub(promised)
    }

    /// Admits a pod's devices: every plugin resource it asks for must have enough healthy
    /// devices that no other pod holds or was promised. What it already holds (restored after
    /// a restart) counts as its own.
    pub fn admit(&mut self, uid: &str, pod: &Pod) -> Result<(), AllocationError> {
        let needs: BTreeMap<String, usize> = pod_needs(pod)
            .into_iter()
            .filter(|(name, _)| self.is_plugin_resource(name))
            .collect();
        let mut promise = BTreeMap::new();
        for (resource, needed) in needs {
            let held = self.held_by_pod(uid, &resource);
            let missing = needed.saturating_sub(held);
            if missing == 0 {
                continue;
            }
            let available = self.free_for(&resource, uid);
            if available < missing {
                return Err(AllocationError::Unavailable {
                    resource,
                    requested: needed,
                    available: available + held,
                });
            }
            promise.insert(resource, missing);
        }
        if promise.is_empty() {
            self.reserved.remove(uid);
        } else {
            self.reserved.insert(uid.to_string(), promise);
        }
        Ok(())
    }

    /// The devices `container` may be given of `resource`, best first: those the pod's plain
    /// init containers held (handed on), then free healthy ones in ID order. None when the
    /// container already holds its devices.
    pub fn candidates(
        &self,
        uid: &str,
        pod: &Pod,
        container: &str,
        resource: &str,
        needed: usize,
    ) -> Result<Option<Candidates>, AllocationError> {
        if let Some(held) = self.held(uid, container, resource) {
            if held.ids.len() != needed {
                return Err(AllocationError::Changed {
                    uid: uid.to_string(),
                    container: container.to_string(),
                    resource: resource.to_string(),
                    from: held.ids.len(),
                    to: needed,
                });
            }
            return Ok(None);
        }
        let plain_inits: BTreeSet<&str> = crate::pod::containers_in_order(pod)
            .into_iter()
            .filter(|(_, plain)| *plain)
            .map(|(c, _)| c.name.as_str())
            .collect();
        let mut reusable = BTreeSet::new();
        let mut taken: BTreeSet<&String> = self.held_by_others(resource, uid);
        for (name, resources) in self.pods.get(uid).into_iter().flatten() {
            let Some(a) = resources.get(resource) else {
                continue;
            };
            // A finished init container's devices go on to the next container; devices of
            // containers that keep running stay theirs.
            if plain_inits.contains(name.as_str()) {
                reusable.extend(a.ids.iter().cloned());
            } else {
                taken.extend(a.ids.iter());
            }
        }
        let healthy: BTreeSet<&String> = self
            .resources
            .get(resource)
            .map(|r| r.healthy().collect())
            .unwrap_or_default();
        let best: Vec<String> = reusable
            .into_iter()
            .filter(|id| healthy.contains(id) && !taken.contains(id))
            .collect();
        let rest: Vec<String> = healthy
            .iter()
            .filter(|id| !taken.contains(*id) && !best.contains(*id))
            .map(|id| (*id).clone())
            .collect();
        if best.len() + rest.len() < needed {
            return Err(AllocationError::Unavailable {
                resource: resource.to_string(),
                requested: needed,
                available: best.len() + rest.len(),
            });
        }
        Ok(Some((best, rest)))
    }

    /// Records what a container was given; the pod's promise shrinks by as much.
    pub fn assign(&mut self, uid: &str, container: &str, resource: &str, ids: BTreeSet<String>) {
        let n = ids.len();
        let resources = self
            .pods
            .entry(uid.to_string())
            .or_default()
            .entry(container.to_string())
            .or_default();
        resources.insert(
            resource.to_string(),
            Assigned {
                ids,
                response: None,
            },
        );
        if let Some(promise) = self.reserved.get_mut(uid) {
            if let Some(left) = promise.get_mut(resource) {
                *left = left.saturating_sub(n);
                if *left == 0 {
                    promise.remove(resource);
                }
            }
            if promise.is_empty() {
                self.reserved.remove(uid);
            }
        }
    }

    /// Takes back an assignment whose Allocate failed, so the next try picks again; the pod's
    /// promise grows back.
    pub fn unassign(&mut self, uid: &str, container: &str, resource: &str) {
        let Some(containers) = self.pods.get_mut(uid) else {
            return;
        };
        let Some(resources) = containers.get_mut(container) else {
            return;
        };
        if let Some(a) = resources.remove(resource) {
            *self
                .reserved
                .entry(uid.to_string())
                .or_default()
                .entry(resource.to_string())
                .or_default() += a.ids.len();
        }
        if resources.is_empty() {
            containers.remove(container);
        }
        if containers.is_empty() {
            self.pods.remove(uid);
        }
    }

    pub fn set_response(
        &mut self,
        uid: &str,
        container: &str,
        resource: &str,
        response: ContainerAllocateResponse,
    ) {
        if let Some(a) = self
            .pods
            .get_mut(uid)
            .and_then(|c| c.get_mut(container))
            .and_then(|r| r.get_mut(resource))
        {
            a.response = Some(response);
        }
    }

    /// A pod that is gone gives its devices back. True when it held any.
    pub fn forget(&mut self, uid: &str) -> bool {
        self.reserved.remove(uid);
        self.pods.remove(uid).is_some()
    }

    /// Keeps only the pods `keep` names. True when any held devices.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) -> bool {
        self.reserved.retain(|uid, _| keep(uid));
        let before = self.pods.len();
        self.pods.retain(|uid, _| keep(uid));
        before != self.pods.len()
    }

    /// A plugin (re)connected for `resource`: it is served again; its devices come with its
    /// first list. False when no more resources may be added.
    pub fn connect(&mut self, resource: &str) -> bool {
        if !self.resources.contains_key(resource) && self.resources.len() >= MAX_RESOURCES {
            return false;
        }
        self.removed.retain(|r| r != resource);
        let r = self.resources.entry(resource.to_string()).or_default();
        r.stopped_at = None;
        r.listed = false;
        true
    }

    /// A plugin's full device list replaces what it said before. A plugin may resend the same
    /// list often; only a first list or a different one counts as a change.
    pub fn update_devices(
        &mut self,
        resource: &str,
        devices: impl Iterator<Item = (String, Device)>,
    ) -> Listed {
        let r = self.resources.entry(resource.to_string()).or_default();
        let devices: BTreeMap<String, Device> = devices.take(MAX_DEVICES_PER_RESOURCE).collect();
        let changed = !r.listed || r.devices != devices;
        r.devices = devices;
        r.listed = true;
        Listed {
            kept: r.devices.len(),
            changed,
        }
    }

    /// Its plugin went away: every device counts as unhealthy until it comes back or the
    /// grace period ends.
    pub fn disconnect(&mut self, resource: &str, now: Instant) {
        if let Some(r) = self.resources.get_mut(resource) {
            r.stopped_at = Some(now);
            for d in r.devices.values_mut() {
                d.healthy = false;
            }
        }
    }

    /// Each resource's capacity (every device) and allocatable (healthy ones), and the
    /// resources whose plugin is gone for good (shown once as zero). Drops those from the
    /// state, as upstream's GetCapacity does.
    pub fn capacity(&mut self, now: Instant) -> Capacity {
        let gone: Vec<String> = self
            .resources
            .iter()
            .filter(|(_, r)| {
                r.stopped_at
                    .is_some_and(|t| now.saturating_duration_since(t) >= STOP_GRACE)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in &gone {
            self.resources.remove(name);
            if !self.removed.contains(name) {
                self.removed.push(name.clone());
            }
        }
        let mut out = Capacity::default();
        for (name, r) in &self.resources {
            out.capacity.insert(name.clone(), r.devices.len() as i64);
            out.allocatable
                .insert(name.clone(), r.healthy().count() as i64);
        }
        out.removed = std::mem::take(&mut self.removed);
        out
    }

    /// Healthy devices of every resource, for pod-resources' GetAllocatableResources.
    pub fn healthy_devices(&self) -> Vec<(String, String, Vec<i64>)> {
        self.resources
            .iter()
            .flat_map(|(name, r)| {
                r.devices
                    .iter()
                    .filter(|(_, d)| d.healthy)
                    .map(|(id, d)| (name.clone(), id.clone(), d.numa.clone()))
            })
            .collect()
    }

    /// The NUMA nodes of a device, if its plugin still lists it.
    pub fn numa_of(&self, resource: &str, id: &str) -> Vec<i64> {
        self.resources
            .get(resource)
            .and_then(|r| r.devices.get(id))
            .map(|d| d.numa.clone())
            .unwrap_or_default()
    }

    /// Healthy device IDs per resource, as the checkpoint records them.
    pub fn registered(&self) -> BTreeMap<String, Vec<String>> {
        self.resources
            .iter()
            .map(|(name, r)| (name.clone(), r.healthy().cloned().collect()))
            .collect()
    }
}

/// What the node status shows of plugin resources.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    pub capacity: BTreeMap<String, i64>,
    pub allocatable: BTreeMap<String, i64>,
    pub removed: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    const R: &str = "example.com/dev";

    fn container(name: &str, n: u32) -> Container {
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                limits: Some(BTreeMap::from([(R.to_string(), Quantity(n.to_string()))])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>, inits: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: Some(inits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn state(healthy: &[&str], unhealthy: &[&str]) -> State {
        let mut s = State::default();
        assert!(s.connect(R));
        let devs = healthy
            .iter()
            .map(|id| (id.to_string(), true))
            .chain(unhealthy.iter().map(|id| (id.to_string(), false)));
        s.update_devices(
            R,
            devs.map(|(id, healthy)| {
                (
                    id,
                    Device {
                        healthy,
                        numa: vec![0],
                    },
                )
            }),
        );
        s
    }

    fn pick(s: &mut State, uid: &str, p: &Pod, c: &str, n: usize) -> BTreeSet<String> {
        let (best, rest) = s.candidates(uid, p, c, R, n).unwrap().unwrap();
        let ids: BTreeSet<String> = best.into_iter().chain(rest).take(n).collect();
        s.assign(uid, c, R, ids.clone());
        ids
    }

    #[test]
    fn admission_counts_healthy_free_and_promised_devices() {
        let mut s = state(&["a", "b"], &["c"]);
        let two = pod(vec![container("c", 2)], vec![]);
        let one = pod(vec![container("c", 1)], vec![]);
        s.admit("p1", &one).unwrap();
        // One is promised to p1 (not yet picked), one unhealthy: one is left.
        let err = s.admit("p2", &two).unwrap_err();
        assert_eq!(
            err.to_string(),
            "requested number of devices unavailable for example.com/dev. Requested: 2, Available: 1"
        );
        s.admit("p2", &one).unwrap();
        assert!(s.admit("p3", &one).is_err());
        // p1's container picks its device: still nothing left for p3.
        pick(&mut s, "p1", &one, "c", 1);
        assert!(s.admit("p3", &one).is_err());
        assert!(s.forget("p1"));
        s.admit("p3", &one).unwrap();
    }

    #[test]
    fn resources_without_a_plugin_are_not_the_device_managers() {
        let mut s = State::default();
        let p = pod(vec![container("c", 5)], vec![]);
        s.admit("p", &p).unwrap();
        assert!(!s.is_plugin_resource(R));
    }

    #[test]
    fn init_devices_are_handed_on_and_sidecars_keep_theirs() {
        let mut s = state(&["a", "b", "c"], &[]);
        let mut sidecar = container("side", 1);
        sidecar.restart_policy = Some("Always".into());
        let p = pod(
            vec![container("main", 1)],
            vec![container("init", 2), sidecar],
        );
        // The init container's two, at most: the sidecar and main need two together.
        s.admit("p", &p).unwrap();
        let init = pick(&mut s, "p", &p, "init", 2);
        assert_eq!(init, BTreeSet::from(["a".into(), "b".into()]));
        let side = pick(&mut s, "p", &p, "side", 1);
        assert!(init.is_superset(&side));
        let main = pick(&mut s, "p", &p, "main", 1);
        assert!(init.is_superset(&main) && main.is_disjoint(&side));
        // Picked already: nothing to pick again, unless the request changed.
        assert_eq!(s.candidates("p", &p, "main", R, 1).unwrap(), None);
        assert!(matches!(
            s.candidates("p", &p, "main", R, 2),
            Err(AllocationError::Changed { .. })
        ));
    }

    #[test]
    fn a_failed_allocate_gives_the_devices_back_to_the_pods_promise() {
        let mut s = state(&["a"], &[]);
        let p = pod(vec![container("c", 1)], vec![]);
        s.admit("p", &p).unwrap();
        pick(&mut s, "p", &p, "c", 1);
        s.unassign("p", "c", R);
        assert!(s.pods.is_empty());
        // Promised again: another pod does not get it.
        assert!(s.admit("q", &p).is_err());
        pick(&mut s, "p", &p, "c", 1);
    }

    #[test]
    fn capacity_follows_health_and_a_gone_plugin_leaves_after_the_grace_period() {
        let mut s = state(&["a", "b"], &["c"]);
        let now = Instant::now();
        let c = s.capacity(now);
        assert_eq!(c.capacity[R], 3);
        assert_eq!(c.allocatable[R], 2);
        s.disconnect(R, now);
        let c = s.capacity(now + Duration::from_secs(1));
        assert_eq!((c.capacity[R], c.allocatable[R]), (3, 0));
        let c = s.capacity(now + STOP_GRACE);
        assert!(c.capacity.is_empty());
        assert_eq!(c.removed, vec![R.to_string()]);
        // Shown once.
        assert!(s.capacity(now + STOP_GRACE).removed.is_empty());
    }

    #[test]
    fn plugin_lists_and_resource_names_are_bounded() {
        let mut s = State::default();
        for i in 0..MAX_RESOURCES {
            assert!(s.connect(&format!("example.com/r{i}")));
        }
        assert!(!s.connect("example.com/one-more"));
        assert!(s.connect("example.com/r0"), "a known one reconnects");
        let listed = s.update_devices(
            "example.com/r0",
            (0..MAX_DEVICES_PER_RESOURCE + 5).map(|i| (i.to_string(), Device::default())),
        );
        assert_eq!(listed.kept, MAX_DEVICES_PER_RESOURCE);
    }

    #[test]
    fn only_a_first_or_different_list_is_a_change() {
        let mut s = State::default();
        assert!(s.connect(R));
        let list = |healthy: bool| {
            [(
                "d1".to_string(),
                Device {
                    healthy,
                    numa: vec![0],
                },
            )]
            .into_iter()
        };
        assert!(s.update_devices(R, list(true)).changed, "the first list");
        assert!(
            !s.update_devices(R, list(true)).changed,
            "the same list again"
        );
        assert!(s.update_devices(R, list(false)).changed, "a health change");
        assert!(s.connect(R));
        assert!(
            s.update_devices(R, list(false)).changed,
            "the first list after a reconnect"
        );
        assert!(
            s.update_devices(R, std::iter::empty()).changed,
            "devices gone"
        );
    }
}
