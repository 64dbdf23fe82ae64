//! The kubelet_* families dashboards read, with upstream's names, types, labels, buckets and
//! help texts (pkg/kubelet/metrics).

use super::registry::{DEF_BUCKETS, Histogram, Opts, Scalar, exponential_buckets};
use super::text::Family;

/// Upstream's podStartupDurationBuckets.
pub const POD_START_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

const fn alpha(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Opts {
    Opts {
        name,
        help,
        stability: "ALPHA",
        labels,
    }
}

const OPERATION: &[&str] = &["operation_type"];
const ALIGNMENT: &[&str] = &["scope", "boundary"];
/// The kubelet API's request labels; every value comes from a fixed set (see
/// server::http_metrics), so the series stay few.
pub const HTTP_LABELS: &[&str] = &["method", "path", "server_type", "long_running"];

pub struct KubeletMetrics {
    pub node_name: Scalar,
    pub running_pods: Scalar,
    pub running_containers: Scalar,
    pub pod_start_duration: Histogram,
    pub pod_start_sli_duration: Histogram,
    pub pod_start_total_duration: Histogram,
    pub pod_worker_duration: Histogram,
    pub pleg_relist_duration: Histogram,
    pub pleg_relist_interval: Histogram,
    pub pleg_last_seen: Scalar,
    pub evented_pleg_connection_success: Scalar,
    pub evented_pleg_connection_error: Scalar,
    pub evented_pleg_connection_latency: Histogram,
    pub runtime_operations: Scalar,
    pub runtime_operations_errors: Scalar,
    pub runtime_operations_duration: Histogram,
    pub started_pods: Scalar,
    pub started_containers: Scalar,
    pub http_requests: Scalar,
    pub http_requests_duration: Histogram,
    pub http_inflight_requests: Scalar,
    pub evictions: Scalar,
    /// Images the image GC removed, by `reason` ("age" or "space").
    pub image_garbage_collected: Scalar,
    /// Registrations of device plugins that passed the checks, by `resource_name`.
    pub device_plugin_registrations: Scalar,
    pub device_plugin_alloc_duration: Histogram,
    /// Containers that needed exclusive CPUs, and those whose allocation failed.
    pub cpu_manager_pinning_requests: Scalar,
    pub cpu_manager_pinning_errors: Scalar,
    pub memory_manager_pinning_requests: Scalar,
    pub memory_manager_pinning_errors: Scalar,
    /// The static policy's shared pool less the reserved CPUs, and the CPUs given out.
    pub cpu_manager_shared_pool_millicores: Scalar,
    pub cpu_manager_exclusive_cpus: Scalar,
    /// Pod admissions through the topology manager, those refused, and how long they took.
    pub topology_manager_admission_requests: Scalar,
    pub topology_manager_admission_errors: Scalar,
    pub topology_manager_admission_duration: Histogram,
    /// Alignments guaranteed (single-numa-node, full-pcpus-only) and failed, by `scope`
    /// (container, pod) and `boundary` (numa_node, physical_cpu).
    pub aligned_compute_resources: Scalar,
    pub aligned_compute_resources_failures: Scalar,
    /// When the serving certificate expires (Unix seconds): unset while the serving
    /// certificate manager does not run (the family is then not exposed, as upstream
    /// registers it with the manager), `Some(None)` while it has no certificate.
    pub server_cert_not_after: std::sync::Mutex<Option<Option<f64>>>,
}

impl KubeletMetrics {
    pub fn new() -> Self {
        KubeletMetrics {
            node_name: Scalar::gauge(alpha(
                "kubelet_node_name",
                "The node's name. The count is always 1.",
                &["node"],
            )),
            running_pods: Scalar::gauge(alpha(
                "kubelet_running_pods",
                "Number of pods that have a running pod sandbox",
                &[],
            )),
            running_containers: Scalar::gauge(alpha(
                "kubelet_running_containers",
                "Number of containers currently running",
                &["container_state"],
            )),
            pod_start_duration: Histogram::new(
                alpha(
                    "kubelet_pod_start_duration_seconds",
                    "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
                    &[],
                ),
                POD_START_BUCKETS,
            ),
            pod_start_sli_duration: Histogram::new(
                alpha(
                    "kubelet_pod_start_sli_duration_seconds",
                    "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
                    &[],
                ),
                POD_START_BUCKETS,
            ),
            pod_start_total_duration: Histogram::new(
                alpha(
                    "kubelet_pod_start_total_duration_seconds",
                    "Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
                    &[],
                ),
                POD_START_BUCKETS,
            ),
            pod_worker_duration: Histogram::new(
                alpha(
                    "kubelet_pod_worker_duration_seconds",
                    "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
                    OPERATION,
                ),
                DEF_BUCKETS,
            ),
            pleg_relist_duration: Histogram::new(
                alpha(
                    "kubelet_pleg_relist_duration_seconds",
                    "Duration in seconds for relisting pods in PLEG.",
                    &[],
                ),
                DEF_BUCKETS,
            ),
            pleg_relist_interval: Histogram::new(
                alpha(
                    "kubelet_pleg_relist_interval_seconds",
                    "Interval in seconds between relisting in PLEG.",
                    &[],
                ),
                DEF_BUCKETS,
            ),
            pleg_last_seen: Scalar::gauge(alpha(
                "kubelet_pleg_last_seen_seconds",
                "Timestamp in seconds when PLEG was last seen active.",
                &[],
            )),
            evented_pleg_connection_success: Scalar::counter(alpha(
                "kubelet_evented_pleg_connection_success_count",
                "The number of times a streaming client was obtained to receive CRI Events.",
                &[],
            )),
            evented_pleg_connection_error: Scalar::counter(alpha(
                "kubelet_evented_pleg_connection_error_count",
                "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
                &[],
            )),
            evented_pleg_connection_latency: Histogram::new(
                alpha(
                    "kubelet_evented_pleg_connection_latency_seconds",
                    "The latency of streaming connection with the CRI runtime, measured in seconds.",
                    &[],
                ),
                DEF_BUCKETS,
            ),
            runtime_operations: Scalar::counter(alpha(
                "kubelet_runtime_operations_total",
                "Cumulative number of runtime operations by operation type.",
                OPERATION,
            )),
            runtime_operations_errors: Scalar::counter(alpha(
                "kubelet_runtime_operations_errors_total",
                "Cumulative number of runtime operation errors by operation type.",
                OPERATION,
            )),
            runtime_operations_duration: Histogram::new(
                alpha(
                    "kubelet_runtime_operations_duration_seconds",
                    "Duration in seconds of runtime operations. Broken down by operation type.",
                    OPERATION,
                ),
                &exponential_buckets(0.005, 2.5, 14),
            ),
            started_pods: Scalar::counter(alpha(
                "kubelet_started_pods_total",
                "Cumulative number of pods started",
                &[],
            )),
            started_containers: Scalar::counter(alpha(
                "kubelet_started_containers_total",
                "Cumulative number of containers started",
                &["container_type"],
            )),
            http_requests: Scalar::counter(alpha(
                "kubelet_http_requests_total",
                "Number of the http requests received since the server started",
                HTTP_LABELS,
            )),
            http_requests_duration: Histogram::new(
                alpha(
                    "kubelet_http_requests_duration_seconds",
                    "Duration in seconds to serve http requests",
                    HTTP_LABELS,
                ),
                DEF_BUCKETS,
            ),
            http_inflight_requests: Scalar::gauge(alpha(
                "kubelet_http_inflight_requests",
                "Number of the inflight http requests",
                HTTP_LABELS,
            )),
            evictions: Scalar::counter(alpha(
                "kubelet_evictions",
                "Cumulative number of pod evictions by eviction signal",
                &["eviction_signal"],
            )),
            image_garbage_collected: Scalar::counter(alpha(
                "kubelet_image_garbage_collected_total",
                "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
                &["reason"],
            )),
            device_plugin_registrations: Scalar::counter(alpha(
                "kubelet_device_plugin_registration_total",
                "Cumulative number of device plugin registrations. Broken down by resource name.",
                &["resource_name"],
            )),
            device_plugin_alloc_duration: Histogram::new(
                alpha(
                    "kubelet_device_plugin_alloc_duration_seconds",
                    "Duration in seconds to serve a device plugin Allocation request. Broken down by resource name.",
                    &["resource_name"],
                ),
                DEF_BUCKETS,
            ),
            cpu_manager_pinning_requests: Scalar::counter(alpha(
                "kubelet_cpu_manager_pinning_requests_total",
                "The number of cpu core allocations which required pinning.",
                &[],
            )),
            cpu_manager_pinning_errors: Scalar::counter(alpha(
                "kubelet_cpu_manager_pinning_errors_total",
                "The number of cpu core allocations which required pinning failed.",
                &[],
            )),
            memory_manager_pinning_requests: Scalar::counter(alpha(
                "kubelet_memory_manager_pinning_requests_total",
                "The number of memory pages allocations which required pinning.",
                &[],
            )),
            memory_manager_pinning_errors: Scalar::counter(alpha(
                "kubelet_memory_manager_pinning_errors_total",
                "The number of memory pages allocations which required pinning that failed.",
                &[],
            )),
            cpu_manager_shared_pool_millicores: Scalar::gauge(alpha(
                "kubelet_cpu_manager_shared_pool_size_millicores",
                "The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
                &[],
            )),
            cpu_manager_exclusive_cpus: Scalar::gauge(alpha(
                "kubelet_cpu_manager_exclusive_cpu_allocation_count",
                "The total number of CPUs exclusively allocated to containers running on this node",
                &[],
            )),
            topology_manager_admission_requests: Scalar::counter(alpha(
                "kubelet_topology_manager_admission_requests_total",
                "The number of admission requests where resources have to be aligned.",
                &[],
            )),
            topology_manager_admission_errors: Scalar::counter(alpha(
                "kubelet_topology_manager_admission_errors_total",
                "The number of admission request failures where resources could not be aligned.",
                &[],
            )),
            topology_manager_admission_duration: Histogram::new(
                alpha(
                    "kubelet_topology_manager_admission_duration_ms",
                    "Duration in milliseconds to serve a pod admission request.",
                    &[],
                ),
                &exponential_buckets(0.05, 2.0, 15),
            ),
            aligned_compute_resources: Scalar::counter(alpha(
                "kubelet_container_aligned_compute_resources_count",
                "Cumulative number of aligned compute resources allocated to containers by alignment type.",
                ALIGNMENT,
            )),
            aligned_compute_resources_failures: Scalar::counter(alpha(
                "kubelet_container_aligned_compute_resources_failure_count",
                "Cumulative number of failures to allocate aligned compute resources to containers by alignment type.",
                ALIGNMENT,
            )),
            server_cert_not_after: std::sync::Mutex::new(None),
        }
    }

    /// `kubelet_certificate_manager_server_ttl_seconds`, computed now as upstream's gauge
    /// function computes it at each scrape.
    fn server_cert_ttl(&self) -> Option<Family> {
        let not_after = (*self
            .server_cert_not_after
            .lock()
            .unwrap_or_else(|e| e.into_inner()))?;
        let gauge = Scalar::gauge(alpha(
            "kubelet_certificate_manager_server_ttl_seconds",
            "Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is in seconds until certificate expiry (negative if already expired). If serving certificate is invalid or unused, the value will be +INF.",
            &[],
        ));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        gauge.set(&[], not_after.map_or(f64::INFINITY, |t| (t - now).trunc()));
        Some(gauge.family())
    }

    pub fn families(&self) -> Vec<Family> {
        vec![
            self.node_name.family(),
            self.running_pods.family(),
            self.running_containers.family(),
            self.pod_start_duration.family(),
            self.pod_start_sli_duration.family(),
            self.pod_start_total_duration.family(),
            self.pod_worker_duration.family(),
            self.pleg_relist_duration.family(),
            self.pleg_relist_interval.family(),
            self.pleg_last_seen.family(),
            self.evented_pleg_connection_success.family(),
            self.evented_pleg_connection_error.family(),
            self.evented_pleg_connection_latency.family(),
            self.runtime_operations.family(),
            self.runtime_operations_errors.family(),
            self.runtime_operations_duration.family(),
            self.started_pods.family(),
            self.started_containers.family(),
            self.http_requests.family(),
            self.http_requests_duration.family(),
            self.http_inflight_requests.family(),
            self.evictions.family(),
            self.image_garbage_collected.family(),
            self.device_plugin_registrations.family(),
            self.device_plugin_alloc_duration.family(),
            self.cpu_manager_pinning_requests.family(),
            self.cpu_manager_pinning_errors.family(),
            self.memory_manager_pinning_requests.family(),
            self.memory_manager_pinning_errors.family(),
            self.cpu_manager_shared_pool_millicores.family(),
            self.cpu_manager_exclusive_cpus.family(),
            self.topology_manager_admission_requests.family(),
            self.topology_manager_admission_errors.family(),
            self.topology_manager_admission_duration.family(),
            self.aligned_compute_resources.family(),
            self.aligned_compute_resources_failures.family(),
        ]
        .into_iter()
        .chain(self.server_cert_ttl())
        .collect()
    }
}

impl Default for KubeletMetrics {
    fn default() -> Self {
        Self::new()
    }
}
