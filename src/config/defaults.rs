//! Upstream's v1beta1 defaulting of a `KubeletConfiguration` (`SetDefaults_KubeletConfiguration`),
//! and the legacy command-line defaults used when no `--config` is given.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::duration::GoDuration;
use super::kubelet::{
    API_VERSION, CrashLoopBackOffConfig, DEFAULT_CONTAINER_RUNTIME_ENDPOINT, DEFAULT_POD_LOGS_DIR,
    DEFAULT_RESOLV_CONF, DEFAULT_VOLUME_PLUGIN_DIR, FlushFrequency, KIND, KUBELET_PORT,
    KUBELET_READ_ONLY_PORT, KubeletAuthentication, KubeletAuthorization, KubeletConfiguration,
    LoggingConfiguration, MemorySwapConfiguration, default_eviction_hard,
};

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
