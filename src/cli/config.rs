//! Loading a `KubeletConfiguration` from a YAML or JSON file, plus `--config-dir` drop-ins:
//! type meta checks, lenient decoding with warnings for unknown fields, and defaulting.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserializer;
use serde::de::DeserializeOwned;
use serde_json::Value;

// The unknown-field walker visits every type of the schema.
use crate::config::kubelet::*;

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
pub(crate) fn struct_fields<T: DeserializeOwned>() -> &'static [&'static str] {
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
    use crate::config::GoDuration;

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
