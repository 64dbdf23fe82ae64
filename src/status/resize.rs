//! How an in-place resize shows in the pod status (upstream v1.34): the `PodResizePending`
//! and `PodResizeInProgress` conditions, and per container `allocatedResources` (the
//! admitted requests) and `resources` (what the running container has).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodCondition, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::cm::resources::{milli_cpu_to_quota, milli_cpu_to_shares};
use crate::quantity::{parse_bytes, parse_cpu_millis};
use crate::runtime::resize::{Acknowledged, Limits};

pub const PENDING: &str = "PodResizePending";
pub const IN_PROGRESS: &str = "PodResizeInProgress";

/// A resize the kubelet could not allocate yet (`Deferred`) or ever (`Infeasible`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResizePending {
    pub reason: &'static str,
    pub message: String,
}

/// What the status generator is told about resizes.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResizeView<'a> {
    pub pending: Option<&'a ResizePending>,
    /// The allocated resources are not yet applied to every running container.
    pub in_progress: bool,
    /// The last attempt to apply them failed with this.
    pub error: Option<&'a str>,
    /// What each running container was given, by container ID.
    pub actual: Option<&'a Acknowledged>,
}

pub fn conditions(view: &ResizeView<'_>, at: &Option<Time>) -> Vec<PodCondition> {
    let mut out = Vec::new();
    if let Some(p) = view.pending {
        out.push(PodCondition {
            type_: PENDING.into(),
            status: "True".into(),
            reason: Some(p.reason.into()),
            message: Some(p.message.clone()),
            last_transition_time: at.clone(),
            ..Default::default()
        });
    }
    if view.in_progress || view.error.is_some() {
        out.push(PodCondition {
            type_: IN_PROGRESS.into(),
            status: "True".into(),
            reason: view.error.map(|_| "Error".to_string()),
            message: view.error.map(str::to_string),
            last_transition_time: at.clone(),
            ..Default::default()
        });
    }
    out
}

fn quantity(r: Option<&BTreeMap<String, Quantity>>, name: &str) -> Option<Quantity> {
    r.and_then(|m| m.get(name)).cloned()
}

/// `allocatedResources` and `resources` of one container's status. `running` is the ID of its
/// running container, when it runs. Containers without any resources get neither.
pub fn container_resources(
    spec: &Container,
    running: Option<&str>,
    view: &ResizeView<'_>,
) -> (
    Option<BTreeMap<String, Quantity>>,
    Option<ResourceRequirements>,
) {
    let Some(allocated) = spec.resources.as_ref() else {
        return (None, None);
    };
    let requests = allocated.requests.as_ref().filter(|r| !r.is_empty());
    let limits = allocated.limits.as_ref().filter(|l| !l.is_empty());
    if requests.is_none() && limits.is_none() {
        return (None, None);
    }
    let mut out_requests: BTreeMap<String, Quantity> = requests.cloned().unwrap_or_default();
    let mut out_limits: BTreeMap<String, Quantity> = limits.cloned().unwrap_or_default();
    // A limit without a request means request = limit (API defaulting), as the runtime got.
    for name in ["cpu", "memory"] {
        if !out_requests.contains_key(name)
            && let Some(q) = quantity(limits, name)
        {
            out_requests.insert(name.into(), q);
        }
    }
    let allocated_requests = (!out_requests.is_empty()).then(|| out_requests.clone());
    let actual = running.and_then(|id| view.actual.and_then(|a| a.get(id)));
    if let Some(actual) = actual {
        apply_actual(&mut out_requests, &mut out_limits, actual);
    }
    let resources = ResourceRequirements {
        requests: (!out_requests.is_empty()).then_some(out_requests),
        limits: (!out_limits.is_empty()).then_some(out_limits),
        ..Default::default()
    };
    (allocated_requests, Some(resources))
}

/// Replaces the allocated values by what the container actually got, where they differ
/// beyond the rounding of shares and quota (then the allocated value is kept, as upstream).
fn apply_actual(
    requests: &mut BTreeMap<String, Quantity>,
    limits: &mut BTreeMap<String, Quantity>,
    actual: &Limits,
) {
    let cpu_request = requests.get("cpu").and_then(|q| parse_cpu_millis(q).ok());
    if cpu_request.is_none_or(|m| milli_cpu_to_shares(m) as i64 != actual.cpu_shares)
        && actual.cpu_shares > 2
    {
        let millis = (actual.cpu_shares * 1000 + 1023) / 1024;
        requests.insert("cpu".into(), milli(millis));
    }
    let cpu_limit = limits.get("cpu").and_then(|q| parse_cpu_millis(q).ok());
    if actual.cpu_quota > 0 && actual.cpu_period > 0 {
        let same = cpu_limit
            .is_some_and(|m| milli_cpu_to_quota(m, actual.cpu_period as u64) == actual.cpu_quota);
        if !same {
            limits.insert(
                "cpu".into(),
                milli(actual.cpu_quota * 1000 / actual.cpu_period),
            );
        }
    }
    let memory_limit = limits.get("memory").and_then(|q| parse_bytes(q).ok());
    if actual.memory_limit > 0 && memory_limit != Some(actual.memory_limit) {
        limits.insert(
            "memory".into(),
            crate::quantity::bytes(actual.memory_limit as u64),
        );
    }
}

fn milli(m: i64) -> Quantity {
    if m % 1000 == 0 {
        Quantity((m / 1000).to_string())
    } else {
        Quantity(format!("{m}m"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let map = |l: &[(&str, &str)]| {
            (!l.is_empty()).then(|| {
                l.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: map(req),
                limits: map(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn conditions_follow_the_state() {
        let pending = ResizePending {
            reason: "Infeasible",
            message: "Node didn't have enough capacity: memory, requested: 1, capacity: 0".into(),
        };
        let c = conditions(
            &ResizeView {
                pending: Some(&pending),
                ..Default::default()
            },
            &None,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].type_, PENDING);
        assert_eq!(c[0].reason.as_deref(), Some("Infeasible"));
        let c = conditions(
            &ResizeView {
                in_progress: true,
                error: Some("container c: boom"),
                ..Default::default()
            },
            &None,
        );
        assert_eq!(
            (c[0].type_.as_str(), c[0].reason.as_deref()),
            (IN_PROGRESS, Some("Error"))
        );
        assert!(conditions(&ResizeView::default(), &None).is_empty());
    }

    #[test]
    fn actual_values_replace_allocated_ones_unless_only_rounding_differs() {
        let c = container(
            &[("cpu", "100m"), ("memory", "64Mi")],
            &[("memory", "64Mi")],
        );
        let (allocated, resources) = container_resources(&c, None, &ResizeView::default());
        let allocated = allocated.unwrap();
        assert_eq!(allocated["memory"].0, "64Mi");
        assert_eq!(
            resources.clone().unwrap().limits.unwrap()["memory"].0,
            "64Mi"
        );

        // Running with the old limit (the resize is still being applied).
        let actual = Acknowledged::from([(
            "id".to_string(),
            Limits {
                cpu_shares: milli_cpu_to_shares(100) as i64,
                memory_limit: 32 << 20,
                ..Default::default()
            },
        )]);
        let view = ResizeView {
            actual: Some(&actual),
            ..Default::default()
        };
        let (_, resources) = container_resources(&c, Some("id"), &view);
        let r = resources.unwrap();
        assert_eq!(r.limits.unwrap()["memory"].0, "32Mi");
        assert_eq!(
            r.requests.unwrap()["cpu"].0,
            "100m",
            "rounding keeps the allocated"
        );

        let none = Container::default();
        assert_eq!(container_resources(&none, None, &view), (None, None));
    }
}
