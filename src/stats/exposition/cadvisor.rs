//! /metrics/cadvisor: the container_* series dashboards built on cadvisor read, derived from a
//! full collection. Labels are cadvisor's (`container`, `id` = cgroup, `image`, `name` =
//! runtime container ID, `namespace`, `pod`); the root cgroup `/` carries the node and each
//! pod cgroup the pod totals and network, with empty container labels, as on upstream nodes.

use std::collections::HashMap;

use crate::metrics::text::{Family, Kind, Sample, encode};
use crate::stats::types::{CpuStats, IoStats, MemoryStats, NetworkStats, PsiStats, Time};
use crate::stats::{Collected, ContainerDetail};

/// container, id, image, name, namespace, pod.
#[derive(Clone, Default)]
struct Who {
    container: String,
    id: String,
    image: String,
    name: String,
    namespace: String,
    pod: String,
}

impl Who {
    fn pairs(&self) -> Vec<(String, String)> {
        [
            ("container", &self.container),
            ("id", &self.id),
            ("image", &self.image),
            ("name", &self.name),
            ("namespace", &self.namespace),
            ("pod", &self.pod),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

struct Out {
    families: HashMap<&'static str, Family>,
}

const FAMILIES: &[(&str, &str, Kind)] = &[
    (
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed in seconds.",
        Kind::Counter,
    ),
    (
        "container_memory_usage_bytes",
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
        Kind::Gauge,
    ),
    (
        "container_memory_working_set_bytes",
        "Current working set in bytes.",
        Kind::Gauge,
    ),
    ("container_memory_rss", "Size of RSS in bytes.", Kind::Gauge),
    (
        "container_network_receive_bytes_total",
        "Cumulative count of bytes received",
        Kind::Counter,
    ),
    (
        "container_network_receive_errors_total",
        "Cumulative count of errors encountered while receiving",
        Kind::Counter,
    ),
    (
        "container_network_transmit_bytes_total",
        "Cumulative count of bytes transmitted",
        Kind::Counter,
    ),
    (
        "container_network_transmit_errors_total",
        "Cumulative count of errors encountered while transmitting",
        Kind::Counter,
    ),
    (
        "container_fs_usage_bytes",
        "Number of bytes that are consumed by the container on this filesystem.",
        Kind::Gauge,
    ),
    (
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds.",
        Kind::Gauge,
    ),
    (
        CPU_PRESSURE.0,
        "Total time duration no tasks in the container could make progress due to CPU congestion.",
        Kind::Counter,
    ),
    (
        CPU_PRESSURE.1,
        "Total time duration tasks in the container have waited due to CPU congestion.",
        Kind::Counter,
    ),
    (
        MEMORY_PRESSURE.0,
        "Total time duration no tasks in the container could make progress due to memory congestion.",
        Kind::Counter,
    ),
    (
        MEMORY_PRESSURE.1,
        "Total time duration tasks in the container have waited due to memory congestion.",
        Kind::Counter,
    ),
    (
        IO_PRESSURE.0,
        "Total time duration no tasks in the container could make progress due to IO congestion.",
        Kind::Counter,
    ),
    (
        IO_PRESSURE.1,
        "Total time duration tasks in the container have waited due to IO congestion.",
        Kind::Counter,
    ),
];

/// The stalled (`full`) and waiting (`some`) families of each resource's pressure.
type PressureFamilies = (&'static str, &'static str);
const CPU_PRESSURE: PressureFamilies = (
    "container_pressure_cpu_stalled_seconds_total",
    "container_pressure_cpu_waiting_seconds_total",
);
const MEMORY_PRESSURE: PressureFamilies = (
    "container_pressure_memory_stalled_seconds_total",
    "container_pressure_memory_waiting_seconds_total",
);
const IO_PRESSURE: PressureFamilies = (
    "container_pressure_io_stalled_seconds_total",
    "container_pressure_io_waiting_seconds_total",
);

impl Out {
    fn new() -> Self {
        let families = FAMILIES
            .iter()
            .map(|(name, help, kind)| {
                let f = Family {
                    name: name.to_string(),
                    help: help.to_string(),
                    kind: *kind,
                    samples: Vec::new(),
                };
                (*name, f)
            })
            .collect();
        Out { families }
    }

    fn push(
        &mut self,
        family: &'static str,
        labels: Vec<(String, String)>,
        v: Option<f64>,
        t: &Time,
    ) {
        if let (Some(v), Some(f)) = (v, self.families.get_mut(family)) {
            f.samples.push(Sample::new(labels, v).at(t.unix_millis()));
        }
    }

    /// The pressure counters, in seconds from the kernel's microseconds.
    fn pressure(
        &mut self,
        who: &Who,
        families: PressureFamilies,
        psi: &Option<PsiStats>,
        t: &Time,
    ) {
        let Some(p) = psi else { return };
        let (stalled, waiting) = families;
        let secs = |us: u64| Some(us as f64 / 1e6);
        self.push(stalled, who.pairs(), secs(p.full.total), t);
        self.push(waiting, who.pairs(), secs(p.some.total), t);
    }

    fn io(&mut self, who: &Who, io: &Option<IoStats>) {
        if let Some(io) = io {
            self.pressure(who, IO_PRESSURE, &io.psi, &io.time);
        }
    }

    fn cpu_memory(&mut self, who: &Who, cpu: &Option<CpuStats>, mem: &Option<MemoryStats>) {
        if let Some(c) = cpu {
            let mut l = who.pairs();
            l.push(("cpu".into(), "total".into()));
            let secs = c.usage_core_nano_seconds.map(|ns| ns as f64 / 1e9);
            self.push("container_cpu_usage_seconds_total", l, secs, &c.time);
            self.pressure(who, CPU_PRESSURE, &c.psi, &c.time);
        }
        if let Some(m) = mem {
            self.pressure(who, MEMORY_PRESSURE, &m.psi, &m.time);
            let f = |v: Option<u64>| v.map(|v| v as f64);
            self.push(
                "container_memory_usage_bytes",
                who.pairs(),
                f(m.usage_bytes),
                &m.time,
            );
            self.push(
                "container_memory_working_set_bytes",
                who.pairs(),
                f(m.working_set_bytes),
                &m.time,
            );
            self.push("container_memory_rss", who.pairs(), f(m.rss_bytes), &m.time);
        }
    }

    fn network(&mut self, who: &Who, net: &NetworkStats) {
        for i in &net.interfaces {
            let mut l = who.pairs();
            l.push(("interface".into(), i.name.clone()));
            let f = |v: Option<u64>| v.map(|v| v as f64);
            self.push(
                "container_network_receive_bytes_total",
                l.clone(),
                f(i.rx_bytes),
                &net.time,
            );
            self.push(
                "container_network_receive_errors_total",
                l.clone(),
                f(i.rx_errors),
                &net.time,
            );
            self.push(
                "container_network_transmit_bytes_total",
                l.clone(),
                f(i.tx_bytes),
                &net.time,
            );
            self.push(
                "container_network_transmit_errors_total",
                l,
                f(i.tx_errors),
                &net.time,
            );
        }
    }
}

fn container_who(d: Option<&ContainerDetail>, container: &str, pod: &Who) -> Who {
    Who {
        container: container.to_string(),
        id: d.and_then(|d| d.cgroup.clone()).unwrap_or_default(),
        image: d.map(|d| d.image.clone()).unwrap_or_default(),
        name: d.map(|d| d.id.clone()).unwrap_or_default(),
        ..pod.clone()
    }
}

pub fn render(c: &Collected) -> String {
    let mut out = Out::new();
    let node = &c.summary.node;
    let root = Who {
        id: "/".into(),
        ..Default::default()
    };
    out.cpu_memory(&root, &node.cpu, &node.memory);
    out.io(&root, &node.io);
    if let Some(net) = &node.network {
        out.network(&root, net);
    }
    for pod in &c.summary.pods {
        let uid = &pod.pod_ref.uid;
        let pod_who = Who {
            id: c.pod_cgroups.get(uid).cloned().unwrap_or_default(),
            namespace: pod.pod_ref.namespace.clone(),
            pod: pod.pod_ref.name.clone(),
            ..Default::default()
        };
        out.cpu_memory(&pod_who, &pod.cpu, &pod.memory);
        out.io(&pod_who, &pod.io);
        if let Some(net) = &pod.network {
            out.network(&pod_who, net);
        }
        for cs in &pod.containers {
            let d = c
                .containers
                .iter()
                .find(|d| d.pod_uid == *uid && d.name == cs.name);
            let who = container_who(d, &cs.name, &pod_who);
            out.cpu_memory(&who, &cs.cpu, &cs.memory);
            out.io(&who, &cs.io);
            if let Some(s) = cs.start_time.unix_seconds() {
                out.push(
                    "container_start_time_seconds",
                    who.pairs(),
                    Some(s),
                    &Time::default(),
                );
            }
            if let Some(r) = &cs.rootfs {
                let mut l = who.pairs();
                l.push((
                    "device".into(),
                    d.and_then(|d| d.rootfs_mount.clone()).unwrap_or_default(),
                ));
                out.push(
                    "container_fs_usage_bytes",
                    l,
                    r.used_bytes.map(|v| v as f64),
                    &r.time,
                );
            }
        }
    }
    encode(out.families.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::types::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn container_pod_and_root_series() {
        let t = Time::at(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let mem = Some(MemoryStats {
            time: t,
            usage_bytes: Some(3000),
            working_set_bytes: Some(2000),
            rss_bytes: Some(1000),
            ..Default::default()
        });
        let cpu = Some(CpuStats {
            time: t,
            usage_nano_cores: None,
            usage_core_nano_seconds: Some(1_500_000_000),
            psi: None,
        });
        let psi = |full, some| {
            let data = |total| PsiData {
                total,
                ..Default::default()
            };
            Some(PsiStats {
                full: data(full),
                some: data(some),
            })
        };
        let container_cpu = cpu.clone().map(|c| CpuStats {
            psi: psi(2_000_000, 5_000_000),
            ..c
        });
        let container_memory = mem.clone().map(|m| MemoryStats {
            psi: psi(250_000, 1_000_000),
            ..m
        });
        let collected = Collected {
            summary: Summary {
                node: NodeStats {
                    cpu: cpu.clone(),
                    memory: mem.clone(),
                    ..Default::default()
                },
                pods: vec![PodStats {
                    pod_ref: PodReference {
                        name: "web".into(),
                        namespace: "ns".into(),
                        uid: "u1".into(),
                    },
                    containers: vec![ContainerStats {
                        name: "app".into(),
                        start_time: t,
                        cpu: container_cpu,
                        memory: container_memory,
                        io: Some(IoStats {
                            time: t,
                            psi: psi(0, 1_500),
                        }),
                        rootfs: Some(FsStats {
                            time: t,
                            used_bytes: Some(4096),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    memory: mem.clone(),
                    network: Some(NetworkStats {
                        time: t,
                        default: InterfaceStats::default(),
                        interfaces: vec![InterfaceStats {
                            name: "eth0".into(),
                            rx_bytes: Some(10),
                            tx_bytes: Some(20),
                            rx_errors: Some(0),
                            tx_errors: Some(0),
                        }],
                    }),
                    ..Default::default()
                }],
            },
            containers: vec![ContainerDetail {
                pod_uid: "u1".into(),
                name: "app".into(),
                id: "c1".into(),
                image: "busybox:1.36".into(),
                cgroup: Some("/kubepods/podu1/c1".into()),
                rootfs_mount: Some("/var/lib/containerd/snap".into()),
            }],
            pod_cgroups: HashMap::from([("u1".to_string(), "/kubepods/podu1".to_string())]),
        };
        let text = render(&collected);
        let ts = " 1700000000000";
        let app = "container=\"app\",id=\"/kubepods/podu1/c1\",image=\"busybox:1.36\",name=\"c1\",namespace=\"ns\",pod=\"web\"";
        for line in [
            format!("container_cpu_usage_seconds_total{{container=\"\",cpu=\"total\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}} 1.5{ts}"),
            format!("container_cpu_usage_seconds_total{{container=\"app\",cpu=\"total\",id=\"/kubepods/podu1/c1\",image=\"busybox:1.36\",name=\"c1\",namespace=\"ns\",pod=\"web\"}} 1.5{ts}"),
            format!("container_memory_working_set_bytes{{container=\"app\",id=\"/kubepods/podu1/c1\",image=\"busybox:1.36\",name=\"c1\",namespace=\"ns\",pod=\"web\"}} 2000{ts}"),
            format!("container_memory_usage_bytes{{container=\"\",id=\"/kubepods/podu1\",image=\"\",name=\"\",namespace=\"ns\",pod=\"web\"}} 3000{ts}"),
            format!("container_memory_rss{{container=\"\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}} 1000{ts}"),
            format!("container_network_receive_bytes_total{{container=\"\",id=\"/kubepods/podu1\",image=\"\",interface=\"eth0\",name=\"\",namespace=\"ns\",pod=\"web\"}} 10{ts}"),
            format!("container_network_transmit_bytes_total{{container=\"\",id=\"/kubepods/podu1\",image=\"\",interface=\"eth0\",name=\"\",namespace=\"ns\",pod=\"web\"}} 20{ts}"),
            format!("container_fs_usage_bytes{{container=\"app\",device=\"/var/lib/containerd/snap\",id=\"/kubepods/podu1/c1\",image=\"busybox:1.36\",name=\"c1\",namespace=\"ns\",pod=\"web\"}} 4096{ts}"),
            "container_start_time_seconds{container=\"app\",id=\"/kubepods/podu1/c1\",image=\"busybox:1.36\",name=\"c1\",namespace=\"ns\",pod=\"web\"} 1.7e+09".to_string(),
            "# TYPE container_network_receive_bytes_total counter".to_string(),
            format!("container_pressure_cpu_stalled_seconds_total{{{app}}} 2{ts}"),
            format!("container_pressure_cpu_waiting_seconds_total{{{app}}} 5{ts}"),
            format!("container_pressure_memory_stalled_seconds_total{{{app}}} 0.25{ts}"),
            format!("container_pressure_memory_waiting_seconds_total{{{app}}} 1{ts}"),
            format!("container_pressure_io_stalled_seconds_total{{{app}}} 0{ts}"),
            format!("container_pressure_io_waiting_seconds_total{{{app}}} 0.0015{ts}"),
            "# TYPE container_pressure_io_waiting_seconds_total counter".to_string(),
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\nin:\n{text}");
        }
        // Pressure only where the kernel gave it: not for the node or the pod here.
        assert_eq!(
            text.matches("container_pressure_cpu_waiting_seconds_total{")
                .count(),
            1
        );
        // The pod has no CPU reading, so no pod-level CPU series.
        assert!(!text.contains(
            "container_cpu_usage_seconds_total{container=\"\",cpu=\"total\",id=\"/kubepods/podu1\""
        ));
    }
}
