//! `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`: the on-disk format,
//! upstream's defaulting, and loading from a YAML or JSON file (plus `--config-dir`
//! drop-ins).
//!
//! Field types follow one rule so that `serde_json::to_value` yields the same JSON
//! upstream serves at `/configz`:
//! * Go pointer fields that upstream always defaults are plain Rust values whose
//!   `Default` is the upstream default (absent in the file => default, present => kept).
//! * Go pointer fields upstream leaves unset are `Option`.
//! * Go value fields default to their zero value and are then filled by
//!   [`KubeletConfiguration::apply_defaults`] when zero, exactly like `SetDefaults_*`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Taint;
use serde::de::DeserializeOwned;
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

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to read kubelet config file {path:?}, error: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to decode: {0}")]
    Decode(String),
    #[error("failed to decode: Object 'Kind' is missing in '{0}'")]
    MissingKind(String),
    #[error("failed to decode: no kind \"{kind}\" is registered for version \"{api_version}\"")]
    WrongType { kind: String, api_version: String },
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

impl Default for KubeletConfiguration {
    /// Go pointer fields carry their upstream default here; value fields stay at
    /// Go's zero value until [`KubeletConfiguration::apply_defaults`] runs.
    fn default() -> Self {
        Self {
            kind: KIND.to_string(),
            api_version: API_VERSION.to_string(),
            enable_server: true,
            static_pod_path: String::new(),
            pod_logs_dir: String::new(),
            sync_frequency: GoDuration::ZERO,
            file_check_frequency: GoDuration::ZERO,
            http_check_frequency: GoDuration::ZERO,
            static_pod_url: String::new(),
            static_pod_url_header: BTreeMap::new(),
            address: String::new(),
            port: 0,
            read_only_port: 0,
            tls_cert_file: String::new(),
            tls_private_key_file: String::new(),
            tls_cipher_suites: Vec::new(),
            tls_curve_preferences: Vec::new(),
            tls_min_version: String::new(),
            rotate_certificates: false,
            server_tls_bootstrap: false,
            authentication: KubeletAuthentication::default(),
            authorization: KubeletAuthorization::default(),
            registry_pull_qps: 5,
            registry_burst: 0,
            image_pull_credentials_verification_policy: String::new(),
            preloaded_images_verification_allowlist: Vec::new(),
            event_record_qps: 50,
            event_burst: 0,
            enable_debugging_handlers: true,
            enable_contention_profiling: false,
            healthz_port: 10248,
            healthz_bind_address: String::new(),
            oom_score_adj: -999,
            cluster_domain: String::new(),
            cluster_dns: Vec::new(),
            streaming_connection_idle_timeout: GoDuration::ZERO,
            node_status_update_frequency: GoDuration::ZERO,
            node_status_report_frequency: GoDuration::ZERO,
            node_lease_duration_seconds: 0,
            image_minimum_gc_age: GoDuration::ZERO,
            image_maximum_gc_age: GoDuration::ZERO,
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            volume_stats_agg_period: GoDuration::ZERO,
            kubelet_cgroups: String::new(),
            system_cgroups: String::new(),
            cgroup_root: String::new(),
            cgroups_per_qos: true,
            cgroup_driver: String::new(),
            cpu_manager_policy: String::new(),
            single_process_oom_kill: None,
            cpu_manager_policy_options: BTreeMap::new(),
            cpu_manager_reconcile_period: GoDuration::ZERO,
            memory_manager_policy: String::new(),
            topology_manager_policy: String::new(),
            topology_manager_scope: String::new(),
            topology_manager_policy_options: BTreeMap::new(),
            qos_reserved: BTreeMap::new(),
            runtime_request_timeout: GoDuration::ZERO,
            hairpin_mode: String::new(),
            max_pods: 0,
            pod_cidr: String::new(),
            pod_pids_limit: -1,
            resolv_conf: DEFAULT_RESOLV_CONF.to_string(),
            run_once: false,
            cpu_cfs_quota: true,
            cpu_cfs_quota_period: GoDuration::from_millis(100),
            node_status_max_images: 50,
            max_open_files: 0,
            content_type: String::new(),
            kube_api_qps: 50,
            kube_api_burst: 0,
            serialize_image_pulls: true,
            max_parallel_image_pulls: None,
            eviction_hard: default_eviction_hard(),
            eviction_soft: BTreeMap::new(),
            eviction_soft_grace_period: BTreeMap::new(),
            eviction_pressure_transition_period: GoDuration::ZERO,
            eviction_max_pod_grace_period: 0,
            eviction_minimum_reclaim: BTreeMap::new(),
            merge_default_eviction_settings: false,
            pods_per_core: 0,
            enable_controller_attach_detach: true,
            protect_kernel_defaults: false,
            make_iptables_util_chains: true,
            iptables_masquerade_bit: 14,
            iptables_drop_bit: 15,
            feature_gates: BTreeMap::new(),
            fail_swap_on: true,
            memory_swap: MemorySwapConfiguration::default(),
            container_log_max_size: String::new(),
            container_log_max_files: 5,
            container_log_max_workers: 1,
            container_log_monitor_interval: GoDuration::from_secs(10),
            config_map_and_secret_change_detection_strategy: String::new(),
            system_reserved: BTreeMap::new(),
            kube_reserved: BTreeMap::new(),
            reserved_system_cpus: String::new(),
            show_hidden_metrics_for_version: String::new(),
            system_reserved_cgroup: String::new(),
            kube_reserved_cgroup: String::new(),
            enforce_node_allocatable: vec!["pods".to_string()],
            allowed_unsafe_sysctls: Vec::new(),
            volume_plugin_dir: String::new(),
            provider_id: String::new(),
            kernel_memcg_notification: false,
            logging: LoggingConfiguration::default(),
            enable_system_log_handler: true,
            enable_system_log_query: false,
            shutdown_grace_period: GoDuration::ZERO,
            shutdown_grace_period_critical_pods: GoDuration::ZERO,
            shutdown_grace_period_by_pod_priority: Vec::new(),
            crash_loop_back_off: CrashLoopBackOffConfig::default(),
            reserved_memory: Vec::new(),
            enable_profiling_handler: true,
            enable_debug_flags_handler: true,
            seccomp_default: false,
            memory_throttling_factor: 0.9,
            memory_reservation_policy: String::new(),
            register_with_taints: Vec::new(),
            register_node: true,
            tracing: None,
            local_storage_capacity_isolation: true,
            container_runtime_endpoint: String::new(),
            image_service_endpoint: String::new(),
            fail_cgroup_v1: false,
            user_namespaces: None,
        }
    }
}

fn default_str(field: &mut String, value: &str) {
    if field.is_empty() {
        *field = value.to_string();
    }
}

fn default_dur(field: &mut GoDuration, value: GoDuration) {
    if field.is_zero() {
        *field = value;
    }
}

fn default_i32(field: &mut i32, value: i32) {
    if *field == 0 {
        *field = value;
    }
}

impl KubeletConfiguration {
    /// Upstream v1beta1 defaults with nothing read from a file.
    pub fn defaulted() -> Self {
        let mut c = Self::default();
        c.apply_defaults(false);
        c
    }

    /// The baseline upstream uses when no `--config` is given: v1beta1 defaults
    /// plus the legacy command-line defaults that predate the config file.
    pub fn legacy_flag_defaults() -> Self {
        let mut c = Self::defaulted();
        c.authentication.anonymous.enabled = true;
        c.authentication.webhook.enabled = false;
        c.authorization.mode = "AlwaysAllow".to_string();
        c.read_only_port = KUBELET_READ_ONLY_PORT;
        c
    }

    /// Mirrors `SetDefaults_KubeletConfiguration` for the value (non-pointer) fields,
    /// plus the pointer fields whose default depends on other fields.
    /// `serialize_image_pulls_set` tells whether the file set `serializeImagePulls`.
    pub fn apply_defaults(&mut self, serialize_image_pulls_set: bool) {
        default_dur(&mut self.sync_frequency, GoDuration::from_secs(60));
        default_dur(&mut self.file_check_frequency, GoDuration::from_secs(20));
        default_dur(&mut self.http_check_frequency, GoDuration::from_secs(20));
        default_str(&mut self.address, "0.0.0.0");
        default_i32(&mut self.port, KUBELET_PORT);
        default_dur(
            &mut self.authentication.webhook.cache_ttl,
            GoDuration::from_secs(120),
        );
        default_str(&mut self.authorization.mode, "Webhook");
        default_dur(
            &mut self.authorization.webhook.cache_authorized_ttl,
            GoDuration::from_secs(300),
        );
        default_dur(
            &mut self.authorization.webhook.cache_unauthorized_ttl,
            GoDuration::from_secs(30),
        );
        default_i32(&mut self.registry_burst, 10);
        default_i32(&mut self.event_burst, 100);
        default_str(&mut self.healthz_bind_address, "127.0.0.1");
        default_dur(
            &mut self.streaming_connection_idle_timeout,
            GoDuration::from_secs(4 * 3600),
        );
        // An explicitly set update frequency doubles as the report frequency.
        if self.node_status_report_frequency.is_zero() {
            self.node_status_report_frequency = if self.node_status_update_frequency.is_zero() {
                GoDuration::from_secs(300)
            } else {
                self.node_status_update_frequency
            };
        }
        default_dur(
            &mut self.node_status_update_frequency,
            GoDuration::from_secs(10),
        );
        default_i32(&mut self.node_lease_duration_seconds, 40);
        default_dur(&mut self.image_minimum_gc_age, GoDuration::from_secs(120));
        default_dur(&mut self.volume_stats_agg_period, GoDuration::from_secs(60));
        default_str(&mut self.cgroup_driver, "cgroupfs");
        default_str(&mut self.cpu_manager_policy, "none");
        default_dur(
            &mut self.cpu_manager_reconcile_period,
            GoDuration::from_secs(10),
        );
        default_str(&mut self.memory_manager_policy, "None");
        default_str(&mut self.topology_manager_policy, "none");
        default_str(&mut self.topology_manager_scope, "container");
        default_dur(
            &mut self.runtime_request_timeout,
            GoDuration::from_secs(120),
        );
        default_str(&mut self.hairpin_mode, "promiscuous-bridge");
        default_i32(&mut self.max_pods, 110);
        if self.pod_pids_limit < 0 {
            self.pod_pids_limit = -1;
        }
        if self.max_open_files == 0 {
            self.max_open_files = 1_000_000;
        }
        default_str(
            &mut self.content_type,
            "application/vnd.kubernetes.protobuf",
        );
        default_i32(&mut self.kube_api_burst, 100);
        if !serialize_image_pulls_set {
            self.serialize_image_pulls = self.max_parallel_image_pulls.is_none_or(|n| n < 2);
        }
        default_dur(
            &mut self.eviction_pressure_transition_period,
            GoDuration::from_secs(300),
        );
        default_str(&mut self.container_log_max_size, "10Mi");
        default_str(
            &mut self.config_map_and_secret_change_detection_strategy,
            "Watch",
        );
        default_str(&mut self.volume_plugin_dir, DEFAULT_VOLUME_PLUGIN_DIR);
        default_str(&mut self.logging.format, "text");
        if self.logging.flush_frequency.duration.is_zero() {
            self.logging.flush_frequency = FlushFrequency {
                duration: GoDuration::from_secs(5),
                serialize_as_string: true,
            };
        }
        default_str(&mut self.logging.options.text.info_buffer_size, "0");
        default_str(&mut self.logging.options.json.info_buffer_size, "0");
        default_str(
            &mut self.container_runtime_endpoint,
            DEFAULT_CONTAINER_RUNTIME_ENDPOINT,
        );
        default_str(&mut self.pod_logs_dir, DEFAULT_POD_LOGS_DIR);
    }

    /// Makes relative file paths absolute against the config file's directory,
    /// as upstream does for the fields listed in `KubeletConfigurationPathRefs`.
    pub fn resolve_relative_paths(&mut self, root: &Path) {
        let fields: [&mut String; 7] = [
            &mut self.static_pod_path,
            &mut self.authentication.x509.client_ca_file,
            &mut self.tls_cert_file,
            &mut self.tls_private_key_file,
            &mut self.resolv_conf,
            &mut self.volume_plugin_dir,
            &mut self.pod_logs_dir,
        ];
        for field in fields {
            if !field.is_empty() && Path::new(field.as_str()).is_relative() {
                *field = root.join(field.as_str()).to_string_lossy().into_owned();
            }
        }
    }

    /// JSON as served at `/configz` (without the `kind`/`apiVersion` header).
    pub fn to_configz_json(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut v {
            map.remove("kind");
            map.remove("apiVersion");
        }
        v
    }
}

/// A decoded configuration plus non-fatal problems found while decoding.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: KubeletConfiguration,
    pub warnings: Vec<String>,
}

/// Parses YAML or JSON text into a loosely typed tree (JSON is valid YAML, but
/// trying JSON first gives better error messages for JSON files).
fn parse_document(data: &str) -> Result<Value, ConfigError> {
    let trimmed = data.trim_start();
    if trimmed.starts_with('{') {
        return serde_json::from_str(data).map_err(|e| ConfigError::Decode(e.to_string()));
    }
    crate::yaml::to_json(data.as_bytes()).map_err(|e| ConfigError::Decode(e.to_string()))
}

/// Drops explicit nulls: a JSON null leaves a Go field untouched, i.e. defaulted.
fn strip_nulls(v: &mut Value) {
    if let Value::Object(map) = v {
        map.retain(|_, val| !val.is_null());
        for val in map.values_mut() {
            strip_nulls(val);
        }
    }
}

fn check_type_meta(doc: &Value, data: &str) -> Result<(), ConfigError> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() {
        let snippet: String = data.chars().take(200).collect();
        return Err(ConfigError::MissingKind(snippet));
    }
    if kind != KIND || api_version != API_VERSION {
        return Err(ConfigError::WrongType {
            kind: kind.to_string(),
            api_version: api_version.to_string(),
        });
    }
    Ok(())
}

/// Decodes one KubeletConfiguration document and applies v1beta1 defaults.
///
/// Like upstream, unknown fields do not fail the load: upstream tries a strict
/// decode first and, when that fails only because of unknown fields, falls back to
/// a lenient decode and logs the strict error. The same text is returned as a warning.
pub fn decode(data: &str) -> Result<LoadedConfig, ConfigError> {
    let mut doc = parse_document(data)?;
    if !doc.is_object() {
        return Err(ConfigError::Decode(
            "expected a mapping at the top level".to_string(),
        ));
    }
    check_type_meta(&doc, data)?;
    strip_nulls(&mut doc);
    let mut warnings = Vec::new();
    let unknown = unknown_fields(&doc);
    // Upstream's strict decoder rejects repeated keys and its lenient fallback keeps the
    // last value, as the JSON tree already did; so the repetition is only reported.
    let duplicate = crate::yaml::duplicate_key(data.as_bytes());
    if !unknown.is_empty() || duplicate.is_some() {
        let mut list: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        list.extend(duplicate);
        warnings.push(format!(
            "using lenient decoding as strict decoding failed: strict decoding error: {}",
            list.join(", ")
        ));
    }
    let serialize_set = doc.get("serializeImagePulls").is_some();
    let mut config: KubeletConfiguration =
        serde_json::from_value(doc).map_err(|e| ConfigError::Decode(e.to_string()))?;
    config.apply_defaults(serialize_set);
    Ok(LoadedConfig { config, warnings })
}

/// Reads and decodes `--config`, resolving relative paths against its directory.
pub fn load_file(path: &Path) -> Result<LoadedConfig, ConfigError> {
    let data = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut loaded = decode(&data)?;
    let root = path.parent().unwrap_or_else(|| Path::new("."));
    let root = if root.as_os_str().is_empty() {
        Path::new(".")
    } else {
        root
    };
    loaded.config.resolve_relative_paths(root);
    Ok(loaded)
}

/// Merges `*.conf` drop-ins from `dir` (sorted by name) over `base`.
///
/// Upstream decodes each drop-in into the already-defaulted struct, so objects and
/// maps merge key by key while lists are replaced; a JSON-level merge reproduces that.
pub fn merge_dropins(base: KubeletConfiguration, dir: &Path) -> Result<LoadedConfig, ConfigError> {
    let mut warnings = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|source| ConfigError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|ext| ext == "conf"))
        .collect();
    files.sort();
    let mut merged = serde_json::to_value(&base).map_err(|e| ConfigError::Decode(e.to_string()))?;
    for file in files {
        let data = std::fs::read_to_string(&file).map_err(|source| ConfigError::Read {
            path: file.clone(),
            source,
        })?;
        let mut doc = parse_document(&data)?;
        check_type_meta(&doc, &data)?;
        strip_nulls(&mut doc);
        let unknown = unknown_fields(&doc);
        if !unknown.is_empty() {
            warnings.push(format!(
                "drop-in {}: ignoring unknown fields: {}",
                file.display(),
                unknown.join(", ")
            ));
        }
        if let Value::Object(map) = &mut doc {
            let root = file.parent().unwrap_or_else(|| Path::new("."));
            for key in [
                "staticPodPath",
                "tlsCertFile",
                "tlsPrivateKeyFile",
                "resolvConf",
                "volumePluginDir",
                "podLogsDir",
            ] {
                if let Some(Value::String(p)) = map.get_mut(key)
                    && !p.is_empty()
                    && Path::new(p.as_str()).is_relative()
                {
                    *p = root.join(p.as_str()).to_string_lossy().into_owned();
                }
            }
        }
        deep_merge(&mut merged, doc);
    }
    let config: KubeletConfiguration =
        serde_json::from_value(merged).map_err(|e| ConfigError::Decode(e.to_string()))?;
    Ok(LoadedConfig { config, warnings })
}

fn deep_merge(base: &mut Value, overlay: Value) {
    match (base, overlay) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        deep_merge(existing, v)
                    }
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// Collects the field names serde's derive generated for `T` by asking it to
/// deserialize from a probe that records the list and then bails out.
fn struct_fields<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Probe(Option<&'static [&'static str]>);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("probe")
        }
    }
    impl std::error::Error for Stop {}
    impl serde::de::Error for Stop {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> Deserializer<'de> for &mut Probe {
        type Error = Stop;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Stop> {
            self.0 = Some(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    let mut probe = Probe(None);
    let _ = T::deserialize(&mut probe);
    probe.0.unwrap_or(&[])
}

/// Dotted paths of keys in `doc` that no field of the configuration accepts.
pub fn unknown_fields(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk_struct::<KubeletConfiguration>(doc, "", &mut out);
    out
}

fn walk_struct<T: DeserializeOwned>(v: &Value, prefix: &str, out: &mut Vec<String>) {
    let Value::Object(map) = v else { return };
    let known: BTreeSet<&str> = struct_fields::<T>().iter().copied().collect();
    for (key, val) in map {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        if !known.contains(key.as_str()) {
            out.push(path);
            continue;
        }
        walk_nested(&path, val, out);
    }
}

fn walk_list<T: DeserializeOwned>(v: &Value, path: &str, out: &mut Vec<String>) {
    if let Value::Array(items) = v {
        for (i, item) in items.iter().enumerate() {
            walk_struct::<T>(item, &format!("{path}[{i}]"), out);
        }
    }
}

/// Descends into the nested structs of the configuration by their JSON path.
fn walk_nested(path: &str, v: &Value, out: &mut Vec<String>) {
    match path {
        "authentication" => walk_struct::<KubeletAuthentication>(v, path, out),
        "authentication.x509" => walk_struct::<KubeletX509Authentication>(v, path, out),
        "authentication.webhook" => walk_struct::<KubeletWebhookAuthentication>(v, path, out),
        "authentication.anonymous" => walk_struct::<KubeletAnonymousAuthentication>(v, path, out),
        "authorization" => walk_struct::<KubeletAuthorization>(v, path, out),
        "authorization.webhook" => walk_struct::<KubeletWebhookAuthorization>(v, path, out),
        "memorySwap" => walk_struct::<MemorySwapConfiguration>(v, path, out),
        "crashLoopBackOff" => walk_struct::<CrashLoopBackOffConfig>(v, path, out),
        "tracing" => walk_struct::<TracingConfiguration>(v, path, out),
        "userNamespaces" => walk_struct::<UserNamespaces>(v, path, out),
        "logging" => walk_struct::<LoggingConfiguration>(v, path, out),
        "logging.options" => walk_struct::<LoggingFormatOptions>(v, path, out),
        "logging.options.text" | "logging.options.json" => {
            walk_struct::<OutputRoutingOptions>(v, path, out)
        }
        "logging.vmodule" => walk_list::<VModuleItem>(v, path, out),
        "shutdownGracePeriodByPodPriority" => {
            walk_list::<ShutdownGracePeriodByPodPriority>(v, path, out)
        }
        "reservedMemory" => walk_list::<MemoryReservation>(v, path, out),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_ok(data: &str) -> LoadedConfig {
        match decode(data) {
            Ok(c) => c,
            Err(e) => panic!("decode failed: {e}"),
        }
    }

    const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    #[test]
    fn empty_document_gets_upstream_defaults() {
        let c = decode_ok(HEADER).config;
        assert_eq!(c, KubeletConfiguration::defaulted());
        assert!(c.enable_server);
        assert_eq!(c.sync_frequency, GoDuration::from_secs(60));
        assert_eq!(c.file_check_frequency, GoDuration::from_secs(20));
        assert_eq!(c.http_check_frequency, GoDuration::from_secs(20));
        assert_eq!(c.address, "0.0.0.0");
        assert_eq!(c.port, 10250);
        assert_eq!(c.read_only_port, 0);
        assert_eq!(c.healthz_port, 10248);
        assert_eq!(c.healthz_bind_address, "127.0.0.1");
        assert_eq!(c.registry_pull_qps, 5);
        assert_eq!(c.registry_burst, 10);
        assert_eq!(c.event_record_qps, 50);
        assert_eq!(c.event_burst, 100);
        assert!(c.enable_debugging_handlers);
        assert_eq!(c.oom_score_adj, -999);
        assert_eq!(c.cluster_domain, "");
        assert_eq!(
            c.streaming_connection_idle_timeout,
            GoDuration::from_secs(14400)
        );
        assert_eq!(c.node_status_update_frequency, GoDuration::from_secs(10));
        assert_eq!(c.node_status_report_frequency, GoDuration::from_secs(300));
        assert_eq!(c.node_lease_duration_seconds, 40);
        assert_eq!(c.image_minimum_gc_age, GoDuration::from_secs(120));
        assert_eq!(c.image_gc_high_threshold_percent, 85);
        assert_eq!(c.image_gc_low_threshold_percent, 80);
        assert_eq!(c.volume_stats_agg_period, GoDuration::from_secs(60));
        assert!(c.cgroups_per_qos);
        assert_eq!(c.cgroup_driver, "cgroupfs");
        assert_eq!(c.cpu_manager_policy, "none");
        assert_eq!(c.memory_manager_policy, "None");
        assert_eq!(c.topology_manager_policy, "none");
        assert_eq!(c.topology_manager_scope, "container");
        assert_eq!(c.runtime_request_timeout, GoDuration::from_secs(120));
        assert_eq!(c.hairpin_mode, "promiscuous-bridge");
        assert_eq!(c.max_pods, 110);
        assert_eq!(c.pod_pids_limit, -1);
        assert_eq!(c.resolv_conf, "/etc/resolv.conf");
        assert!(c.cpu_cfs_quota);
        assert_eq!(c.cpu_cfs_quota_period, GoDuration::from_millis(100));
        assert_eq!(c.node_status_max_images, 50);
        assert_eq!(c.max_open_files, 1_000_000);
        assert_eq!(c.content_type, "application/vnd.kubernetes.protobuf");
        assert_eq!(c.kube_api_qps, 50);
        assert_eq!(c.kube_api_burst, 100);
        assert!(c.serialize_image_pulls);
        assert_eq!(c.eviction_hard, default_eviction_hard());
        assert_eq!(
            c.eviction_pressure_transition_period,
            GoDuration::from_secs(300)
        );
        assert!(c.enable_controller_attach_detach);
        assert!(c.make_iptables_util_chains);
        assert_eq!(c.iptables_masquerade_bit, 14);
        assert_eq!(c.iptables_drop_bit, 15);
        assert!(c.fail_swap_on);
        assert_eq!(c.container_log_max_size, "10Mi");
        assert_eq!(c.container_log_max_files, 5);
        assert_eq!(c.container_log_max_workers, 1);
        assert_eq!(c.container_log_monitor_interval, GoDuration::from_secs(10));
        assert_eq!(c.config_map_and_secret_change_detection_strategy, "Watch");
        assert_eq!(c.enforce_node_allocatable, vec!["pods".to_string()]);
        assert_eq!(c.volume_plugin_dir, DEFAULT_VOLUME_PLUGIN_DIR);
        assert_eq!(c.logging.format, "text");
        assert!(c.enable_system_log_handler);
        assert!(c.enable_profiling_handler);
        assert!(c.enable_debug_flags_handler);
        assert!(!c.seccomp_default);
        assert!((c.memory_throttling_factor - 0.9).abs() < f64::EPSILON);
        assert!(c.register_node);
        assert!(c.local_storage_capacity_isolation);
        assert_eq!(
            c.container_runtime_endpoint,
            DEFAULT_CONTAINER_RUNTIME_ENDPOINT
        );
        assert_eq!(c.pod_logs_dir, "/var/log/pods");
        assert!(!c.authentication.anonymous.enabled);
        assert!(c.authentication.webhook.enabled);
        assert_eq!(
            c.authentication.webhook.cache_ttl,
            GoDuration::from_secs(120)
        );
        assert_eq!(c.authorization.mode, "Webhook");
        assert_eq!(
            c.authorization.webhook.cache_authorized_ttl,
            GoDuration::from_secs(300)
        );
        assert_eq!(
            c.authorization.webhook.cache_unauthorized_ttl,
            GoDuration::from_secs(30)
        );
        assert!(!c.fail_cgroup_v1);
        assert!(!c.merge_default_eviction_settings);
    }

    #[test]
    fn yaml_values_are_kept_and_zero_values_defaulted() {
        let yaml = format!(
            "{HEADER}maxPods: 50\nport: 0\nregisterNode: false\nsyncFrequency: 30s\n\
             evictionHard:\n  memory.available: 1Gi\nauthentication:\n  anonymous:\n    enabled: true\n\
             clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\nresolvConf: \"\"\n\
             enforceNodeAllocatable: []\nnodeStatusUpdateFrequency: 20s\nfeatureGates:\n  Foo: true\n"
        );
        let c = decode_ok(&yaml).config;
        assert_eq!(c.max_pods, 50);
        assert_eq!(c.port, 10250, "zero port is defaulted like upstream");
        assert!(!c.register_node);
        assert_eq!(c.sync_frequency, GoDuration::from_secs(30));
        assert_eq!(c.eviction_hard.len(), 1);
        assert_eq!(
            c.eviction_hard.get("memory.available").map(String::as_str),
            Some("1Gi")
        );
        assert!(c.authentication.anonymous.enabled);
        assert!(c.authentication.webhook.enabled, "sibling keeps default");
        assert_eq!(c.cluster_dns, vec!["10.96.0.10".to_string()]);
        assert_eq!(c.cluster_domain, "cluster.local");
        assert_eq!(
            c.resolv_conf, "",
            "explicit empty resolvConf disables DNS config"
        );
        assert!(c.enforce_node_allocatable.is_empty());
        assert_eq!(c.node_status_report_frequency, GoDuration::from_secs(20));
        assert_eq!(c.feature_gates.get("Foo"), Some(&true));
    }

    /// The shape `kubeadm init` writes to /var/lib/kubelet/config.yaml.
    #[test]
    fn kubeadm_generated_config() {
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: \"\"
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: \"0\"
    text:
      infoBufferSize: \"0\"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
";
        let loaded = decode_ok(yaml);
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        let c = loaded.config;
        assert_eq!(c.cgroup_driver, "systemd");
        assert_eq!(
            c.authentication.x509.client_ca_file,
            "/etc/kubernetes/pki/ca.crt"
        );
        assert_eq!(
            c.authentication.webhook.cache_ttl,
            GoDuration::from_secs(120)
        );
        assert_eq!(
            c.authorization.webhook.cache_unauthorized_ttl,
            GoDuration::from_secs(30)
        );
        assert_eq!(
            c.container_runtime_endpoint,
            DEFAULT_CONTAINER_RUNTIME_ENDPOINT
        );
        assert_eq!(c.sync_frequency, GoDuration::from_secs(60));
        assert_eq!(c.node_status_report_frequency, GoDuration::from_secs(300));
        assert!(c.rotate_certificates);
        assert_eq!(c.static_pod_path, "/etc/kubernetes/manifests");
        let v = c.to_configz_json();
        assert_eq!(v["logging"]["flushFrequency"], "5s");
        assert_eq!(v["enableSystemLogQuery"], false);
        assert_eq!(v["crashLoopBackOff"], serde_json::json!({}));
        assert_eq!(v["imageMaximumGCAge"], "0s");
        assert!(super::super::validate::validate_config(&c).is_empty());
    }

    #[test]
    fn json_document_decodes() {
        let json = r#"{"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1",
            "healthzPort":0,"cgroupDriver":"systemd","maxParallelImagePulls":5,
            "logging":{"flushFrequency":1000000000,"verbosity":3}}"#;
        let c = decode_ok(json).config;
        assert_eq!(
            c.healthz_port, 0,
            "explicit 0 disables healthz (pointer field)"
        );
        assert_eq!(c.cgroup_driver, "systemd");
        assert!(
            !c.serialize_image_pulls,
            "parallel pulls imply not serialized"
        );
        assert_eq!(c.logging.verbosity, 3);
        assert_eq!(c.logging.flush_frequency.duration, GoDuration::from_secs(1));
        let out = serde_json::to_value(&c).unwrap_or_default();
        assert_eq!(
            out["logging"]["flushFrequency"],
            serde_json::json!(1_000_000_000u64)
        );
    }

    #[test]
    fn unknown_fields_warn_and_name_the_field() {
        let yaml =
            format!("{HEADER}maxPods: 10\nbogusField: 1\nauthentication:\n  x509:\n    nope: a\n");
        let loaded = decode_ok(&yaml);
        assert_eq!(loaded.config.max_pods, 10);
        assert_eq!(loaded.warnings.len(), 1);
        assert!(
            loaded.warnings[0].contains("unknown field \"bogusField\""),
            "{:?}",
            loaded.warnings
        );
        assert!(loaded.warnings[0].contains("unknown field \"authentication.x509.nope\""));
    }

    #[test]
    fn type_errors_and_bad_type_meta_fail() {
        assert!(matches!(
            decode(&format!("{HEADER}maxPods: lots\n")),
            Err(ConfigError::Decode(_))
        ));
        assert!(matches!(
            decode(&format!("{HEADER}syncFrequency: 10\n")),
            Err(ConfigError::Decode(_))
        ));
        assert!(matches!(
            decode("maxPods: 3\n"),
            Err(ConfigError::MissingKind(_))
        ));
        assert!(matches!(
            decode("apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n"),
            Err(ConfigError::WrongType { .. })
        ));
        let dup = format!("{HEADER}maxPods: 1\nmaxPods: 2\n");
        let loaded = decode_ok(&dup);
        assert_eq!(
            loaded.config.max_pods, 2,
            "last duplicate wins, as in lenient decoding"
        );
        assert!(
            loaded.warnings[0].contains("duplicate"),
            "{:?}",
            loaded.warnings
        );
    }

    #[test]
    fn serializes_with_upstream_field_names() {
        let c = KubeletConfiguration::defaulted();
        let v = c.to_configz_json();
        for key in [
            "enableServer",
            "syncFrequency",
            "staticPodURL",
            "registryPullQPS",
            "eventRecordQPS",
            "oomScoreAdj",
            "imageMinimumGCAge",
            "imageGCHighThresholdPercent",
            "cgroupsPerQOS",
            "cpuCFSQuota",
            "cpuCFSQuotaPeriod",
            "kubeAPIQPS",
            "kubeAPIBurst",
            "makeIPTablesUtilChains",
            "iptablesMasqueradeBit",
            "resolvConf",
            "containerRuntimeEndpoint",
            "shutdownGracePeriod",
            "memorySwap",
            "crashLoopBackOff",
            "failCgroupV1",
        ] {
            if key == "staticPodURL" {
                assert!(v.get(key).is_none(), "empty staticPodURL is omitted");
            } else {
                assert!(v.get(key).is_some(), "missing {key}");
            }
        }
        assert_eq!(v["syncFrequency"], "1m0s");
        assert_eq!(v["streamingConnectionIdleTimeout"], "4h0m0s");
        assert_eq!(v["cpuCFSQuotaPeriod"], "100ms");
        assert_eq!(v["authentication"]["webhook"]["cacheTTL"], "2m0s");
        assert_eq!(v["authentication"]["anonymous"]["enabled"], false);
        assert_eq!(v["authorization"]["webhook"]["cacheAuthorizedTTL"], "5m0s");
        assert_eq!(v["logging"]["flushFrequency"], "5s");
        assert_eq!(v["logging"]["options"]["json"]["infoBufferSize"], "0");
        assert_eq!(v["shutdownGracePeriod"], "0s");
        assert_eq!(v["memorySwap"], serde_json::json!({}));
        assert!(v.get("kind").is_none());
        assert!(v.get("readOnlyPort").is_none());
        // Round trip through our own serializer keeps everything.
        let back: KubeletConfiguration =
            serde_json::from_value(serde_json::to_value(&c).unwrap_or_default())
                .unwrap_or_default();
        assert_eq!(back, c);
    }

    #[test]
    fn every_serialized_key_is_known() {
        let mut c = KubeletConfiguration::defaulted();
        c.tracing = Some(TracingConfiguration {
            endpoint: Some("x".into()),
            sampling_rate_per_million: Some(1),
        });
        c.user_namespaces = Some(UserNamespaces {
            ids_per_pod: Some(65536),
        });
        c.reserved_memory = vec![MemoryReservation::default()];
        let v = serde_json::to_value(&c).unwrap_or_default();
        assert!(unknown_fields(&v).is_empty(), "{:?}", unknown_fields(&v));
    }

    #[test]
    fn relative_paths_resolve_against_config_dir() {
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("tempdir: {e}"),
        };
        let path = dir.path().join("config.yaml");
        let body = format!("{HEADER}staticPodPath: manifests\ntlsCertFile: /abs/cert.pem\n");
        if let Err(e) = std::fs::write(&path, body) {
            panic!("write: {e}");
        }
        let c = match load_file(&path) {
            Ok(l) => l.config,
            Err(e) => panic!("load: {e}"),
        };
        assert_eq!(
            c.static_pod_path,
            dir.path().join("manifests").to_string_lossy()
        );
        assert_eq!(c.tls_cert_file, "/abs/cert.pem");
        assert!(matches!(
            load_file(&dir.path().join("missing.yaml")),
            Err(ConfigError::Read { .. })
        ));
    }

    #[test]
    fn dropins_merge_maps_and_replace_lists() {
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("tempdir: {e}"),
        };
        let write = |name: &str, body: &str| {
            if let Err(e) = std::fs::write(dir.path().join(name), format!("{HEADER}{body}")) {
                panic!("write: {e}");
            }
        };
        write(
            "10-a.conf",
            "maxPods: 20\nevictionHard:\n  memory.available: 1Gi\n",
        );
        write("20-b.conf", "maxPods: 30\nclusterDNS: [1.1.1.1]\n");
        write("ignored.yaml", "maxPods: 99\n");
        let base = KubeletConfiguration::defaulted();
        let merged = match merge_dropins(base, dir.path()) {
            Ok(m) => m.config,
            Err(e) => panic!("merge: {e}"),
        };
        assert_eq!(merged.max_pods, 30);
        assert_eq!(merged.cluster_dns, vec!["1.1.1.1".to_string()]);
        assert_eq!(
            merged
                .eviction_hard
                .get("memory.available")
                .map(String::as_str),
            Some("1Gi")
        );
        assert_eq!(
            merged
                .eviction_hard
                .get("nodefs.available")
                .map(String::as_str),
            Some("10%")
        );
    }
}
