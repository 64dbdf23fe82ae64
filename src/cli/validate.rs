//! Validation of the effective configuration, following upstream's
//! `ValidateKubeletConfiguration` and `ValidateKubeletFlags`. Every problem is
//! collected; messages use upstream's wording so operators recognise them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Component, Path};

use super::config::KubeletConfiguration;
use super::duration::GoDuration;
use super::quantity::parse_quantity;
use crate::names;

/// Default states (v1.34) of the feature gates that change validation or defaults.
/// Gates not listed here are accepted and otherwise ignored.
const FEATURE_GATE_DEFAULTS: &[(&str, bool)] = &[
    ("CustomCPUCFSQuotaPeriod", false),
    ("GracefulNodeShutdown", true),
    ("GracefulNodeShutdownBasedOnPodPriority", true),
    ("ImageMaximumGCAge", true),
    ("KubeletCrashLoopBackOffMax", false),
    ("KubeletEnsureSecretPulledImages", false),
    ("MemoryQoS", false),
    ("NodeLogQuery", false),
    ("NodeSwap", true),
    ("RotateKubeletServerCertificate", true),
    ("LoggingAlphaOptions", false),
    ("LoggingBetaOptions", true),
];

/// Whether `name` is enabled, given the configuration's own `featureGates`.
pub fn feature_enabled(gates: &BTreeMap<String, bool>, name: &str) -> bool {
    if let Some(v) = gates.get(name) {
        return *v;
    }
    FEATURE_GATE_DEFAULTS
        .iter()
        .find(|(n, _)| *n == name)
        .is_some_and(|(_, v)| *v)
}

const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
];

fn port_ok(p: i32) -> bool {
    (1..=65535).contains(&p)
}

/// Validates the merged configuration; returns all problems found.
pub fn validate_config(kc: &KubeletConfiguration) -> Vec<String> {
    let mut errs = Vec::new();
    let mut bad = |msg: String| errs.push(format!("invalid configuration: {msg}"));
    let gate = |name: &str| feature_enabled(&kc.feature_gates, name);

    if kc.node_lease_duration_seconds <= 0 {
        bad("nodeLeaseDurationSeconds must be greater than 0".into());
    }
    if !kc.system_cgroups.is_empty() && kc.cgroup_root.is_empty() {
        bad("systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified".into());
    }
    if kc.event_burst < 0 {
        bad(format!(
            "eventBurst (--event-burst) {} must not be a negative number",
            kc.event_burst
        ));
    }
    if kc.event_record_qps < 0 {
        bad(format!(
            "eventRecordQPS (--event-qps) {} must not be a negative number",
            kc.event_record_qps
        ));
    }
    if kc.healthz_port != 0 && !port_ok(kc.healthz_port) {
        bad(format!(
            "healthzPort (--healthz-port) {} must be between 1 and 65535, inclusive",
            kc.healthz_port
        ));
    }
    let default_cfs = GoDuration::from_millis(100);
    if !gate("CustomCPUCFSQuotaPeriod") && kc.cpu_cfs_quota_period != default_cfs {
        bad(format!(
            "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {} requires feature gate CustomCPUCFSQuotaPeriod",
            kc.cpu_cfs_quota_period
        ));
    }
    if gate("CustomCPUCFSQuotaPeriod")
        && !(GoDuration::from_millis(1)..=GoDuration::from_secs(1))
            .contains(&kc.cpu_cfs_quota_period)
    {
        bad(format!(
            "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {} must be between 1ms and 1sec, inclusive",
            kc.cpu_cfs_quota_period
        ));
    }
    if !(0..=100).contains(&kc.image_gc_high_threshold_percent) {
        bad(format!(
            "imageGCHighThresholdPercent (--image-gc-high-threshold) {} must be between 0 and 100, inclusive",
            kc.image_gc_high_threshold_percent
        ));
    }
    if !(0..=100).contains(&kc.image_gc_low_threshold_percent) {
        bad(format!(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) {} must be between 0 and 100, inclusive",
            kc.image_gc_low_threshold_percent
        ));
    }
    if kc.image_gc_low_threshold_percent >= kc.image_gc_high_threshold_percent {
        bad(format!(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) {} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {}",
            kc.image_gc_low_threshold_percent, kc.image_gc_high_threshold_percent
        ));
    }
    if !kc.image_maximum_gc_age.is_zero() && !gate("ImageMaximumGCAge") {
        bad("ImageMaximumGCAge feature gate is required for Kubelet configuration option imageMaximumGCAge".into());
    }
    if !kc.image_maximum_gc_age.is_zero() && kc.image_maximum_gc_age <= kc.image_minimum_gc_age {
        bad(format!(
            "imageMaximumGCAge {} must be greater than imageMinimumGCAge {}",
            kc.image_maximum_gc_age, kc.image_minimum_gc_age
        ));
    }
    if !(0..=31).contains(&kc.iptables_drop_bit) {
        bad(format!(
            "iptablesDropBit (--iptables-drop-bit) {} must be between 0 and 31, inclusive",
            kc.iptables_drop_bit
        ));
    }
    if !(0..=31).contains(&kc.iptables_masquerade_bit) {
        bad(format!(
            "iptablesMasqueradeBit (--iptables-masquerade-bit) {} must be between 0 and 31, inclusive",
            kc.iptables_masquerade_bit
        ));
    }
    if kc.kube_api_burst < 0 {
        bad(format!(
            "kubeAPIBurst (--kube-api-burst) {} must not be a negative number",
            kc.kube_api_burst
        ));
    }
    if kc.kube_api_qps < 0 {
        bad(format!(
            "kubeAPIQPS (--kube-api-qps) {} must not be a negative number",
            kc.kube_api_qps
        ));
    }
    if kc.node_status_max_images < -1 {
        bad(format!(
            "nodeStatusMaxImages (--node-status-max-images) {} must be -1 or greater",
            kc.node_status_max_images
        ));
    }
    if kc.max_open_files < 0 {
        bad(format!(
            "maxOpenFiles (--max-open-files) {} must not be a negative number",
            kc.max_open_files
        ));
    }
    if kc.max_pods < 0 {
        bad(format!(
            "maxPods (--max-pods) {} must not be a negative number",
            kc.max_pods
        ));
    }
    if !(-1000..=1000).contains(&kc.oom_score_adj) {
        bad(format!(
            "oomScoreAdj (--oom-score-adj) {} must be between -1000 and 1000, inclusive",
            kc.oom_score_adj
        ));
    }
    if kc.pods_per_core < 0 {
        bad(format!(
            "podsPerCore (--pods-per-core) {} must not be a negative number",
            kc.pods_per_core
        ));
    }
    if !port_ok(kc.port) {
        bad(format!(
            "port (--port) {} must be between 1 and 65535, inclusive",
            kc.port
        ));
    }
    if kc.read_only_port != 0 && !port_ok(kc.read_only_port) {
        bad(format!(
            "readOnlyPort (--read-only-port) {} must be between 0 and 65535, inclusive",
            kc.read_only_port
        ));
    }
    if kc.registry_burst < 0 {
        bad(format!(
            "registryBurst (--registry-burst) {} must not be a negative number",
            kc.registry_burst
        ));
    }
    if kc.registry_pull_qps < 0 {
        bad(format!(
            "registryPullQPS (--registry-qps) {} must not be a negative number",
            kc.registry_pull_qps
        ));
    }
    if let Some(n) = kc.max_parallel_image_pulls {
        if n < 1 {
            bad(format!(
                "maxParallelImagePulls {n} must be a positive number"
            ));
        }
        if kc.serialize_image_pulls && n > 1 {
            bad("maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false".into());
        }
    }
    if kc.server_tls_bootstrap && !gate("RotateKubeletServerCertificate") {
        bad("serverTLSBootstrap true requires feature gate RotateKubeletServerCertificate".into());
    }
    if kc.run_once {
        bad(
            "runOnce (--runOnce) true, Runonce mode has been deprecated and should not be set"
                .into(),
        );
    }
    for t in &kc.register_with_taints {
        if t.key.is_empty()
            || !matches!(
                t.effect.as_str(),
                "NoSchedule" | "PreferNoSchedule" | "NoExecute"
            )
        {
            bad(format!(
                "invalid taint: {}={}:{}",
                t.key,
                t.value.as_deref().unwrap_or(""),
                t.effect
            ));
        }
        if t.time_added.is_some() {
            bad("taint.TimeAdded is not nil".into());
        }
    }
    if !matches!(
        kc.topology_manager_policy.as_str(),
        "none" | "best-effort" | "restricted" | "single-numa-node"
    ) {
        bad(format!(
            "topologyManagerPolicy (--topology-manager-policy) {:?} must be one of: [\"none\" \"best-effort\" \"restricted\" \"single-numa-node\"]",
            kc.topology_manager_policy
        ));
    }
    if !matches!(kc.topology_manager_scope.as_str(), "container" | "pod") {
        bad(format!(
            "topologyManagerScope (--topology-manager-scope) {:?} must be one of: \"container\", or \"pod\"",
            kc.topology_manager_scope
        ));
    }
    validate_shutdown(
        kc,
        &mut bad,
        gate("GracefulNodeShutdown"),
        gate("GracefulNodeShutdownBasedOnPodPriority"),
    );
    if gate("NodeSwap") {
        if !matches!(
            kc.memory_swap.swap_behavior.as_str(),
            "" | "NoSwap" | "LimitedSwap"
        ) {
            bad(format!(
                "memorySwap.swapBehavior {:?} must be one of: \"\", \"LimitedSwap\" or \"NoSwap\"",
                kc.memory_swap.swap_behavior
            ));
        }
    } else if !kc.memory_swap.swap_behavior.is_empty() {
        bad("memorySwap.swapBehavior cannot be set when NodeSwap feature flag is disabled".into());
    }
    if gate("KubeletCrashLoopBackOffMax") {
        match kc.crash_loop_back_off.max_container_restart_period {
            None => bad("FeatureGate KubeletCrashLoopBackOffMax is enabled, CrashLoopBackOff.MaxContainerRestartPeriod must be set".into()),
            Some(p) if !(GoDuration::from_secs(1)..=GoDuration::from_secs(300)).contains(&p) => bad(format!(
                "CrashLoopBackOff.MaxContainerRestartPeriod (got: {} seconds) must be set between 1s and 300s",
                p.0.as_secs_f64()
            )),
            Some(_) => {}
        }
    } else if kc
        .crash_loop_back_off
        .max_container_restart_period
        .is_some()
    {
        bad("FeatureGate KubeletCrashLoopBackOffMax not enabled, CrashLoopBackOff.MaxContainerRestartPeriod must not be set".into());
    }
    validate_node_allocatable(kc, &mut bad);
    if !matches!(
        kc.hairpin_mode.as_str(),
        "none" | "hairpin-veth" | "promiscuous-bridge"
    ) {
        bad(format!(
            "option {:?} specified for hairpinMode (--hairpin-mode). Valid options are \"none\", \"hairpin-veth\" or \"promiscuous-bridge\"",
            kc.hairpin_mode
        ));
    }
    if !gate("KubeletEnsureSecretPulledImages") {
        if !kc.image_pull_credentials_verification_policy.is_empty() {
            bad("`imagePullCredentialsVerificationPolicy` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled".into());
        }
        if !kc.preloaded_images_verification_allowlist.is_empty() {
            bad("`preloadedImagesVerificationAllowlist` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled".into());
        }
    } else if !matches!(
        kc.image_pull_credentials_verification_policy.as_str(),
        "NeverVerify"
            | "NeverVerifyPreloadedImages"
            | "NeverVerifyAllowlistedImages"
            | "AlwaysVerify"
    ) {
        bad(format!(
            "option {:?} specified for imagePullCredentialsVerificationPolicy. Valid options are \"NeverVerify\", \"NeverVerifyPreloadedImages\", \"NeverVerifyAllowlistedImages\" or \"AlwaysVerify\"",
            kc.image_pull_credentials_verification_policy
        ));
    }
    if !kc.reserved_system_cpus.is_empty() {
        if !kc.system_reserved_cgroup.is_empty() || !kc.kube_reserved_cgroup.is_empty() {
            bad("can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)".into());
        }
        if let Err(e) = parse_cpuset(&kc.reserved_system_cpus) {
            bad(format!(
                "unable to parse reservedSystemCPUs (--reserved-cpus) {}, error: {e}",
                kc.reserved_system_cpus
            ));
        }
    }
    if !matches!(kc.cgroup_driver.as_str(), "cgroupfs" | "systemd") {
        bad(format!(
            "cgroupDriver (--cgroup-driver) {:?} must be one of: \"cgroupfs\", \"systemd\"",
            kc.cgroup_driver
        ));
    }
    if !matches!(kc.authorization.mode.as_str(), "AlwaysAllow" | "Webhook") {
        bad(format!(
            "authorization.mode (--authorization-mode) {:?} must be one of: \"AlwaysAllow\", \"Webhook\"",
            kc.authorization.mode
        ));
    }
    if !matches!(kc.logging.format.as_str(), "text" | "json") {
        bad(format!(
            "logging.format: Unsupported value: {:?}: supported values: \"json\", \"text\"",
            kc.logging.format
        ));
    }
    if let Some(t) = &kc.tracing
        && let Some(rate) = t.sampling_rate_per_million
        && !(0..=1_000_000).contains(&rate)
    {
        bad(format!(
            "tracing.samplingRatePerMillion: Invalid value: {rate}: sampling rate must be between 0 and 1 million"
        ));
    }
    if kc.memory_throttling_factor <= 0.0 || kc.memory_throttling_factor > 1.0 {
        bad(format!(
            "memoryThrottlingFactor {} must be greater than 0 and less than or equal to 1.0",
            kc.memory_throttling_factor
        ));
    }
    if !matches!(
        kc.memory_reservation_policy.as_str(),
        "" | "None" | "TieredReservation"
    ) {
        bad(format!(
            "option {:?} specified for memoryReservationPolicy. Valid options are \"None\" or \"TieredReservation\"",
            kc.memory_reservation_policy
        ));
    }
    if kc.container_runtime_endpoint.is_empty() {
        bad("the containerRuntimeEndpoint was not specified or empty".into());
    }
    if kc.enable_system_log_query {
        if !gate("NodeLogQuery") {
            bad("NodeLogQuery feature gate is required for enableSystemLogQuery".into());
        }
        if !kc.enable_system_log_handler {
            bad("enableSystemLogHandler is required for enableSystemLogQuery".into());
        }
    }
    if kc.container_log_max_workers < 1 {
        bad("containerLogMaxWorkers must be greater than or equal to 1".into());
    }
    if kc.container_log_monitor_interval < GoDuration::from_secs(3) {
        bad("containerLogMonitorInterval must be a positive time duration greater than or equal to 3s".into());
    }
    if kc.container_log_max_files <= 1 {
        bad("containerLogMaxFiles must be greater than 1".into());
    }
    if let Err(e) = parse_quantity(&kc.container_log_max_size) {
        bad(format!(
            "containerLogMaxSize (--container-log-max-size) {:?}: {e}",
            kc.container_log_max_size
        ));
    }
    validate_pod_logs_dir(&kc.pod_logs_dir, &mut bad);
    validate_eviction(kc, &mut bad);
    validate_reserved(kc, &mut bad);
    validate_addresses(kc, &mut bad);
    if !matches!(
        kc.config_map_and_secret_change_detection_strategy.as_str(),
        "Get" | "Cache" | "Watch"
    ) {
        bad(format!(
            "configMapAndSecretChangeDetectionStrategy {:?} must be one of: \"Get\", \"Cache\", \"Watch\"",
            kc.config_map_and_secret_change_detection_strategy
        ));
    }
    for (name, d) in [
        ("syncFrequency (--sync-frequency)", kc.sync_frequency),
        (
            "fileCheckFrequency (--file-check-frequency)",
            kc.file_check_frequency,
        ),
        (
            "httpCheckFrequency (--http-check-frequency)",
            kc.http_check_frequency,
        ),
        (
            "nodeStatusUpdateFrequency (--node-status-update-frequency)",
            kc.node_status_update_frequency,
        ),
        (
            "runtimeRequestTimeout (--runtime-request-timeout)",
            kc.runtime_request_timeout,
        ),
    ] {
        if d.is_zero() {
            bad(format!("{name} must be greater than 0"));
        }
    }
    errs
}

fn validate_shutdown(
    kc: &KubeletConfiguration,
    bad: &mut impl FnMut(String),
    graceful: bool,
    by_priority: bool,
) {
    let period = kc.shutdown_grace_period;
    let critical = kc.shutdown_grace_period_critical_pods;
    let one_sec = GoDuration::from_secs(1);
    if graceful {
        if critical > period {
            bad(format!(
                "shutdownGracePeriodCriticalPods {critical} must be <= shutdownGracePeriod {period}"
            ));
        }
        if !period.is_zero() && period < one_sec {
            bad(format!(
                "shutdownGracePeriod {period} must be either zero or otherwise >= 1 sec"
            ));
        }
        if !critical.is_zero() && critical < one_sec {
            bad(format!(
                "shutdownGracePeriodCriticalPods {critical} must be either zero or otherwise >= 1 sec"
            ));
        }
    } else if !period.is_zero() || !critical.is_zero() {
        bad("specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown".into());
    }
    let has_priority = !kc.shutdown_grace_period_by_pod_priority.is_empty();
    if by_priority {
        if has_priority && (!period.is_zero() || !critical.is_zero()) {
            bad("Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time".into());
        }
    } else if has_priority {
        bad("Specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority".into());
    }
}

fn validate_node_allocatable(kc: &KubeletConfiguration, bad: &mut impl FnMut(String)) {
    let list = &kc.enforce_node_allocatable;
    let has = |k: &str| list.iter().any(|v| v == k);
    if has("system-reserved") && has("system-reserved-compressible") {
        bad("both \"system-reserved\" and \"system-reserved-compressible\" cannot be specified together in enforceNodeAllocatable (--enforce-node-allocatable)".into());
    }
    if has("kube-reserved") && has("kube-reserved-compressible") {
        bad("both \"kube-reserved\" and \"kube-reserved-compressible\" cannot be specified together in enforceNodeAllocatable (--enforce-node-allocatable)".into());
    }
    let mut seen: Vec<&str> = Vec::new();
    for val in list {
        if seen.contains(&val.as_str()) {
            bad(format!(
                "duplicated enforcements {val:?} in enforceNodeAllocatable (--enforce-node-allocatable)"
            ));
            continue;
        }
        seen.push(val);
        match val.as_str() {
            "pods" => {}
            "system-reserved" | "system-reserved-compressible" => {
                if kc.system_reserved_cgroup.is_empty() {
                    bad("systemReservedCgroup (--system-reserved-cgroup) must be specified when \"system-reserved\" or \"system-reserved-compressible\" included in enforceNodeAllocatable (--enforce-node-allocatable)".into());
                }
            }
            "kube-reserved" | "kube-reserved-compressible" => {
                if kc.kube_reserved_cgroup.is_empty() {
                    bad("kubeReservedCgroup (--kube-reserved-cgroup) must be specified when \"kube-reserved\" or \"kube-reserved-compressible\" included in enforceNodeAllocatable (--enforce-node-allocatable)".into());
                }
            }
            "none" => {
                if list.len() > 1 {
                    bad("enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when \"none\" is specified".into());
                }
                continue;
            }
            other => {
                bad(format!(
                    "option {other:?} specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are \"pods\", \"system-reserved\", \"system-reserved-compressible\", \"kube-reserved\", \"kube-reserved-compressible\" or \"none\""
                ));
                continue;
            }
        }
        if !kc.cgroups_per_qos {
            bad(format!(
                "cgroupsPerQOS (--cgroups-per-qos) must be set to true when {val:?} contained in enforceNodeAllocatable (--enforce-node-allocatable)"
            ));
        }
    }
}

fn validate_pod_logs_dir(dir: &str, bad: &mut impl FnMut(String)) {
    if dir.is_empty() {
        bad("podLogsDir was not specified".into());
        return;
    }
    let p = Path::new(dir);
    if !p.is_absolute() {
        bad(format!("pod logs path {dir:?} must be absolute path"));
    }
    let clean = dir == "/"
        || (!dir.ends_with('/')
            && !dir.contains("//")
            && p.components()
                .all(|c| !matches!(c, Component::CurDir | Component::ParentDir)));
    if !clean {
        bad(format!("pod logs path {dir:?} must be normalized"));
    }
    if !dir.is_ascii() {
        bad(format!(
            "pod logs path {dir:?} mut contains ASCII characters only"
        ));
    }
}

/// Checks threshold maps the way the eviction manager parses them at startup.
fn validate_eviction(kc: &KubeletConfiguration, bad: &mut impl FnMut(String)) {
    let thresholds = [
        ("evictionHard (--eviction-hard)", &kc.eviction_hard),
        ("evictionSoft (--eviction-soft)", &kc.eviction_soft),
        (
            "evictionMinimumReclaim (--eviction-minimum-reclaim)",
            &kc.eviction_minimum_reclaim,
        ),
    ];
    for (field, map) in thresholds {
        for (signal, value) in map {
            if !EVICTION_SIGNALS.contains(&signal.as_str()) {
                bad(format!("{field}: unsupported eviction signal {signal:?}"));
                continue;
            }
            if let Some(pct) = value.strip_suffix('%') {
                match pct.parse::<f64>() {
                    Ok(p) if (0.0..=100.0).contains(&p) => {}
                    _ => bad(format!(
                        "{field}: invalid percentage {value:?} for signal {signal:?}"
                    )),
                }
            } else {
                match parse_quantity(value) {
                    Ok(q) if q >= 0.0 => {}
                    Ok(_) => bad(format!(
                        "{field}: eviction threshold {signal} must be positive: {value}"
                    )),
                    Err(e) => bad(format!(
                        "{field}: invalid value {value:?} for signal {signal:?}: {e}"
                    )),
                }
            }
        }
    }
    for (signal, period) in &kc.eviction_soft_grace_period {
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            bad(format!(
                "evictionSoftGracePeriod (--eviction-soft-grace-period): unsupported eviction signal {signal:?}"
            ));
        } else if super::duration::parse_go_duration(period).is_err() {
            bad(format!(
                "evictionSoftGracePeriod (--eviction-soft-grace-period): invalid duration {period:?} for signal {signal:?}"
            ));
        }
    }
    for signal in kc.eviction_soft.keys() {
        if EVICTION_SIGNALS.contains(&signal.as_str())
            && !kc.eviction_soft_grace_period.contains_key(signal)
        {
            bad(format!(
                "evictionSoft (--eviction-soft): grace period must be specified for the soft eviction threshold {signal}"
            ));
        }
    }
}

fn validate_reserved(kc: &KubeletConfiguration, bad: &mut impl FnMut(String)) {
    for (field, map) in [
        ("systemReserved (--system-reserved)", &kc.system_reserved),
        ("kubeReserved (--kube-reserved)", &kc.kube_reserved),
    ] {
        for (res, value) in map {
            match parse_quantity(value) {
                Ok(q) if q >= 0.0 => {}
                Ok(_) => bad(format!(
                    "{field}: resource quantity for {res:?} must not be negative: {value}"
                )),
                Err(e) => bad(format!(
                    "{field}: invalid quantity {value:?} for {res:?}: {e}"
                )),
            }
        }
    }
}

fn validate_addresses(kc: &KubeletConfiguration, bad: &mut impl FnMut(String)) {
    if kc.address.parse::<IpAddr>().is_err() {
        bad(format!(
            "address (--address) {:?} must be a valid IP address",
            kc.address
        ));
    }
    if !kc.healthz_bind_address.is_empty() && kc.healthz_bind_address.parse::<IpAddr>().is_err() {
        bad(format!(
            "healthzBindAddress (--healthz-bind-address) {:?} must be a valid IP address",
            kc.healthz_bind_address
        ));
    }
    for dns in &kc.cluster_dns {
        if dns.parse::<IpAddr>().is_err() {
            bad(format!(
                "clusterDNS (--cluster-dns) {dns:?} must be a valid IP address"
            ));
        }
    }
}

/// Parses Linux cpuset syntax ("0-3,8,10-11").
pub fn parse_cpuset(s: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let lo: u32 = lo
            .parse()
            .map_err(|_| format!("invalid cpuset element {part:?}"))?;
        let hi: u32 = hi
            .parse()
            .map_err(|_| format!("invalid cpuset element {part:?}"))?;
        if lo > hi {
            return Err(format!("invalid range {part:?} (start > end)"));
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus)
}

const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
];

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or("")
}

fn is_kubernetes_label(key: &str) -> bool {
    let ns = label_namespace(key);
    ns == "kubernetes.io"
        || ns.ends_with(".kubernetes.io")
        || ns == "k8s.io"
        || ns.ends_with(".k8s.io")
}

fn is_kubelet_label(key: &str) -> bool {
    if KUBELET_LABELS.contains(&key) {
        return true;
    }
    let ns = label_namespace(key);
    KUBELET_LABEL_NAMESPACES
        .iter()
        .any(|allowed| ns == *allowed || ns.ends_with(&format!(".{allowed}")))
}

/// Upstream `ValidateKubeletFlags`: node labels must be well formed and may only
/// use the kubernetes.io namespaces a kubelet is allowed to set.
pub fn validate_node_labels(labels: &BTreeMap<String, String>) -> Vec<String> {
    let mut errs = Vec::new();
    let unknown: Vec<&str> = labels
        .keys()
        .filter(|k| is_kubernetes_label(k) && !is_kubelet_label(k))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        errs.push(format!(
            "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{}]\n--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix ({}) or be in the specifically allowed set ({})",
            unknown.join(" "),
            KUBELET_LABEL_NAMESPACES.join(", "),
            KUBELET_LABELS.join(", ")
        ));
    }
    let mut invalid = Vec::new();
    for (k, v) in labels {
        if !names::is_qualified_name(k) {
            invalid.push(format!("'{k}' - name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        }
        if !names::is_label_value(v) {
            invalid.push(format!("'{v}' - a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        }
    }
    if !invalid.is_empty() {
        errs.push(format!("invalid node labels: {}", invalid.join("; ")));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> KubeletConfiguration {
        KubeletConfiguration::defaulted()
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(validate_config(&base()), Vec::<String>::new());
        assert_eq!(
            validate_config(&KubeletConfiguration::legacy_flag_defaults()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn errors_name_the_field_and_are_all_collected() {
        let mut c = base();
        c.healthz_port = 70000;
        c.port = 0;
        c.max_pods = -1;
        c.image_gc_high_threshold_percent = 50;
        c.image_gc_low_threshold_percent = 60;
        c.node_lease_duration_seconds = 0;
        c.cgroup_driver = "upstart".into();
        c.oom_score_adj = -1001;
        c.container_log_max_files = 1;
        c.logging.format = "xml".into();
        c.authorization.mode = "RBAC".into();
        c.registry_pull_qps = -1;
        c.sync_frequency = GoDuration::ZERO;
        c.eviction_hard
            .insert("disk.available".into(), "1Gi".into());
        let errs = validate_config(&c);
        let has = |needle: &str| errs.iter().any(|e| e.contains(needle));
        assert!(
            has(
                "invalid configuration: healthzPort (--healthz-port) 70000 must be between 1 and 65535, inclusive"
            ),
            "{errs:#?}"
        );
        assert!(has("port (--port) 0 must be between 1 and 65535"));
        assert!(has("maxPods (--max-pods) -1 must not be a negative number"));
        assert!(has(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) 60 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 50"
        ));
        assert!(has("nodeLeaseDurationSeconds must be greater than 0"));
        assert!(has("cgroupDriver (--cgroup-driver) \"upstart\""));
        assert!(has("oomScoreAdj (--oom-score-adj) -1001"));
        assert!(has("containerLogMaxFiles must be greater than 1"));
        assert!(has("logging.format"));
        assert!(has("authorization.mode (--authorization-mode) \"RBAC\""));
        assert!(has("registryPullQPS (--registry-qps) -1"));
        assert!(has(
            "syncFrequency (--sync-frequency) must be greater than 0"
        ));
        assert!(has("unsupported eviction signal \"disk.available\""));
        assert!(
            errs.iter()
                .all(|e| e.starts_with("invalid configuration: "))
        );
        assert!(errs.len() >= 13);
    }

    #[test]
    fn read_only_port_and_healthz_zero_are_allowed() {
        let mut c = base();
        c.read_only_port = 0;
        c.healthz_port = 0;
        assert!(validate_config(&c).is_empty());
        c.read_only_port = 65536;
        assert_eq!(validate_config(&c).len(), 1);
    }

    #[test]
    fn feature_gated_fields() {
        let mut c = base();
        c.cpu_cfs_quota_period = GoDuration::from_millis(50);
        assert!(validate_config(&c)[0].contains("requires feature gate CustomCPUCFSQuotaPeriod"));
        c.feature_gates
            .insert("CustomCPUCFSQuotaPeriod".into(), true);
        assert!(validate_config(&c).is_empty());
        c.shutdown_grace_period = GoDuration::from_millis(500);
        assert!(validate_config(&c)[0].contains("shutdownGracePeriod 500ms must be either zero"));
    }

    #[test]
    fn node_allocatable_rules() {
        let mut c = base();
        c.enforce_node_allocatable = vec!["pods".into(), "system-reserved".into(), "bogus".into()];
        let errs = validate_config(&c);
        assert!(errs.iter().any(|e| {
            e.contains("systemReservedCgroup (--system-reserved-cgroup) must be specified")
        }));
        assert!(
            errs.iter()
                .any(|e| e.contains("option \"bogus\" specified for enforceNodeAllocatable"))
        );
        c.enforce_node_allocatable = vec!["pods".into()];
        c.cgroups_per_qos = false;
        assert!(
            validate_config(&c)[0]
                .contains("cgroupsPerQOS (--cgroups-per-qos) must be set to true")
        );
    }

    #[test]
    fn node_labels() {
        let mut labels = BTreeMap::new();
        labels.insert("node-role.kubernetes.io/worker".to_string(), "".to_string());
        labels.insert("node.kubernetes.io/pool".to_string(), "a".to_string());
        labels.insert("example.com/ok".to_string(), "yes".to_string());
        let errs = validate_node_labels(&labels);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("[node-role.kubernetes.io/worker]"));
        let mut good = BTreeMap::new();
        good.insert("kubernetes.io/hostname".to_string(), "n1".to_string());
        good.insert("foo".to_string(), "bar".to_string());
        assert!(validate_node_labels(&good).is_empty());
        let mut bad = BTreeMap::new();
        bad.insert("-bad".to_string(), "ok".to_string());
        assert!(validate_node_labels(&bad)[0].starts_with("invalid node labels"));
    }

    /// The prefix of a label key is a DNS subdomain: 253 characters in all, with no limit on
    /// its dot-separated parts (as upstream); the name after `/` is limited to 63.
    #[test]
    fn node_label_key_lengths() {
        let long_part = "b".repeat(64);
        let mut labels = BTreeMap::new();
        labels.insert(format!("a.{long_part}.c/x"), "y".to_string());
        assert!(validate_node_labels(&labels).is_empty());
        let mut labels = BTreeMap::new();
        labels.insert(format!("a.c/{long_part}"), "y".to_string());
        assert!(validate_node_labels(&labels)[0].starts_with("invalid node labels"));
    }

    #[test]
    fn cpuset() {
        assert_eq!(parse_cpuset("0-2,5"), Ok(vec![0, 1, 2, 5]));
        assert!(parse_cpuset("3-1").is_err());
        assert!(parse_cpuset("a").is_err());
    }
}
