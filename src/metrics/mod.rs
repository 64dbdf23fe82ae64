//! Prometheus metrics: a process-wide registry of the kubelet_* families (like upstream's
//! legacyregistry, so instrumented code needs no handle passed around) and the text
//! exposition of /metrics and /metrics/probes. It imports nothing of the crate: the process_*
//! families, /metrics/resource and /metrics/cadvisor are rendered beside the statistics, in
//! `stats::exposition`.

mod kubelet;
pub mod registry;
pub mod text;

use std::sync::OnceLock;

pub use kubelet::KubeletMetrics;

/// The kubelet's metrics, created on first use.
pub fn kubelet() -> &'static KubeletMetrics {
    static METRICS: OnceLock<KubeletMetrics> = OnceLock::new();
    METRICS.get_or_init(KubeletMetrics::new)
}

/// The /metrics exposition: the kubelet families, then `extra` (the process basics).
pub fn render(extra: impl IntoIterator<Item = text::Family>) -> String {
    let mut families = kubelet().families();
    families.extend(extra);
    text::encode(families)
}

/// `prober_probe_total`: each probe run by type and result, per container; a container's
/// series go when its probe worker stops.
pub fn probes() -> &'static registry::Scalar {
    static PROBES: OnceLock<registry::Scalar> = OnceLock::new();
    PROBES.get_or_init(|| {
        registry::Scalar::counter(registry::Opts {
            name: "prober_probe_total",
            help: "Cumulative number of a liveness, readiness or startup probe for a container by result.",
            stability: "ALPHA",
            labels: &[
                "probe_type",
                "result",
                "container",
                "pod",
                "namespace",
                "pod_uid",
            ],
        })
    })
}

/// /metrics/probes (its header even before the first probe, as upstream serves it).
pub fn render_probes() -> String {
    let family = probes().family();
    if family.samples.is_empty() {
        let mut out = String::new();
        text::write_header(&mut out, &family.name, &family.help, family.kind);
        return out;
    }
    text::encode(vec![family])
}
