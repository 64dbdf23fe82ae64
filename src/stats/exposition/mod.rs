//! The Prometheus views of the statistics: /metrics/resource from the Summary and
//! /metrics/cadvisor from a full collection, in the text format of [`crate::metrics::text`].

pub mod cadvisor;
pub mod process;
pub mod resource;
pub mod volumes;

use super::assemble::ClaimedReading;

/// /metrics: the kubelet families, the claims' volume usage and this process's basics.
pub fn kubelet_metrics(claimed: &[ClaimedReading]) -> String {
    let mut extra = process::families();
    extra.extend(volumes::families(claimed));
    crate::metrics::render(extra)
}

/// Moved from the metrics module: the /metrics text is composed here now.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_has_the_families_with_types() {
        crate::metrics::kubelet().node_name.set(&["test-node"], 1.0);
        let text = kubelet_metrics(&[]);
        for line in [
            "# TYPE kubelet_running_pods gauge",
            "# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox",
            "# TYPE kubelet_pod_start_duration_seconds histogram",
            "kubelet_pod_start_duration_seconds_bucket{le=\"0.5\"}",
            "kubelet_pod_start_duration_seconds_bucket{le=\"3600\"}",
            "# TYPE kubelet_pleg_relist_duration_seconds histogram",
            "# TYPE kubelet_pleg_relist_interval_seconds histogram",
            "# TYPE kubelet_pleg_last_seen_seconds gauge",
            "\nkubelet_evented_pleg_connection_success_count ",
            "\nkubelet_evented_pleg_connection_error_count ",
            "# TYPE kubelet_evented_pleg_connection_latency_seconds histogram",
            "# TYPE kubelet_started_pods_total counter",
            "kubelet_node_name{node=\"test-node\"} 1",
            "# TYPE process_cpu_seconds_total counter",
            "# TYPE process_resident_memory_bytes gauge",
            "# TYPE process_start_time_seconds gauge",
        ] {
            assert!(text.contains(line), "missing {line:?}");
        }
        assert!(crate::metrics::render_probes().starts_with("# HELP prober_probe_total [ALPHA] "));
        assert!(crate::metrics::render_probes().contains("# TYPE prober_probe_total counter"));
    }
}
