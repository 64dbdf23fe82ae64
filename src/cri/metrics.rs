//! What every CRI call adds to /metrics: kubelet_runtime_operations_total, its errors and its
//! duration, labelled by upstream's operation_type.

use std::time::Duration;

/// Upstream's operation_type for a CRI method: snake case, with "PodSandbox" as one word
/// (`RunPodSandbox` → `run_podsandbox`), and `update_container` for resource updates.
pub fn operation_type(method: &str) -> String {
    if method == "UpdateContainerResources" {
        return "update_container".into();
    }
    let mut out = String::with_capacity(method.len() + 4);
    for (i, ch) in method.chars().enumerate() {
        if ch.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out.replace("pod_sandbox", "podsandbox")
}

/// Counts one CRI call, its failure and its duration.
pub fn record_runtime_operation(method: &str, elapsed: Duration, failed: bool) {
    let m = crate::metrics::kubelet();
    let op = operation_type(method);
    m.runtime_operations.inc(&[&op]);
    m.runtime_operations_duration
        .observe(&[&op], elapsed.as_secs_f64());
    if failed {
        m.runtime_operations_errors.inc(&[&op]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::render;

    #[test]
    fn operation_types_are_upstreams() {
        for (method, want) in [
            ("Version", "version"),
            ("RunPodSandbox", "run_podsandbox"),
            ("StopPodSandbox", "stop_podsandbox"),
            ("PodSandboxStatus", "podsandbox_status"),
            ("ListPodSandbox", "list_podsandbox"),
            ("ListPodSandboxStats", "list_podsandbox_stats"),
            ("CreateContainer", "create_container"),
            ("ListContainers", "list_containers"),
            ("ListContainerStats", "list_container_stats"),
            ("ExecSync", "exec_sync"),
            ("ReopenContainerLog", "reopen_container_log"),
            ("UpdateContainerResources", "update_container"),
            ("ImageFsInfo", "image_fs_info"),
            ("PullImage", "pull_image"),
            ("Exec", "exec"),
            ("PortForward", "port_forward"),
        ] {
            assert_eq!(operation_type(method), want, "{method}");
        }
    }

    fn line_value(text: &str, prefix: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn runtime_operations_are_counted_with_errors_and_durations() {
        record_runtime_operation("MetricsTestOp", Duration::from_millis(20), false);
        record_runtime_operation("MetricsTestOp", Duration::from_millis(30), true);
        let text = render([]);
        let sel = "{operation_type=\"metrics_test_op\"}";
        assert_eq!(
            line_value(&text, &format!("kubelet_runtime_operations_total{sel}")),
            Some(2.0)
        );
        assert_eq!(
            line_value(
                &text,
                &format!("kubelet_runtime_operations_errors_total{sel}")
            ),
            Some(1.0)
        );
        assert_eq!(
            line_value(
                &text,
                "kubelet_runtime_operations_duration_seconds_count{operation_type=\"metrics_test_op\"}"
            ),
            Some(2.0)
        );
        assert!(text.contains(
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"metrics_test_op\",le=\"0.0125\"} 0\n"
        ));
        assert!(text.contains(
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"metrics_test_op\",le=\"0.03125\"} 2\n"
        ));
    }
}
