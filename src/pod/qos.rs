//! Pod QoS class and the pod-level resource totals the cgroup settings derive from.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::is_sidecar;
use crate::quantity::{Amount, QuantityError};

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

impl std::fmt::Display for QosClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

type ResourceList = BTreeMap<String, Quantity>;

/// Pod-level `spec.resources` counts only when it names cpu, memory or hugepages.
fn is_pod_level_resource(name: &str) -> bool {
    name == CPU || name == MEMORY || name.starts_with(HUGEPAGES_PREFIX)
}

fn pod_level_set(spec: &PodSpec) -> bool {
    let Some(r) = spec.resources.as_ref() else {
        return false;
    };
    let names = r
        .requests
        .iter()
        .chain(r.limits.iter())
        .flat_map(|l| l.keys());
    names.into_iter().any(|n| is_pod_level_resource(n))
}

/// The QoS class from the spec, by upstream's rules: BestEffort when no container (init
/// included) requests or limits cpu or memory; Guaranteed when every container limits both
/// and the summed requests equal the summed limits; Burstable otherwise. Pod-level resources,
/// when set, replace the per-container view. Unparsable quantities count as absent (the API
/// server would have rejected them).
pub fn qos_class(spec: &PodSpec) -> QosClass {
    let mut requests: BTreeMap<&str, Amount> = BTreeMap::new();
    let mut limits: BTreeMap<&str, Amount> = BTreeMap::new();
    let mut guaranteed = true;

    let mut account = |reqs: Option<&ResourceList>, lims: Option<&ResourceList>| {
        for (name, q) in reqs.into_iter().flatten() {
            if let Some(n) = qos_resource(name)
                && let Ok(v) = Amount::of(q)
                && v > Amount::ZERO
            {
                *requests.entry(n).or_default() += v;
            }
        }
        let mut found = (false, false);
        for (name, q) in lims.into_iter().flatten() {
            if let Some(n) = qos_resource(name)
                && let Ok(v) = Amount::of(q)
                && v > Amount::ZERO
            {
                *limits.entry(n).or_default() += v;
                if n == CPU {
                    found.0 = true;
                } else {
                    found.1 = true;
                }
            }
        }
        if found != (true, true) {
            guaranteed = false;
        }
    };

    if let Some(r) = spec.resources.as_ref().filter(|_| pod_level_set(spec)) {
        account(r.requests.as_ref(), r.limits.as_ref());
    } else {
        let inits = spec.init_containers.iter().flatten();
        for c in spec.containers.iter().chain(inits) {
            let r = c.resources.as_ref();
            account(
                r.and_then(|r| r.requests.as_ref()),
                r.and_then(|r| r.limits.as_ref()),
            );
        }
    }

    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    if guaranteed
        && requests.len() == limits.len()
        && requests.iter().all(|(n, r)| limits.get(n) == Some(r))
    {
        return QosClass::Guaranteed;
    }
    QosClass::Burstable
}

fn qos_resource(name: &str) -> Option<&'static str> {
    match name {
        CPU => Some(CPU),
        MEMORY => Some(MEMORY),
        _ => None,
    }
}

/// The pod's class: the one recorded in its status if any (it never changes once set),
/// otherwise computed from the spec.
pub fn pod_qos_class(pod: &Pod) -> QosClass {
    let recorded = pod.status.as_ref().and_then(|s| s.qos_class.as_deref());
    match recorded {
        Some("Guaranteed") => QosClass::Guaranteed,
        Some("Burstable") => QosClass::Burstable,
        Some("BestEffort") => QosClass::BestEffort,
        _ => qos_class(pod.spec.as_ref().unwrap_or(&PodSpec::default())),
    }
}

/// Totals per resource name.
pub type Totals = BTreeMap<String, Amount>;

fn parse_list(list: Option<&ResourceList>) -> Result<Totals, QuantityError> {
    let mut out = Totals::new();
    for (name, q) in list.into_iter().flatten() {
        out.insert(name.clone(), Amount::of(q)?);
    }
    Ok(out)
}

fn add_into(into: &mut Totals, from: &Totals) {
    for (name, v) in from {
        *into.entry(name.clone()).or_default() += *v;
    }
}

fn max_into(into: &mut Totals, from: &Totals) {
    for (name, v) in from {
        let e = into.entry(name.clone()).or_insert(*v);
        if *v > *e {
            *e = *v;
        }
    }
}

/// What the pod needs at its peak: regular containers and sidecars all run together, and each
/// plain init container runs alongside the sidecars started before it.
fn aggregate(
    spec: &PodSpec,
    pick: fn(&Container) -> Option<&ResourceList>,
) -> Result<Totals, QuantityError> {
    let mut total = Totals::new();
    for c in &spec.containers {
        add_into(&mut total, &parse_list(pick(c))?);
    }
    let mut sidecars = Totals::new();
    let mut init_peak = Totals::new();
    for c in spec.init_containers.iter().flatten() {
        let own = parse_list(pick(c))?;
        let during = if is_sidecar(c) {
            add_into(&mut total, &own);
            add_into(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut combined = own;
            add_into(&mut combined, &sidecars);
            combined
        };
        max_into(&mut init_peak, &during);
    }
    max_into(&mut total, &init_peak);
    Ok(total)
}

fn container_requests(c: &Container) -> Option<&ResourceList> {
    c.resources.as_ref().and_then(|r| r.requests.as_ref())
}

fn container_limits(c: &Container) -> Option<&ResourceList> {
    c.resources.as_ref().and_then(|r| r.limits.as_ref())
}

fn apply_pod_level(
    total: &mut Totals,
    pod_level: Option<&ResourceList>,
) -> Result<(), QuantityError> {
    for (name, v) in parse_list(pod_level)? {
        if is_pod_level_resource(&name) {
            total.insert(name, v);
        }
    }
    Ok(())
}

/// Effective pod requests: containers (sidecar-aware), replaced by pod-level values where
/// given, plus the runtime-class overhead.
pub fn pod_requests(spec: &PodSpec) -> Result<Totals, QuantityError> {
    let mut total = aggregate(spec, container_requests)?;
    if pod_level_set(spec) {
        apply_pod_level(
            &mut total,
            spec.resources.as_ref().and_then(|r| r.requests.as_ref()),
        )?;
    }
    add_into(&mut total, &parse_list(spec.overhead.as_ref())?);
    Ok(total)
}

/// Effective pod limits; overhead is added only to limits that are set.
pub fn pod_limits(spec: &PodSpec) -> Result<Totals, QuantityError> {
    let mut total = aggregate(spec, container_limits)?;
    if pod_level_set(spec) {
        apply_pod_level(
            &mut total,
            spec.resources.as_ref().and_then(|r| r.limits.as_ref()),
        )?;
    }
    for (name, v) in parse_list(spec.overhead.as_ref())? {
        if let Some(existing) = total.get_mut(&name)
            && *existing != Amount::ZERO
        {
            *existing += v;
        }
    }
    Ok(total)
}

/// Whether every container (init included) sets a non-zero limit for `resource`, or the pod
/// sets one at pod level. Only then may the pod cgroup carry that limit.
pub fn limit_declared_everywhere(spec: &PodSpec, resource: &str) -> bool {
    let nonzero = |list: Option<&ResourceList>| {
        list.and_then(|l| l.get(resource))
            .and_then(|q| Amount::of(q).ok())
            .is_some_and(|v| v != Amount::ZERO)
    };
    if pod_level_set(spec) && nonzero(spec.resources.as_ref().and_then(|r| r.limits.as_ref())) {
        return true;
    }
    let inits = spec.init_containers.iter().flatten();
    spec.containers
        .iter()
        .chain(inits)
        .all(|c| nonzero(container_limits(c)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;

    fn list(items: &[(&str, &str)]) -> Option<ResourceList> {
        if items.is_empty() {
            return None;
        }
        Some(
            items
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        )
    }

    pub(crate) fn container(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            image: Some("img".into()),
            resources: Some(ResourceRequirements {
                requests: list(req),
                limits: list(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn spec(containers: Vec<Container>) -> PodSpec {
        PodSpec {
            containers,
            ..Default::default()
        }
    }

    #[test]
    fn best_effort() {
        assert_eq!(
            qos_class(&spec(vec![container("a", &[], &[])])),
            QosClass::BestEffort
        );
        // Only non-cpu/memory resources do not count.
        let c = container("a", &[("ephemeral-storage", "1Gi")], &[]);
        assert_eq!(qos_class(&spec(vec![c])), QosClass::BestEffort);
        // Zero requests do not count either.
        let c = container("a", &[("cpu", "0")], &[]);
        assert_eq!(qos_class(&spec(vec![c])), QosClass::BestEffort);
    }

    #[test]
    fn guaranteed() {
        let both = [("cpu", "500m"), ("memory", "128Mi")];
        let c = container("a", &both, &both);
        let d = container("b", &[("cpu", "0.5"), ("memory", "128Mi")], &both);
        assert_eq!(qos_class(&spec(vec![c, d])), QosClass::Guaranteed);
        // Limits without requests count as burstable until the API defaults requests from them.
        let e = container("e", &[], &both);
        assert_eq!(qos_class(&spec(vec![e])), QosClass::Burstable);
        let e = container("e", &both, &both);
        assert_eq!(qos_class(&spec(vec![e])), QosClass::Guaranteed);
    }

    #[test]
    fn burstable() {
        let both = [("cpu", "500m"), ("memory", "128Mi")];
        // Requests lower than limits.
        let c = container("a", &[("cpu", "100m"), ("memory", "128Mi")], &both);
        assert_eq!(qos_class(&spec(vec![c])), QosClass::Burstable);
        // One container without limits.
        let c = container("a", &both, &both);
        let d = container("b", &[("cpu", "100m")], &[]);
        assert_eq!(qos_class(&spec(vec![c, d])), QosClass::Burstable);
        // Only a memory limit.
        let c = container("a", &[("memory", "1Gi")], &[("memory", "1Gi")]);
        assert_eq!(qos_class(&spec(vec![c])), QosClass::Burstable);
        // An init container without limits spoils guaranteed.
        let mut s = spec(vec![container("a", &both, &both)]);
        s.init_containers = Some(vec![container("i", &[("cpu", "1")], &[])]);
        assert_eq!(qos_class(&s), QosClass::Burstable);
    }

    #[test]
    fn pod_level_resources_decide() {
        let mut s = spec(vec![container("a", &[], &[])]);
        s.resources = Some(ResourceRequirements {
            requests: list(&[("cpu", "1"), ("memory", "1Gi")]),
            limits: list(&[("cpu", "1"), ("memory", "1Gi")]),
            ..Default::default()
        });
        assert_eq!(qos_class(&s), QosClass::Guaranteed);
    }

    #[test]
    fn recorded_class_wins() {
        let mut pod = Pod {
            spec: Some(spec(vec![container("a", &[], &[])])),
            ..Default::default()
        };
        assert_eq!(pod_qos_class(&pod), QosClass::BestEffort);
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            qos_class: Some("Burstable".into()),
            ..Default::default()
        });
        assert_eq!(pod_qos_class(&pod), QosClass::Burstable);
    }

    #[test]
    fn totals_with_sidecars_and_overhead() {
        let mut s = spec(vec![
            container("a", &[("cpu", "100m")], &[("cpu", "200m")]),
            container("b", &[("cpu", "100m")], &[("cpu", "200m")]),
        ]);
        let mut sidecar = container("s", &[("cpu", "50m")], &[("cpu", "100m")]);
        sidecar.restart_policy = Some("Always".into());
        s.init_containers = Some(vec![
            sidecar,
            container("big", &[("cpu", "1")], &[("cpu", "2")]),
        ]);
        s.overhead = Some([("cpu".to_string(), Quantity("10m".into()))].into());
        let req = pod_requests(&s).unwrap();
        // max(100+100+50, 1000+50) + 10 overhead
        assert_eq!(req["cpu"].nano(), 1_060_000_000);
        let lim = pod_limits(&s).unwrap();
        // max(200+200+100, 2000+100) + 10
        assert_eq!(lim["cpu"].nano(), 2_110_000_000);
        assert!(limit_declared_everywhere(&s, "cpu"));
        assert!(!limit_declared_everywhere(&s, "memory"));
    }
}
