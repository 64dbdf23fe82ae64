use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, PodSpec,
};

use super::*;

#[test]
fn metrics_text_has_the_families_with_types() {
    kubelet().node_name.set(&["test-node"], 1.0);
    let text = render();
    for line in [
        "# TYPE kubelet_running_pods gauge",
        "# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox",
        "# TYPE kubelet_pod_start_duration_seconds histogram",
        "kubelet_pod_start_duration_seconds_bucket{le=\"0.5\"}",
        "kubelet_pod_start_duration_seconds_bucket{le=\"3600\"}",
        "# TYPE kubelet_pleg_relist_duration_seconds histogram",
        "# TYPE kubelet_pleg_relist_interval_seconds histogram",
        "# TYPE kubelet_pleg_last_seen_seconds gauge",
        "# TYPE kubelet_started_pods_total counter",
        "kubelet_node_name{node=\"test-node\"} 1",
        "# TYPE process_cpu_seconds_total counter",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_start_time_seconds gauge",
    ] {
        assert!(text.contains(line), "missing {line:?}");
    }
    assert!(render_probes().starts_with("# HELP prober_probe_total [ALPHA] "));
    assert!(render_probes().contains("# TYPE prober_probe_total counter"));
}

fn pod(containers: &[&str], init: &[&str]) -> Pod {
    let c = |n: &&str| Container {
        name: n.to_string(),
        ..Default::default()
    };
    Pod {
        spec: Some(PodSpec {
            containers: containers.iter().map(c).collect(),
            init_containers: Some(init.iter().map(c).collect()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn running(names: &[&str]) -> PodStatus {
    PodStatus {
        container_statuses: Some(
            names
                .iter()
                .map(|n| ContainerStatus {
                    name: n.to_string(),
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning::default()),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }
}

#[test]
fn worker_operations_and_start_observed_once() {
    let m = kubelet();
    let before = (
        m.pod_worker_duration.count(&["create"]),
        m.pod_worker_duration.count(&["update"]),
        m.pod_worker_duration.count(&["sync"]),
        m.pod_worker_duration.count(&["kill"]),
    );
    let p1 = Arc::new(pod(&["a", "b"], &[]));
    let mut t = PodWorkerTracker::default();
    let timer = t.begin(&p1);
    t.end(timer, &p1, Some(&running(&["a"])));
    assert!(!t.start_observed, "one of two running is not started");
    let timer = t.begin(&p1);
    t.end(timer, &p1, Some(&running(&["a", "b"])));
    assert!(t.start_observed);
    let p2 = Arc::new(pod(&["a", "b"], &[]));
    let timer = t.begin(&p2);
    t.end(timer, &p2, Some(&running(&["a", "b"])));
    drop(WorkerTimer::start("kill"));
    let after = (
        m.pod_worker_duration.count(&["create"]),
        m.pod_worker_duration.count(&["update"]),
        m.pod_worker_duration.count(&["sync"]),
        m.pod_worker_duration.count(&["kill"]),
    );
    assert!(after.0 > before.0 && after.1 > before.1 && after.2 > before.2 && after.3 > before.3);
}

#[test]
fn container_types() {
    let p = pod(&["app"], &["setup"]);
    let m = kubelet();
    let before = m.started_containers.get(&["init_container"]).unwrap_or(0.0);
    record_container_started(&p, "setup");
    assert!(m.started_containers.get(&["init_container"]).unwrap_or(0.0) > before);
    let before = m.started_containers.get(&["container"]).unwrap_or(0.0);
    record_container_started(&p, "app");
    assert!(m.started_containers.get(&["container"]).unwrap_or(0.0) > before);
}
