//! In-place pod resize, the runtime half: the pod the worker runs carries the *allocated*
//! resources (the sync loop admitted them, see sync::allocation); this module compares them
//! with what each running container was last given (its "acknowledged" settings) and plans
//! the `UpdateContainerResources` calls, the pod cgroup writes around them, or a restart where
//! the container's `resizePolicy` asks for one. Pure, so the rules are unit-tested.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cm::{PodCgroupOptions, PodResources};
use crate::cri::api;
use crate::pod::qos::QosClass;
use crate::runtime::actions::{ContainerKind, KillAction, PodActions, StartAction};
use crate::runtime::container::container_resources;
use crate::runtime::labels::hash_matches;
use crate::runtime::observed::{ContainerState, ObservedPod};

/// The cgroup settings a resize can change, as the runtime was given them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub cpu_shares: i64,
    /// CFS quota in µs; 0 means none.
    pub cpu_quota: i64,
    pub cpu_period: i64,
    /// Bytes; 0 means none.
    pub memory_limit: i64,
}

impl From<&api::LinuxContainerResources> for Limits {
    fn from(r: &api::LinuxContainerResources) -> Self {
        Limits {
            cpu_shares: r.cpu_shares,
            cpu_quota: r.cpu_quota,
            cpu_period: r.cpu_period,
            memory_limit: r.memory_limit_in_bytes,
        }
    }
}

impl Limits {
    fn cpu_changed(&self, other: &Limits) -> bool {
        (self.cpu_shares, self.cpu_quota, self.cpu_period)
            != (other.cpu_shares, other.cpu_quota, other.cpu_period)
    }

    fn memory_changed(&self, other: &Limits) -> bool {
        self.memory_limit != other.memory_limit
    }
}

/// What each running container of a pod was last given, by container ID.
pub type Acknowledged = HashMap<String, Limits>;

/// One container's in-place update.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerUpdate {
    pub container_id: String,
    pub name: String,
    pub target: api::LinuxContainerResources,
    /// Whether this update lowers a limit (or we cannot tell, after a kubelet restart:
    /// then it is treated as lowering, which only puts it earlier).
    pub lowers: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResizePlan {
    /// Decreases first, then increases (upstream's order, so the containers' limits never add
    /// up to more than the pod's cgroup allows).
    pub updates: Vec<ContainerUpdate>,
    /// Containers whose resize policy asks for a restart: (index in `containers` or
    /// `initContainers`, kind, container ID, name, attempt).
    pub restarts: Vec<(usize, ContainerKind, String, String, u32)>,
}

impl ResizePlan {
    pub fn is_empty(&self) -> bool {
        self.updates.is_empty() && self.restarts.is_empty()
    }
}

/// The restart policy a container's `resizePolicy` gives `resource` (upstream's default:
/// `NotRequired`, i.e. in place).
fn restart_required(container: &Container, resource: &str) -> bool {
    container
        .resize_policy
        .iter()
        .flatten()
        .any(|p| p.resource_name == resource && p.restart_policy == "RestartContainer")
}

/// Containers a resize applies to: the app containers and the sidecars (restartable init
/// containers), as upstream.
fn resizable(pod: &Pod) -> Vec<(usize, ContainerKind, &Container)> {
    let Some(spec) = pod.spec.as_ref() else {
        return vec![];
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"))
        .map(|(i, c)| (i, ContainerKind::Init, c));
    let regular = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (i, ContainerKind::Regular, c));
    sidecars.chain(regular).collect()
}

pub struct PlanInputs<'a> {
    pub qos: QosClass,
    pub machine_memory: i64,
    pub cgroup_options: &'a PodCgroupOptions,
}

/// Compares each running container's acknowledged settings with what its allocated spec
/// gives. A container being replaced anyway (its spec changed) is left to that.
pub fn plan(
    pod: &Pod,
    observed: &ObservedPod,
    acked: &Acknowledged,
    inputs: &PlanInputs<'_>,
) -> ResizePlan {
    let mut plan = ResizePlan::default();
    let mut raises = Vec::new();
    for (index, kind, c) in resizable(pod) {
        let Some(running) = observed
            .newest_container(&c.name)
            .filter(|s| s.state == ContainerState::Running)
        else {
            continue;
        };
        if running.hash.is_some_and(|h| !hash_matches(c, h)) {
            continue;
        }
        let Ok(target) =
            container_resources(c, inputs.qos, inputs.machine_memory, inputs.cgroup_options)
        else {
            // A bad quantity was refused when the container was created; nothing to apply.
            continue;
        };
        let wanted = Limits::from(&target);
        let update = |lowers| ContainerUpdate {
            container_id: running.id.clone(),
            name: c.name.clone(),
            target: target.clone(),
            lowers,
        };
        match acked.get(&running.id) {
            Some(current) if *current == wanted => {}
            Some(current) => {
                let cpu = current.cpu_changed(&wanted);
                let memory = current.memory_changed(&wanted);
                if (cpu && restart_required(c, "cpu")) || (memory && restart_required(c, "memory"))
                {
                    plan.restarts.push((
                        index,
                        kind,
                        running.id.clone(),
                        c.name.clone(),
                        running.attempt,
                    ));
                } else if lowers(current, &wanted) {
                    plan.updates.push(update(true));
                } else {
                    raises.push(update(false));
                }
            }
            // Created before this kubelet started: give it its settings again (idempotent),
            // never a restart on a guess.
            None => plan.updates.push(update(true)),
        }
    }
    plan.updates.extend(raises);
    plan
}

/// Whether any limit goes down (0 = no limit, the largest).
fn lowers(current: &Limits, wanted: &Limits) -> bool {
    let unlimited = |v: i64| if v <= 0 { i64::MAX } else { v };
    unlimited(wanted.memory_limit) < unlimited(current.memory_limit)
        || wanted.cpu_shares < current.cpu_shares
        || (wanted.cpu_period == current.cpu_period
            && unlimited(wanted.cpu_quota) < unlimited(current.cpu_quota))
}

/// Adds the restarts a resize policy asks for to the pod's actions: the container is stopped
/// and started again with its new resources, like a changed definition.
pub fn add_restarts(actions: &mut PodActions, plan: &ResizePlan) {
    for (index, kind, id, name, attempt) in &plan.restarts {
        if actions.kill.iter().any(|k| &k.container_id == id) {
            continue;
        }
        actions.kill.push(KillAction {
            container_id: id.clone(),
            name: name.clone(),
            message: format!("Container {name} resize requires restart"),
            grace: None,
        });
        actions.start.push(StartAction {
            kind: *kind,
            index: *index,
            restart_count: attempt + 1,
            backoff_key: None,
        });
    }
}

/// The pod cgroup writes around the container updates: what rises is written before them,
/// what falls after (`None` = leave as is). Without the pod's previous settings (a kubelet
/// restart) everything is written after.
pub fn pod_cgroup_steps(
    old: Option<&PodResources>,
    new: &PodResources,
) -> (Option<PodResources>, PodResources) {
    let Some(old) = old else {
        return (None, new.clone());
    };
    let unlimited = |v: Option<i64>| match v {
        None => i64::MAX,
        Some(q) if q < 0 => i64::MAX,
        Some(q) => q,
    };
    let mut before = PodResources {
        hugepage_limits: new.hugepage_limits.clone(),
        hugepage_default: new.hugepage_default,
        ..Default::default()
    };
    let mut after = before.clone();
    let mut put = |rises: bool, write: &mut dyn FnMut(&mut PodResources)| {
        write(if rises { &mut before } else { &mut after });
    };
    if new.memory_limit != old.memory_limit {
        let rises = unlimited(new.memory_limit) > unlimited(old.memory_limit);
        put(rises, &mut |r| r.memory_limit = new.memory_limit);
    }
    if new.cpu_shares != old.cpu_shares {
        let rises = new.cpu_shares > old.cpu_shares;
        put(rises, &mut |r| r.cpu_shares = new.cpu_shares);
    }
    if (new.cpu_quota, new.cpu_period) != (old.cpu_quota, old.cpu_period) {
        let rises = unlimited(new.cpu_quota) > unlimited(old.cpu_quota);
        put(rises, &mut |r| {
            r.cpu_quota = new.cpu_quota;
            r.cpu_period = new.cpu_period;
        });
    }
    let before = (before
        != PodResources {
            hugepage_limits: new.hugepage_limits.clone(),
            hugepage_default: new.hugepage_default,
            ..Default::default()
        })
    .then_some(before);
    (before, after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::labels::container_hash;
    use crate::runtime::observed::{ContainerInfo, SandboxInfo};
    use k8s_openapi::api::core::v1::{ContainerResizePolicy, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn sized(name: &str, cpu: &str, mem: &str) -> Container {
        let list = || {
            Some(
                [
                    ("cpu".to_string(), Quantity(cpu.into())),
                    ("memory".to_string(), Quantity(mem.into())),
                ]
                .into(),
            )
        };
        Container {
            name: name.into(),
            image: Some("busybox".into()),
            resources: Some(ResourceRequirements {
                requests: list(),
                limits: list(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn running(c: &Container, id: &str) -> ContainerInfo {
        ContainerInfo {
            id: id.into(),
            name: c.name.clone(),
            state: ContainerState::Running,
            hash: Some(container_hash(c)),
            attempt: 2,
            ..Default::default()
        }
    }

    fn observed(list: Vec<ContainerInfo>) -> ObservedPod {
        ObservedPod {
            uid: "u".into(),
            sandboxes: vec![SandboxInfo {
                id: "sb".into(),
                ready: true,
                ..Default::default()
            }],
            containers: list,
            ..Default::default()
        }
    }

    fn limits_of(c: &Container) -> Limits {
        Limits::from(
            &container_resources(
                c,
                QosClass::Guaranteed,
                1 << 33,
                &PodCgroupOptions::default(),
            )
            .unwrap(),
        )
    }

    fn inputs() -> PlanInputs<'static> {
        static OPTS: std::sync::OnceLock<PodCgroupOptions> = std::sync::OnceLock::new();
        PlanInputs {
            qos: QosClass::Guaranteed,
            machine_memory: 1 << 33,
            cgroup_options: OPTS.get_or_init(PodCgroupOptions::default),
        }
    }

    #[test]
    fn unchanged_resources_plan_nothing() {
        let c = sized("a", "100m", "64Mi");
        let acked = Acknowledged::from([("a1".to_string(), limits_of(&c))]);
        let p = plan(
            &pod(vec![c.clone()]),
            &observed(vec![running(&c, "a1")]),
            &acked,
            &inputs(),
        );
        assert!(p.is_empty(), "{p:?}");
    }

    #[test]
    fn decreases_come_before_increases_and_the_hash_ignores_resources() {
        let (a_old, b_old) = (sized("a", "100m", "64Mi"), sized("b", "200m", "128Mi"));
        let (a_new, b_new) = (sized("a", "300m", "96Mi"), sized("b", "100m", "64Mi"));
        let acked = Acknowledged::from([
            ("a1".to_string(), limits_of(&a_old)),
            ("b1".to_string(), limits_of(&b_old)),
        ]);
        // The running containers were created from the old spec: same hash.
        let obs = observed(vec![running(&a_old, "a1"), running(&b_old, "b1")]);
        let p = plan(&pod(vec![a_new, b_new.clone()]), &obs, &acked, &inputs());
        let order: Vec<(&str, bool)> = p
            .updates
            .iter()
            .map(|u| (u.name.as_str(), u.lowers))
            .collect();
        assert_eq!(order, vec![("b", true), ("a", false)]);
        assert_eq!(p.updates[0].target.memory_limit_in_bytes, 64 << 20);
        assert_eq!(p.updates[1].target.cpu_quota, 30_000);
        assert!(p.restarts.is_empty());
        let _ = b_new;
    }

    #[test]
    fn restart_policy_per_resource() {
        let old = sized("a", "100m", "64Mi");
        let mut new = sized("a", "100m", "96Mi");
        new.resize_policy = Some(vec![
            ContainerResizePolicy {
                resource_name: "memory".into(),
                restart_policy: "RestartContainer".into(),
            },
            ContainerResizePolicy {
                resource_name: "cpu".into(),
                restart_policy: "NotRequired".into(),
            },
        ]);
        let mut info = running(&old, "a1");
        info.hash = Some(container_hash(&new));
        let acked = Acknowledged::from([("a1".to_string(), limits_of(&old))]);
        let p = plan(
            &pod(vec![new.clone()]),
            &observed(vec![info.clone()]),
            &acked,
            &inputs(),
        );
        assert_eq!(
            p.restarts,
            vec![(0, ContainerKind::Regular, "a1".into(), "a".into(), 2)]
        );
        let mut actions = PodActions::default();
        add_restarts(&mut actions, &p);
        assert_eq!(
            actions.kill[0].message,
            "Container a resize requires restart"
        );
        assert_eq!(actions.start[0].restart_count, 3);

        // A cpu change alone is applied in place.
        let mut cpu_only = sized("a", "200m", "64Mi");
        cpu_only.resize_policy = new.resize_policy.clone();
        let p = plan(
            &pod(vec![cpu_only]),
            &observed(vec![info]),
            &acked,
            &inputs(),
        );
        assert!(p.restarts.is_empty());
        assert_eq!(p.updates.len(), 1);
    }

    #[test]
    fn unknown_settings_are_written_again_and_stopped_containers_skipped() {
        let c = sized("a", "100m", "64Mi");
        let p = plan(
            &pod(vec![c.clone()]),
            &observed(vec![running(&c, "a1")]),
            &Acknowledged::new(),
            &inputs(),
        );
        assert_eq!(p.updates.len(), 1);
        let mut stopped = running(&c, "a1");
        stopped.state = ContainerState::Exited;
        let p = plan(
            &pod(vec![c]),
            &observed(vec![stopped]),
            &Acknowledged::new(),
            &inputs(),
        );
        assert!(p.is_empty());
    }

    #[test]
    fn pod_cgroup_rises_before_and_falls_after() {
        let old = PodResources {
            cpu_shares: Some(102),
            cpu_quota: Some(10_000),
            cpu_period: Some(100_000),
            memory_limit: Some(64 << 20),
            ..Default::default()
        };
        let new = PodResources {
            cpu_shares: Some(307),
            cpu_quota: Some(30_000),
            cpu_period: Some(100_000),
            memory_limit: Some(32 << 20),
            ..Default::default()
        };
        let (before, after) = pod_cgroup_steps(Some(&old), &new);
        let before = before.unwrap();
        assert_eq!(
            (before.cpu_shares, before.cpu_quota, before.memory_limit),
            (Some(307), Some(30_000), None)
        );
        assert_eq!(
            (after.cpu_shares, after.cpu_quota, after.memory_limit),
            (None, None, Some(32 << 20))
        );
        let (before, after) = pod_cgroup_steps(None, &new);
        assert!(before.is_none());
        assert_eq!(after, new);
        let (before, _) = pod_cgroup_steps(Some(&new), &new);
        assert!(before.is_none());
    }
}
