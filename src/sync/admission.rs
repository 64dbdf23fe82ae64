//! Pod admission: before the kubelet runs a pod from the API server, it checks that the pod
//! fits next to the pods already admitted (upstream's predicate admit handler). A pod that does
//! not fit is failed with upstream's reason and never started.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use crate::pod::qos::pod_requests;

/// What the node offers pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allocatable {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub pods: i64,
    /// Bytes of each huge page size ("hugepages-2Mi"); a size the node lacks offers none.
    pub hugepages: BTreeMap<String, i64>,
}

impl Allocatable {
    /// From the node's allocatable resources (whole millicores, bytes and pods).
    pub fn from_resources(resources: &crate::cm::allocatable::Resources) -> Self {
        let get = |name: &str, scale: i128| {
            resources
                .get(name)
                .map_or(0, |a| i64::try_from(a.nano() / scale).unwrap_or(i64::MAX))
        };
        Allocatable {
            cpu_millis: get("cpu", 1_000_000),
            memory_bytes: get("memory", crate::quantity::NANO),
            pods: get("pods", crate::quantity::NANO),
            hugepages: resources
                .keys()
                .filter(|name| name.starts_with(HUGEPAGES_PREFIX))
                .map(|name| (name.clone(), get(name, crate::quantity::NANO)))
                .collect(),
        }
    }
}

const HUGEPAGES_PREFIX: &str = "hugepages-";

/// Bytes of each huge page size the pod requests.
fn hugepage_requests(pod: &Pod) -> BTreeMap<String, i64> {
    let totals = pod
        .spec
        .as_ref()
        .and_then(|s| pod_requests(s).ok())
        .unwrap_or_default();
    totals
        .iter()
        .filter(|(name, _)| name.starts_with(HUGEPAGES_PREFIX))
        .map(|(name, a)| {
            let bytes = i64::try_from(a.nano() / crate::quantity::NANO).unwrap_or(i64::MAX);
            (name.clone(), bytes)
        })
        .filter(|(_, bytes)| *bytes > 0)
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

pub(crate) fn requests(pod: &Pod) -> (i64, i64) {
    let totals = pod
        .spec
        .as_ref()
        .and_then(|s| pod_requests(s).ok())
        .unwrap_or_default();
    let amount = |name: &str| totals.get(name).copied().unwrap_or_default().nano();
    let cpu = amount("cpu") / 1_000_000;
    let mem = amount("memory") / crate::quantity::NANO;
    (cpu as i64, mem as i64)
}

fn host_ports(pod: &Pod) -> Vec<(String, String, i32)> {
    pod.spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|h| *h > 0)?;
            Some((
                p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                p.host_ip.clone().unwrap_or_default(),
                port,
            ))
        })
        .collect()
}

/// `requiredDuringSchedulingIgnoredDuringExecution` (`pod::node_selector` says how it matches;
/// the node's name is its hostname label here).
fn required_affinity_matches(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    let node_name = labels.get("kubernetes.io/hostname").map(String::as_str);
    crate::pod::node_selector::matches(required, labels, node_name)
}

fn reject(reason: &str, message: String) -> Result<(), Rejection> {
    Err(Rejection {
        reason: reason.to_string(),
        message,
    })
}

fn short(resource: &str, requested: i64, used: i64, capacity: i64) -> String {
    format!(
        "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
    )
}

/// The label and the field that tie a pod to an operating system.
const OS_LABEL: &str = "kubernetes.io/os";

/// A pod for another operating system is refused before anything else, static pods included
/// (upstream checks these first, as no preemption could help). Upstream compares the pod's
/// `kubernetes.io/os` *label* (not its nodeSelector) with the node's OS, and `spec.os.name`.
pub fn admit_os(pod: &Pod) -> Result<(), Rejection> {
    let node_os = std::env::consts::OS;
    let label = pod.metadata.labels.as_ref().and_then(|l| l.get(OS_LABEL));
    if label.is_some_and(|os| os != node_os) {
        return reject(
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label".into(),
        );
    }
    let field = pod
        .spec
        .as_ref()
        .and_then(|s| s.os.as_ref())
        .map(|o| o.name.as_str());
    if field.is_some_and(|os| os != node_os) {
        return reject(
            "PodOSNotSupported",
            "Failed to admit pod as the OS field doesn't match node OS".into(),
        );
    }
    Ok(())
}

/// While the node shuts down no new pod is admitted (upstream's shutdown admit handler).
pub fn admit_during_shutdown(shutting_down: bool) -> Result<(), Rejection> {
    if shutting_down {
        return reject(
            "NodeShutdown",
            "Pod was rejected as the node is shutting down.".into(),
        );
    }
    Ok(())
}

/// Under node pressure only critical pods are admitted, except that memory pressure alone
/// still admits pods that request memory (not BestEffort) and BestEffort pods tolerating the
/// memory-pressure taint (upstream's eviction admit handler).
pub fn admit_under_pressure(
    pod: &Pod,
    pressure: &crate::eviction::Pressure,
) -> Result<(), Rejection> {
    let names: Vec<&str> = [
        (pressure.memory, "MemoryPressure"),
        (pressure.disk, "DiskPressure"),
        (pressure.pid, "PIDPressure"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if names.is_empty() || crate::eviction::is_critical(pod) {
        return Ok(());
    }
    if names == ["MemoryPressure"] {
        let spec = pod.spec.clone().unwrap_or_default();
        let best_effort =
            crate::pod::qos::qos_class(&spec) == crate::pod::qos::QosClass::BestEffort;
        let tolerates = spec.tolerations.iter().flatten().any(|t| {
            let key_ok = match t.key.as_deref() {
                None | Some("") => t.operator.as_deref() == Some("Exists"),
                Some(k) => k == MEMORY_PRESSURE_TAINT,
            };
            let effect_ok = matches!(t.effect.as_deref(), None | Some("") | Some("NoSchedule"));
            let value_ok = t.operator.as_deref() == Some("Exists")
                || t.value.as_deref().unwrap_or_default().is_empty();
            key_ok && effect_ok && value_ok
        });
        if !best_effort || tolerates {
            return Ok(());
        }
    }
    reject(
        crate::eviction::rank::REASON,
        format!("The node had condition: [{}]. ", names.join(" ")),
    )
}

/// The taint the node lifecycle controller puts on a node with MemoryPressure.
const MEMORY_PRESSURE_TAINT: &str = "node.kubernetes.io/memory-pressure";

/// The reason of a pod the node's labels do not select.
pub const NODE_AFFINITY: &str = "NodeAffinity";

/// Checks `pod` against the node and the pods already admitted.
pub fn admit<'a>(
    pod: &Pod,
    admitted: impl Iterator<Item = &'a Pod>,
    node: &Allocatable,
    node_labels: &BTreeMap<String, String>,
) -> Result<(), Rejection> {
    let spec = pod.spec.clone().unwrap_or_default();
    let selector_ok = spec
        .node_selector
        .as_ref()
        .is_none_or(|sel| sel.iter().all(|(k, v)| node_labels.get(k) == Some(v)));
    if !selector_ok || !required_affinity_matches(&spec, node_labels) {
        return reject(NODE_AFFINITY, "Predicate NodeAffinity failed".into());
    }
    let (mut used_cpu, mut used_mem, mut count) = (0i64, 0i64, 0i64);
    let mut used_ports: HashSet<(String, String, i32)> = HashSet::new();
    let wanted_hugepages = hugepage_requests(pod);
    let mut used_hugepages: BTreeMap<String, i64> = BTreeMap::new();
    for other in admitted {
        let (c, m) = requests(other);
        used_cpu += c;
        used_mem += m;
        count += 1;
        used_ports.extend(host_ports(other));
        if !wanted_hugepages.is_empty() {
            for (name, bytes) in hugepage_requests(other) {
                *used_hugepages.entry(name).or_default() += bytes;
            }
        }
    }
    let conflict = host_ports(pod).into_iter().any(|(proto, ip, port)| {
        used_ports.iter().any(|(p2, ip2, port2)| {
            *p2 == proto && *port2 == port && (ip.is_empty() || ip2.is_empty() || *ip2 == ip)
        })
    });
    if conflict {
        return reject("NodePorts", "Predicate NodePorts failed".into());
    }
    if count + 1 > node.pods {
        return reject("OutOfpods", short("pods", 1, count, node.pods));
    }
    let (cpu, mem) = requests(pod);
    if cpu > 0 && used_cpu + cpu > node.cpu_millis {
        return reject("OutOfcpu", short("cpu", cpu, used_cpu, node.cpu_millis));
    }
    if mem > 0 && used_mem + mem > node.memory_bytes {
        return reject(
            "OutOfmemory",
            short("memory", mem, used_mem, node.memory_bytes),
        );
    }
    // Like upstream's fit check, every other resource after cpu and memory, in name order.
    for (name, wanted) in &wanted_hugepages {
        let used = used_hugepages.get(name).copied().unwrap_or(0);
        let capacity = node.hugepages.get(name).copied().unwrap_or(0);
        if used.saturating_add(*wanted) > capacity {
            return reject(
                &format!("OutOf{name}"),
                short(name, *wanted, used, capacity),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(cpu: &str, mem: &str, host_port: Option<i32>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(BTreeMap::from([
                            ("cpu".to_string(), Quantity(cpu.into())),
                            ("memory".to_string(), Quantity(mem.into())),
                        ])),
                        ..Default::default()
                    }),
                    ports: host_port.map(|p| {
                        vec![ContainerPort {
                            container_port: 80,
                            host_port: Some(p),
                            ..Default::default()
                        }]
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
            cpu_millis: 2000,
            memory_bytes: 1 << 30,
            pods: 2,
            ..Default::default()
        }
    }

    #[test]
    fn huge_pages_must_fit() {
        let labels = BTreeMap::new();
        let huge = |amount: &str| {
            let mut p = pod("1m", "1Mi", None);
            let c = &mut p.spec.as_mut().unwrap().containers[0];
            let r = c.resources.as_mut().unwrap();
            let both = BTreeMap::from([
                ("memory".to_string(), Quantity("1Mi".into())),
                ("hugepages-2Mi".to_string(), Quantity(amount.into())),
            ]);
            (r.requests, r.limits) = (Some(both.clone()), Some(both));
            p
        };
        // A node without huge pages refuses them, as upstream does.
        let r = admit(&huge("4Mi"), [].into_iter(), &node(), &labels).unwrap_err();
        assert_eq!(r.reason, "OutOfhugepages-2Mi");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: hugepages-2Mi, requested: 4194304, used: 0, capacity: 0"
        );
        let with = Allocatable {
            pods: 10,
            hugepages: BTreeMap::from([("hugepages-2Mi".to_string(), 8 << 20)]),
            ..node()
        };
        let first = huge("4Mi");
        assert!(admit(&first, [].into_iter(), &with, &labels).is_ok());
        assert!(admit(&huge("4Mi"), [&first].into_iter(), &with, &labels).is_ok());
        let r = admit(&huge("6Mi"), [&first].into_iter(), &with, &labels).unwrap_err();
        assert_eq!(r.reason, "OutOfhugepages-2Mi");
        // Pods without huge pages are not held back by them.
        assert!(
            admit(
                &pod("1m", "1Mi", None),
                [&first].into_iter(),
                &with,
                &labels
            )
            .is_ok()
        );
    }

    #[test]
    fn resources_pods_ports_and_selectors() {
        let labels = BTreeMap::from([("disk".to_string(), "ssd".to_string())]);
        let small = pod("500m", "100Mi", Some(8080));
        assert!(admit(&small, [].into_iter(), &node(), &labels).is_ok());
        let r = admit(
            &pod("1500m", "1Mi", None),
            [&small, &small].into_iter(),
            &node(),
            &labels,
        );
        assert_eq!(r.unwrap_err().reason, "OutOfpods");
        let r = admit(
            &pod("1600m", "1Mi", None),
            [&small].into_iter(),
            &node(),
            &labels,
        )
        .unwrap_err();
        assert_eq!(r.reason, "OutOfcpu");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: cpu, requested: 1600, used: 500, capacity: 2000"
        );
        let r = admit(&pod("1m", "2Gi", None), [].into_iter(), &node(), &labels).unwrap_err();
        assert_eq!(r.reason, "OutOfmemory");
        let r = admit(
            &pod("1m", "1Mi", Some(8080)),
            [&small].into_iter(),
            &node(),
            &labels,
        );
        assert_eq!(r.unwrap_err().reason, "NodePorts");
        let mut picky = pod("1m", "1Mi", None);
        picky.spec.as_mut().unwrap().node_selector =
            Some(BTreeMap::from([("disk".to_string(), "hdd".to_string())]));
        assert_eq!(
            admit(&picky, [].into_iter(), &node(), &labels)
                .unwrap_err()
                .reason,
            "NodeAffinity"
        );
    }

    #[test]
    fn pressure_admits_only_what_upstream_admits() {
        use crate::eviction::Pressure;
        let memory = Pressure {
            memory: true,
            ..Default::default()
        };
        let best_effort = Pod {
            spec: Some(PodSpec {
                containers: vec![Container::default()],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(admit_under_pressure(&best_effort, &Pressure::default()).is_ok());
        let r = admit_under_pressure(&best_effort, &memory).unwrap_err();
        assert_eq!(r.reason, "Evicted");
        assert_eq!(r.message, "The node had condition: [MemoryPressure]. ");
        assert!(admit_under_pressure(&pod("1m", "1Mi", None), &memory).is_ok());
        let mut tolerant = best_effort.clone();
        tolerant.spec.as_mut().unwrap().tolerations =
            Some(vec![k8s_openapi::api::core::v1::Toleration {
                key: Some(MEMORY_PRESSURE_TAINT.into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }]);
        assert!(admit_under_pressure(&tolerant, &memory).is_ok());
        let disk = Pressure {
            disk: true,
            memory: true,
            ..Default::default()
        };
        let r = admit_under_pressure(&pod("1m", "1Mi", None), &disk).unwrap_err();
        assert_eq!(
            r.message,
            "The node had condition: [MemoryPressure DiskPressure]. "
        );
    }

    #[test]
    fn another_os_is_refused_by_field_or_label() {
        use k8s_openapi::api::core::v1::PodOS;
        let mut p = pod("1m", "1Mi", None);
        assert!(admit_os(&p).is_ok());
        p.spec.as_mut().unwrap().os = Some(PodOS {
            name: "linux".into(),
        });
        assert!(admit_os(&p).is_ok());
        p.spec.as_mut().unwrap().os = Some(PodOS {
            name: "windows".into(),
        });
        let r = admit_os(&p).unwrap_err();
        assert_eq!(r.reason, "PodOSNotSupported");
        assert_eq!(
            r.message,
            "Failed to admit pod as the OS field doesn't match node OS"
        );
        p.metadata.labels = Some(BTreeMap::from([(OS_LABEL.into(), "windows".into())]));
        let r = admit_os(&p).unwrap_err();
        assert_eq!(r.reason, "PodOSSelectorNodeLabelDoesNotMatch");
    }

    #[test]
    fn overhead_counts_towards_the_fit() {
        let mut p = pod("1500m", "1Mi", None);
        assert!(admit(&p, [].into_iter(), &node(), &BTreeMap::new()).is_ok());
        p.spec.as_mut().unwrap().overhead = Some(BTreeMap::from([(
            "cpu".to_string(),
            Quantity("600m".into()),
        )]));
        let r = admit(&p, [].into_iter(), &node(), &BTreeMap::new()).unwrap_err();
        assert_eq!(r.reason, "OutOfcpu");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: cpu, requested: 2100, used: 0, capacity: 2000"
        );
    }

    #[test]
    fn nothing_is_admitted_while_the_node_shuts_down() {
        assert!(admit_during_shutdown(false).is_ok());
        let r = admit_during_shutdown(true).unwrap_err();
        assert_eq!(r.reason, "NodeShutdown");
        assert_eq!(r.message, "Pod was rejected as the node is shutting down.");
    }
}
