//! `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`: the on-disk format.
//!
//! Field types follow one rule so that `serde_json::to_value` yields the same JSON
//! upstream serves at `/configz`:
//! * Go pointer fields that upstream always defaults are plain Rust values whose
//!   `Default` is the upstream default (absent in the file => default, present => kept).
//! * Go pointer fields upstream leaves unset are `Option`.
//! * Go value fields default to their zero value and are then filled by
//!   [`KubeletConfiguration::apply_defaults`] when zero, exactly like `SetDefaults_*`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::duration::GoDuration;

pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub const KIND: &str = "KubeletConfiguration";

pub const DEFAULT_VOLUME_PLUGIN_DIR: &str = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/";
pub const DEFAULT_POD_LOGS_DIR: &str = "/var/log/pods";
pub const DEFAULT_CONTAINER_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";
pub const KUBELET_PORT: i32 = 10250;
pub const KUBELET_READ_ONLY_PORT: i32 = 10255;

/// Linux hard eviction thresholds applied when `evictionHard` is absent.
pub fn default_eviction_hard() -> BTreeMap<String, String> {
    [
        ("memory.available", "100Mi"),
        ("nodefs.available", "10%"),
        ("nodefs.inodesFree", "5%"),
        ("imagefs.available", "15%"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn is_false(b: &bool) -> bool {
    !*b
}
fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}
fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletConfiguration {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,

    pub enable_server: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub static_pod_path: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pod_logs_dir: String,
    pub sync_frequency: GoDuration,
    pub file_check_frequency: GoDuration,
    pub http_check_frequency: GoDuration,
    #[serde(rename = "staticPodURL", skip_serializing_if = "String::is_empty")]
    pub static_pod_url: String,
    #[serde(
        rename = "staticPodURLHeader",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub static_pod_url_header: BTreeMap<String, Vec<String>>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub address: String,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub port: i32,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub read_only_port: i32,
    #[serde(rename = "tlsCertFile", skip_serializing_if = "String::is_empty")]
    pub tls_cert_file: String,
    #[serde(rename = "tlsPrivateKeyFile", skip_serializing_if = "String::is_empty")]
    pub tls_private_key_file: String,
    #[serde(rename = "tlsCipherSuites", skip_serializing_if = "Vec::is_empty")]
    pub tls_cipher_suites: Vec<String>,
    #[serde(rename = "tlsCurvePreferences", skip_serializing_if = "Vec::is_empty")]
    pub tls_curve_preferences: Vec<i32>,
    #[serde(rename = "tlsMinVersion", skip_serializing_if = "String::is_empty")]
    pub tls_min_version: String,
    #[serde(skip_serializing_if = "is_false")]
    pub rotate_certificates: bool,
    #[serde(rename = "serverTLSBootstrap", skip_serializing_if = "is_false")]
    pub server_tls_bootstrap: bool,
    pub authentication: KubeletAuthentication,
    pub authorization: KubeletAuthorization,
    #[serde(rename = "registryPullQPS")]
    pub registry_pull_qps: i32,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub registry_burst: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image_pull_credentials_verification_policy: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preloaded_images_verification_allowlist: Vec<String>,
    #[serde(rename = "eventRecordQPS")]
    pub event_record_qps: i32,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub event_burst: i32,
    pub enable_debugging_handlers: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub enable_contention_profiling: bool,
    pub healthz_port: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub healthz_bind_address: String,
    #[serde(rename = "oomScoreAdj")]
    pub oom_score_adj: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cluster_domain: String,
    #[serde(rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    pub streaming_connection_idle_timeout: GoDuration,
    pub node_status_update_frequency: GoDuration,
    pub node_status_report_frequency: GoDuration,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub node_lease_duration_seconds: i32,
    #[serde(rename = "imageMinimumGCAge")]
    pub image_minimum_gc_age: GoDuration,
    #[serde(rename = "imageMaximumGCAge")]
    pub image_maximum_gc_age: GoDuration,
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: i32,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: i32,
    pub volume_stats_agg_period: GoDuration,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kubelet_cgroups: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub system_cgroups: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup_root: String,
    #[serde(rename = "cgroupsPerQOS")]
    pub cgroups_per_qos: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup_driver: String,
    #[serde(rename = "cpuManagerPolicy", skip_serializing_if = "String::is_empty")]
    pub cpu_manager_policy: String,
    #[serde(
        rename = "singleProcessOOMKill",
        skip_serializing_if = "Option::is_none"
    )]
    pub single_process_oom_kill: Option<bool>,
    #[serde(
        rename = "cpuManagerPolicyOptions",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub cpu_manager_policy_options: BTreeMap<String, String>,
    #[serde(rename = "cpuManagerReconcilePeriod")]
    pub cpu_manager_reconcile_period: GoDuration,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub memory_manager_policy: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_manager_policy: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_manager_scope: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub topology_manager_policy_options: BTreeMap<String, String>,
    #[serde(rename = "qosReserved", skip_serializing_if = "BTreeMap::is_empty")]
    pub qos_reserved: BTreeMap<String, String>,
    pub runtime_request_timeout: GoDuration,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hairpin_mode: String,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub max_pods: i32,
    #[serde(rename = "podCIDR", skip_serializing_if = "String::is_empty")]
    pub pod_cidr: String,
    pub pod_pids_limit: i64,
    #[serde(rename = "resolvConf")]
    pub resolv_conf: String,
    #[serde(skip_serializing_if = "is_false")]
    pub run_once: bool,
    #[serde(rename = "cpuCFSQuota")]
    pub cpu_cfs_quota: bool,
    #[serde(rename = "cpuCFSQuotaPeriod")]
    pub cpu_cfs_quota_period: GoDuration,
    pub node_status_max_images: i32,
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub max_open_files: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub content_type: String,
    #[serde(rename = "kubeAPIQPS")]
    pub kube_api_qps: i32,
    #[serde(rename = "kubeAPIBurst", skip_serializing_if = "is_zero_i32")]
    pub kube_api_burst: i32,
    pub serialize_image_pulls: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_parallel_image_pulls: Option<i32>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    pub eviction_pressure_transition_period: GoDuration,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub eviction_max_pod_grace_period: i32,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    pub merge_default_eviction_settings: bool,
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub pods_per_core: i32,
    pub enable_controller_attach_detach: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub protect_kernel_defaults: bool,
    #[serde(rename = "makeIPTablesUtilChains")]
    pub make_iptables_util_chains: bool,
    #[serde(rename = "iptablesMasqueradeBit")]
    pub iptables_masquerade_bit: i32,
    #[serde(rename = "iptablesDropBit")]
    pub iptables_drop_bit: i32,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
    pub fail_swap_on: bool,
    pub memory_swap: MemorySwapConfiguration,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub container_log_max_size: String,
    pub container_log_max_files: i32,
    pub container_log_max_workers: i32,
    pub container_log_monitor_interval: GoDuration,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub config_map_and_secret_change_detection_strategy: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, String>,
    #[serde(
        rename = "reservedSystemCPUs",
        skip_serializing_if = "String::is_empty"
    )]
    pub reserved_system_cpus: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub show_hidden_metrics_for_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub system_reserved_cgroup: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kube_reserved_cgroup: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub enforce_node_allocatable: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_unsafe_sysctls: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub volume_plugin_dir: String,
    #[serde(rename = "providerID", skip_serializing_if = "String::is_empty")]
    pub provider_id: String,
    #[serde(skip_serializing_if = "is_false")]
    pub kernel_memcg_notification: bool,
    pub logging: LoggingConfiguration,
    pub enable_system_log_handler: bool,
    pub enable_system_log_query: bool,
    pub shutdown_grace_period: GoDuration,
    pub shutdown_grace_period_critical_pods: GoDuration,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shutdown_grace_period_by_pod_priority: Vec<ShutdownGracePeriodByPodPriority>,
    pub crash_loop_back_off: CrashLoopBackOffConfig,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reserved_memory: Vec<MemoryReservation>,
    pub enable_profiling_handler: bool,
    pub enable_debug_flags_handler: bool,
    pub seccomp_default: bool,
    pub memory_throttling_factor: f64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub memory_reservation_policy: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub register_with_taints: Vec<Taint>,
    pub register_node: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingConfiguration>,
    pub local_storage_capacity_isolation: bool,
    pub container_runtime_endpoint: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image_service_endpoint: String,
    #[serde(rename = "failCgroupV1")]
    pub fail_cgroup_v1: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_namespaces: Option<UserNamespaces>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletAuthentication {
    pub x509: KubeletX509Authentication,
    pub webhook: KubeletWebhookAuthentication,
    pub anonymous: KubeletAnonymousAuthentication,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletX509Authentication {
    #[serde(rename = "clientCAFile", skip_serializing_if = "String::is_empty")]
    pub client_ca_file: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletWebhookAuthentication {
    pub enabled: bool,
    #[serde(rename = "cacheTTL")]
    pub cache_ttl: GoDuration,
}

impl Default for KubeletWebhookAuthentication {
    fn default() -> Self {
        Self {
            enabled: true,
            cache_ttl: GoDuration::ZERO,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletAnonymousAuthentication {
    pub enabled: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletAuthorization {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mode: String,
    pub webhook: KubeletWebhookAuthorization,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletWebhookAuthorization {
    #[serde(rename = "cacheAuthorizedTTL")]
    pub cache_authorized_ttl: GoDuration,
    #[serde(rename = "cacheUnauthorizedTTL")]
    pub cache_unauthorized_ttl: GoDuration,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MemorySwapConfiguration {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub swap_behavior: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CrashLoopBackOffConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_container_restart_period: Option<GoDuration>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ShutdownGracePeriodByPodPriority {
    pub priority: i32,
    pub shutdown_grace_period_seconds: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MemoryReservation {
    pub numa_node: i32,
    pub limits: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TracingConfiguration {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling_rate_per_million: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UserNamespaces {
    #[serde(rename = "idsPerPod", skip_serializing_if = "Option::is_none")]
    pub ids_per_pod: Option<i64>,
}

/// component-base `LoggingConfiguration`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LoggingConfiguration {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub format: String,
    pub flush_frequency: FlushFrequency,
    pub verbosity: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vmodule: Vec<VModuleItem>,
    pub options: LoggingFormatOptions,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VModuleItem {
    pub file_pattern: String,
    pub verbosity: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LoggingFormatOptions {
    pub text: OutputRoutingOptions,
    pub json: OutputRoutingOptions,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OutputRoutingOptions {
    #[serde(skip_serializing_if = "is_false")]
    pub split_stream: bool,
    #[serde(deserialize_with = "quantity_string")]
    pub info_buffer_size: String,
}

/// Upstream's `TimeOrMetaDuration`: a duration string, or an integer count of
/// nanoseconds kept as an integer when written back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushFrequency {
    pub duration: GoDuration,
    pub serialize_as_string: bool,
}

impl Serialize for FlushFrequency {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.serialize_as_string {
            self.duration.serialize(serializer)
        } else {
            let nanos = u64::try_from(self.duration.0.as_nanos()).unwrap_or(u64::MAX);
            serializer.serialize_u64(nanos)
        }
    }
}

impl<'de> Deserialize<'de> for FlushFrequency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(s) => s
                .parse::<GoDuration>()
                .map(|duration| FlushFrequency {
                    duration,
                    serialize_as_string: true,
                })
                .map_err(serde::de::Error::custom),
            Value::Number(n) => n
                .as_u64()
                .map(|nanos| FlushFrequency {
                    duration: GoDuration(std::time::Duration::from_nanos(nanos)),
                    serialize_as_string: false,
                })
                .ok_or_else(|| serde::de::Error::custom(format!("invalid duration \"{n}\""))),
            other => Err(serde::de::Error::custom(format!(
                "invalid duration \"{other}\""
            ))),
        }
    }
}

/// `resource.QuantityValue` accepts a string or a bare number.
fn quantity_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::String(s) => {
            crate::quantity::Amount::parse(&s).map_err(serde::de::Error::custom)?;
            Ok(s)
        }
        Value::Number(n) => Ok(n.to_string()),
        other => Err(serde::de::Error::custom(format!(
            "invalid quantity {other}"
        ))),
    }
}
