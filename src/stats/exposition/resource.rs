//! /metrics/resource: the node's, pods' and containers' CPU and memory from the Summary, the
//! series metrics-server and the HPA pipeline read (names, help texts and timestamps as
//! upstream's resource metrics collector).

use crate::metrics::text::{Family, Kind, Sample, encode, labels};
use crate::stats::Summary;
use crate::stats::types::{ContainerStats, CpuStats, MemoryStats, PodStats};

const CONTAINER: [&str; 3] = ["container", "pod", "namespace"];
const POD: [&str; 2] = ["pod", "namespace"];

fn family(name: &str, stability: &str, help: &str, kind: Kind) -> Family {
    Family {
        name: name.into(),
        help: format!("[{stability}] {help}"),
        kind,
        samples: Vec::new(),
    }
}

fn cpu_sample(cpu: &Option<CpuStats>, l: Vec<(String, String)>) -> Option<Sample> {
    let c = cpu.as_ref()?;
    let ns = c.usage_core_nano_seconds?;
    Some(Sample::new(l, ns as f64 / 1e9).at(c.time.unix_millis()))
}

fn memory_sample(mem: &Option<MemoryStats>, l: Vec<(String, String)>) -> Option<Sample> {
    let m = mem.as_ref()?;
    Some(Sample::new(l, m.working_set_bytes? as f64).at(m.time.unix_millis()))
}

struct Families {
    node_cpu: Family,
    node_mem: Family,
    start: Family,
    c_cpu: Family,
    c_mem: Family,
    p_cpu: Family,
    p_mem: Family,
}

impl Families {
    fn new() -> Self {
        Families {
            node_cpu: family(
                "node_cpu_usage_seconds_total",
                "STABLE",
                "Cumulative cpu time consumed by the node in core-seconds",
                Kind::Counter,
            ),
            node_mem: family(
                "node_memory_working_set_bytes",
                "STABLE",
                "Current working set of the node in bytes",
                Kind::Gauge,
            ),
            start: family(
                "container_start_time_seconds",
                "STABLE",
                "Start time of the container since unix epoch in seconds",
                Kind::Gauge,
            ),
            c_cpu: family(
                "container_cpu_usage_seconds_total",
                "STABLE",
                "Cumulative cpu time consumed by the container in core-seconds",
                Kind::Counter,
            ),
            c_mem: family(
                "container_memory_working_set_bytes",
                "STABLE",
                "Current working set of the container in bytes",
                Kind::Gauge,
            ),
            p_cpu: family(
                "pod_cpu_usage_seconds_total",
                "STABLE",
                "Cumulative cpu time consumed by the pod in core-seconds",
                Kind::Counter,
            ),
            p_mem: family(
                "pod_memory_working_set_bytes",
                "STABLE",
                "Current working set of the pod in bytes",
                Kind::Gauge,
            ),
        }
    }

    fn container(&mut self, pod: &PodStats, c: &ContainerStats) {
        let l = || {
            labels(
                CONTAINER,
                [&c.name, &pod.pod_ref.name, &pod.pod_ref.namespace],
            )
        };
        if let Some(s) = c.start_time.unix_seconds().filter(|s| *s > 0.0) {
            self.start.samples.push(Sample::new(l(), s));
        }
        self.c_cpu.samples.extend(cpu_sample(&c.cpu, l()));
        self.c_mem.samples.extend(memory_sample(&c.memory, l()));
    }

    fn pod(&mut self, pod: &PodStats) {
        let l = || labels(POD, [&pod.pod_ref.name, &pod.pod_ref.namespace]);
        self.p_cpu.samples.extend(cpu_sample(&pod.cpu, l()));
        self.p_mem.samples.extend(memory_sample(&pod.memory, l()));
    }

    fn into_vec(self) -> Vec<Family> {
        vec![
            self.node_cpu,
            self.node_mem,
            self.start,
            self.c_cpu,
            self.c_mem,
            self.p_cpu,
            self.p_mem,
        ]
    }
}

fn scrape_error(failed: bool) -> Vec<Family> {
    let v = if failed { 1.0 } else { 0.0 };
    let help = "1 if there was an error while getting container metrics, 0 otherwise";
    let mut old = family(
        "scrape_error",
        "ALPHA",
        &format!("(Deprecated since 1.29.0) {help}"),
        Kind::Gauge,
    );
    old.samples.push(Sample::new(vec![], v));
    let mut new = family("resource_scrape_error", "STABLE", help, Kind::Gauge);
    new.samples.push(Sample::new(vec![], v));
    vec![old, new]
}

/// The exposition for a CPU-and-memory Summary, or only the error gauges when there is none.
pub fn render(summary: Option<&Summary>) -> String {
    let Some(s) = summary else {
        return encode(scrape_error(true));
    };
    let mut f = Families::new();
    f.node_cpu.samples.extend(cpu_sample(&s.node.cpu, vec![]));
    f.node_mem
        .samples
        .extend(memory_sample(&s.node.memory, vec![]));
    for pod in &s.pods {
        for c in &pod.containers {
            f.container(pod, c);
        }
        f.pod(pod);
    }
    let mut all = f.into_vec();
    all.extend(scrape_error(false));
    encode(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::types::{NodeStats, PodReference, Time};
    use std::time::{Duration, UNIX_EPOCH};

    fn at(ms: u64) -> Time {
        Time::at(UNIX_EPOCH + Duration::from_millis(ms))
    }

    fn cpu(ns: u64) -> Option<CpuStats> {
        Some(CpuStats {
            time: at(1_700_000_000_500),
            usage_nano_cores: None,
            usage_core_nano_seconds: Some(ns),
            psi: None,
        })
    }

    fn mem(ws: u64) -> Option<MemoryStats> {
        Some(MemoryStats {
            time: at(1_700_000_000_500),
            working_set_bytes: Some(ws),
            ..Default::default()
        })
    }

    #[test]
    fn series_names_labels_and_timestamps() {
        let s = Summary {
            node: NodeStats {
                cpu: cpu(2_500_000_000),
                memory: mem(1_000),
                ..Default::default()
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "web".into(),
                    namespace: "default".into(),
                    uid: "u".into(),
                },
                containers: vec![ContainerStats {
                    name: "app".into(),
                    start_time: at(1_600_000_000_000),
                    cpu: cpu(500_000_000),
                    memory: mem(2048),
                    ..Default::default()
                }],
                cpu: cpu(600_000_000),
                memory: mem(4096),
                ..Default::default()
            }],
        };
        let text = render(Some(&s));
        for line in [
            "# TYPE node_cpu_usage_seconds_total counter",
            "node_cpu_usage_seconds_total 2.5 1700000000500",
            "# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes",
            "node_memory_working_set_bytes 1000 1700000000500",
            "container_start_time_seconds{container=\"app\",namespace=\"default\",pod=\"web\"} 1.6e+09",
            "container_cpu_usage_seconds_total{container=\"app\",namespace=\"default\",pod=\"web\"} 0.5 1700000000500",
            "# TYPE container_memory_working_set_bytes gauge",
            "container_memory_working_set_bytes{container=\"app\",namespace=\"default\",pod=\"web\"} 2048 1700000000500",
            "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 0.6 1700000000500",
            "pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 4096 1700000000500",
            "# HELP scrape_error [ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise",
            "scrape_error 0",
            "resource_scrape_error 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        let failed = render(None);
        assert!(failed.contains("\nscrape_error 1\n"), "{failed}");
        assert!(!failed.contains("node_cpu"));
    }
}
