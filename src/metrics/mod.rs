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

/// /metrics/probes. Probes are not implemented yet, so the family has no series; its header
/// says what will be there.
pub fn render_probes() -> String {
    let mut out = String::new();
    text::write_header(
        &mut out,
        "prober_probe_total",
        "[ALPHA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
        text::Kind::Counter,
    );
    out
}
