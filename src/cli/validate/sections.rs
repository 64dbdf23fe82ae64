//! The checks of `ValidateKubeletConfiguration`, one function per section of the
//! configuration.

use std::net::IpAddr;
use std::path::{Component, Path};

use super::{Check, parse_cpuset};
use crate::config::duration::{GoDuration, parse_go_duration};
use crate::quantity::Amount;

/// Every section, in upstream's order, which is the order problems are listed in.
pub(super) const SECTIONS: &[fn(&mut Check)] = &[
    node_lease,
    system_cgroups,
    event_limits,
    healthz_port,
    cpu_cfs_quota_period,
    image_gc,
    iptables_bits,
    api_client_limits,
    node_status_max_images,
    process_limits,
    server_ports,
    image_pulls,
    server_tls_bootstrap,
    run_once,
    register_with_taints,
    topology_manager,
    graceful_shutdown,
    memory_swap,
    crash_loop_back_off,
    node_allocatable,
    hairpin_mode,
    image_pull_credentials,
    reserved_system_cpus,
    reserved_memory,
    cgroup_driver,
    authorization_mode,
    logging_format,
    tracing,
    memory_qos,
    runtime_endpoint,
    system_log_query,
    container_logs,
    pod_logs_dir,
    eviction,
    reserved,
    addresses,
    change_detection_strategy,
    frequencies,
];

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

fn node_lease(c: &mut Check) {
    let kc = c.kc;
    if kc.node_lease_duration_seconds <= 0 {
        c.bad("nodeLeaseDurationSeconds must be greater than 0".into());
    }
}

fn system_cgroups(c: &mut Check) {
    let kc = c.kc;
    if !kc.system_cgroups.is_empty() && kc.cgroup_root.is_empty() {
        c.bad("systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified".into());
    }
}

/// Event recording rate limits.
fn event_limits(c: &mut Check) {
    let kc = c.kc;
    if kc.event_burst < 0 {
        c.bad(format!(
            "eventBurst (--event-burst) {} must not be a negative number",
            kc.event_burst
        ));
    }
    if kc.event_record_qps < 0 {
        c.bad(format!(
            "eventRecordQPS (--event-qps) {} must not be a negative number",
            kc.event_record_qps
        ));
    }
}

fn healthz_port(c: &mut Check) {
    let kc = c.kc;
    if kc.healthz_port != 0 && !port_ok(kc.healthz_port) {
        c.bad(format!(
            "healthzPort (--healthz-port) {} must be between 1 and 65535, inclusive",
            kc.healthz_port
        ));
    }
}

fn cpu_cfs_quota_period(c: &mut Check) {
    let kc = c.kc;
    let default_cfs = GoDuration::from_millis(100);
    if !c.gate("CustomCPUCFSQuotaPeriod") && kc.cpu_cfs_quota_period != default_cfs {
        c.bad(format!(
            "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {} requires feature gate CustomCPUCFSQuotaPeriod",
            kc.cpu_cfs_quota_period
        ));
    }
    if c.gate("CustomCPUCFSQuotaPeriod")
        && !(GoDuration::from_millis(1)..=GoDuration::from_secs(1))
            .contains(&kc.cpu_cfs_quota_period)
    {
        c.bad(format!(
            "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {} must be between 1ms and 1sec, inclusive",
            kc.cpu_cfs_quota_period
        ));
    }
}

/// Image garbage collection thresholds and ages.
fn image_gc(c: &mut Check) {
    let kc = c.kc;
    if !(0..=100).contains(&kc.image_gc_high_threshold_percent) {
        c.bad(format!(
            "imageGCHighThresholdPercent (--image-gc-high-threshold) {} must be between 0 and 100, inclusive",
            kc.image_gc_high_threshold_percent
        ));
    }
    if !(0..=100).contains(&kc.image_gc_low_threshold_percent) {
        c.bad(format!(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) {} must be between 0 and 100, inclusive",
            kc.image_gc_low_threshold_percent
        ));
    }
    if kc.image_gc_low_threshold_percent >= kc.image_gc_high_threshold_percent {
        c.bad(format!(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) {} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {}",
            kc.image_gc_low_threshold_percent, kc.image_gc_high_threshold_percent
        ));
    }
    if !kc.image_maximum_gc_age.is_zero() && !c.gate("ImageMaximumGCAge") {
        c.bad("ImageMaximumGCAge feature gate is required for Kubelet configuration option imageMaximumGCAge".into());
    }
    if !kc.image_maximum_gc_age.is_zero() && kc.image_maximum_gc_age <= kc.image_minimum_gc_age {
        c.bad(format!(
            "imageMaximumGCAge {} must be greater than imageMinimumGCAge {}",
            kc.image_maximum_gc_age, kc.image_minimum_gc_age
        ));
    }
}

fn iptables_bits(c: &mut Check) {
    let kc = c.kc;
    if !(0..=31).contains(&kc.iptables_drop_bit) {
        c.bad(format!(
            "iptablesDropBit (--iptables-drop-bit) {} must be between 0 and 31, inclusive",
            kc.iptables_drop_bit
        ));
    }
    if !(0..=31).contains(&kc.iptables_masquerade_bit) {
        c.bad(format!(
            "iptablesMasqueradeBit (--iptables-masquerade-bit) {} must be between 0 and 31, inclusive",
            kc.iptables_masquerade_bit
        ));
    }
}

/// Rate limits of the API server client.
fn api_client_limits(c: &mut Check) {
    let kc = c.kc;
    if kc.kube_api_burst < 0 {
        c.bad(format!(
            "kubeAPIBurst (--kube-api-burst) {} must not be a negative number",
            kc.kube_api_burst
        ));
    }
    if kc.kube_api_qps < 0 {
        c.bad(format!(
            "kubeAPIQPS (--kube-api-qps) {} must not be a negative number",
            kc.kube_api_qps
        ));
    }
}

fn node_status_max_images(c: &mut Check) {
    let kc = c.kc;
    if kc.node_status_max_images < -1 {
        c.bad(format!(
            "nodeStatusMaxImages (--node-status-max-images) {} must be -1 or greater",
            kc.node_status_max_images
        ));
    }
}

/// Open files, pods, OOM score and pods per core.
fn process_limits(c: &mut Check) {
    let kc = c.kc;
    if kc.max_open_files < 0 {
        c.bad(format!(
            "maxOpenFiles (--max-open-files) {} must not be a negative number",
            kc.max_open_files
        ));
    }
    if kc.max_pods < 0 {
        c.bad(format!(
            "maxPods (--max-pods) {} must not be a negative number",
            kc.max_pods
        ));
    }
    if !(-1000..=1000).contains(&kc.oom_score_adj) {
        c.bad(format!(
            "oomScoreAdj (--oom-score-adj) {} must be between -1000 and 1000, inclusive",
            kc.oom_score_adj
        ));
    }
    if kc.pods_per_core < 0 {
        c.bad(format!(
            "podsPerCore (--pods-per-core) {} must not be a negative number",
            kc.pods_per_core
        ));
    }
}

fn server_ports(c: &mut Check) {
    let kc = c.kc;
    if !port_ok(kc.port) {
        c.bad(format!(
            "port (--port) {} must be between 1 and 65535, inclusive",
            kc.port
        ));
    }
    if kc.read_only_port != 0 && !port_ok(kc.read_only_port) {
        c.bad(format!(
            "readOnlyPort (--read-only-port) {} must be between 0 and 65535, inclusive",
            kc.read_only_port
        ));
    }
}

/// Registry rate limits and parallel pulls.
fn image_pulls(c: &mut Check) {
    let kc = c.kc;
    if kc.registry_burst < 0 {
        c.bad(format!(
            "registryBurst (--registry-burst) {} must not be a negative number",
            kc.registry_burst
        ));
    }
    if kc.registry_pull_qps < 0 {
        c.bad(format!(
            "registryPullQPS (--registry-qps) {} must not be a negative number",
            kc.registry_pull_qps
        ));
    }
    if let Some(n) = kc.max_parallel_image_pulls {
        if n < 1 {
            c.bad(format!(
                "maxParallelImagePulls {n} must be a positive number"
            ));
        }
        if kc.serialize_image_pulls && n > 1 {
            c.bad("maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false".into());
        }
    }
}

fn server_tls_bootstrap(c: &mut Check) {
    let kc = c.kc;
    if kc.server_tls_bootstrap && !c.gate("RotateKubeletServerCertificate") {
        c.bad(
            "serverTLSBootstrap true requires feature gate RotateKubeletServerCertificate".into(),
        );
    }
}

fn run_once(c: &mut Check) {
    let kc = c.kc;
    if kc.run_once {
        c.bad(
            "runOnce (--runOnce) true, Runonce mode has been deprecated and should not be set"
                .into(),
        );
    }
}

fn register_with_taints(c: &mut Check) {
    let kc = c.kc;
    for t in &kc.register_with_taints {
        if t.key.is_empty()
            || !matches!(
                t.effect.as_str(),
                "NoSchedule" | "PreferNoSchedule" | "NoExecute"
            )
        {
            c.bad(format!(
                "invalid taint: {}={}:{}",
                t.key,
                t.value.as_deref().unwrap_or(""),
                t.effect
            ));
        }
        if t.time_added.is_some() {
            c.bad("taint.TimeAdded is not nil".into());
        }
    }
}

fn topology_manager(c: &mut Check) {
    let kc = c.kc;
    if !matches!(
        kc.topology_manager_policy.as_str(),
        "none" | "best-effort" | "restricted" | "single-numa-node"
    ) {
        c.bad(format!(
            "topologyManagerPolicy (--topology-manager-policy) {:?} must be one of: [\"none\" \"best-effort\" \"restricted\" \"single-numa-node\"]",
            kc.topology_manager_policy
        ));
    }
    if !matches!(kc.topology_manager_scope.as_str(), "container" | "pod") {
        c.bad(format!(
            "topologyManagerScope (--topology-manager-scope) {:?} must be one of: \"container\", or \"pod\"",
            kc.topology_manager_scope
        ));
    }
}

fn graceful_shutdown(c: &mut Check) {
    let kc = c.kc;
    let graceful = c.gate("GracefulNodeShutdown");
    let by_priority = c.gate("GracefulNodeShutdownBasedOnPodPriority");
    let period = kc.shutdown_grace_period;
    let critical = kc.shutdown_grace_period_critical_pods;
    let one_sec = GoDuration::from_secs(1);
    if graceful {
        if critical > period {
            c.bad(format!(
                "shutdownGracePeriodCriticalPods {critical} must be <= shutdownGracePeriod {period}"
            ));
        }
        if !period.is_zero() && period < one_sec {
            c.bad(format!(
                "shutdownGracePeriod {period} must be either zero or otherwise >= 1 sec"
            ));
        }
        if !critical.is_zero() && critical < one_sec {
            c.bad(format!(
                "shutdownGracePeriodCriticalPods {critical} must be either zero or otherwise >= 1 sec"
            ));
        }
    } else if !period.is_zero() || !critical.is_zero() {
        c.bad("specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown".into());
    }
    let has_priority = !kc.shutdown_grace_period_by_pod_priority.is_empty();
    if by_priority {
        if has_priority && (!period.is_zero() || !critical.is_zero()) {
            c.bad("Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time".into());
        }
    } else if has_priority {
        c.bad("Specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority".into());
    }
}
fn memory_swap(c: &mut Check) {
    let kc = c.kc;
    if c.gate("NodeSwap") {
        if !matches!(
            kc.memory_swap.swap_behavior.as_str(),
            "" | "NoSwap" | "LimitedSwap"
        ) {
            c.bad(format!(
                "memorySwap.swapBehavior {:?} must be one of: \"\", \"LimitedSwap\" or \"NoSwap\"",
                kc.memory_swap.swap_behavior
            ));
        }
    } else if !kc.memory_swap.swap_behavior.is_empty() {
        c.bad(
            "memorySwap.swapBehavior cannot be set when NodeSwap feature flag is disabled".into(),
        );
    }
}

fn crash_loop_back_off(c: &mut Check) {
    let kc = c.kc;
    if c.gate("KubeletCrashLoopBackOffMax") {
        match kc.crash_loop_back_off.max_container_restart_period {
            None => c.bad("FeatureGate KubeletCrashLoopBackOffMax is enabled, CrashLoopBackOff.MaxContainerRestartPeriod must be set".into()),
            Some(p) if !(GoDuration::from_secs(1)..=GoDuration::from_secs(300)).contains(&p) => c.bad(format!(
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
        c.bad("FeatureGate KubeletCrashLoopBackOffMax not enabled, CrashLoopBackOff.MaxContainerRestartPeriod must not be set".into());
    }
}

fn node_allocatable(c: &mut Check) {
    let kc = c.kc;
    let list = &kc.enforce_node_allocatable;
    let has = |k: &str| list.iter().any(|v| v == k);
    if has("system-reserved") && has("system-reserved-compressible") {
        c.bad("both \"system-reserved\" and \"system-reserved-compressible\" cannot be specified together in enforceNodeAllocatable (--enforce-node-allocatable)".into());
    }
    if has("kube-reserved") && has("kube-reserved-compressible") {
        c.bad("both \"kube-reserved\" and \"kube-reserved-compressible\" cannot be specified together in enforceNodeAllocatable (--enforce-node-allocatable)".into());
    }
    let mut seen: Vec<&str> = Vec::new();
    for val in list {
        if seen.contains(&val.as_str()) {
            c.bad(format!(
                "duplicated enforcements {val:?} in enforceNodeAllocatable (--enforce-node-allocatable)"
            ));
            continue;
        }
        seen.push(val);
        match val.as_str() {
            "pods" => {}
            "system-reserved" | "system-reserved-compressible" => {
                if kc.system_reserved_cgroup.is_empty() {
                    c.bad("systemReservedCgroup (--system-reserved-cgroup) must be specified when \"system-reserved\" or \"system-reserved-compressible\" included in enforceNodeAllocatable (--enforce-node-allocatable)".into());
                }
            }
            "kube-reserved" | "kube-reserved-compressible" => {
                if kc.kube_reserved_cgroup.is_empty() {
                    c.bad("kubeReservedCgroup (--kube-reserved-cgroup) must be specified when \"kube-reserved\" or \"kube-reserved-compressible\" included in enforceNodeAllocatable (--enforce-node-allocatable)".into());
                }
            }
            "none" => {
                if list.len() > 1 {
                    c.bad("enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when \"none\" is specified".into());
                }
                continue;
            }
            other => {
                c.bad(format!(
                    "option {other:?} specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are \"pods\", \"system-reserved\", \"system-reserved-compressible\", \"kube-reserved\", \"kube-reserved-compressible\" or \"none\""
                ));
                continue;
            }
        }
        if !kc.cgroups_per_qos {
            c.bad(format!(
                "cgroupsPerQOS (--cgroups-per-qos) must be set to true when {val:?} contained in enforceNodeAllocatable (--enforce-node-allocatable)"
            ));
        }
    }
}
fn hairpin_mode(c: &mut Check) {
    let kc = c.kc;
    if !matches!(
        kc.hairpin_mode.as_str(),
        "none" | "hairpin-veth" | "promiscuous-bridge"
    ) {
        c.bad(format!(
            "option {:?} specified for hairpinMode (--hairpin-mode). Valid options are \"none\", \"hairpin-veth\" or \"promiscuous-bridge\"",
            kc.hairpin_mode
        ));
    }
}

/// Pulled-image credential verification, behind KubeletEnsureSecretPulledImages.
fn image_pull_credentials(c: &mut Check) {
    let kc = c.kc;
    if !c.gate("KubeletEnsureSecretPulledImages") {
        if !kc.image_pull_credentials_verification_policy.is_empty() {
            c.bad("`imagePullCredentialsVerificationPolicy` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled".into());
        }
        if !kc.preloaded_images_verification_allowlist.is_empty() {
            c.bad("`preloadedImagesVerificationAllowlist` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled".into());
        }
    } else if !matches!(
        kc.image_pull_credentials_verification_policy.as_str(),
        "NeverVerify"
            | "NeverVerifyPreloadedImages"
            | "NeverVerifyAllowlistedImages"
            | "AlwaysVerify"
    ) {
        c.bad(format!(
            "option {:?} specified for imagePullCredentialsVerificationPolicy. Valid options are \"NeverVerify\", \"NeverVerifyPreloadedImages\", \"NeverVerifyAllowlistedImages\" or \"AlwaysVerify\"",
            kc.image_pull_credentials_verification_policy
        ));
    }
}

fn reserved_system_cpus(c: &mut Check) {
    let kc = c.kc;
    if !kc.reserved_system_cpus.is_empty() {
        if !kc.system_reserved_cgroup.is_empty() || !kc.kube_reserved_cgroup.is_empty() {
            c.bad("can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)".into());
        }
        if let Err(e) = parse_cpuset(&kc.reserved_system_cpus) {
            c.bad(format!(
                "unable to parse reservedSystemCPUs (--reserved-cpus) {}, error: {e}",
                kc.reserved_system_cpus
            ));
        }
    }
}

/// Upstream's validateReservedMemoryConfiguration: memory and huge pages only, none zero,
/// each NUMA node and resource once.
fn reserved_memory(c: &mut Check) {
    let mut seen = std::collections::BTreeSet::new();
    for r in &c.kc.reserved_memory {
        let node = r.numa_node;
        for (name, value) in &r.limits {
            if name != "memory" && !name.starts_with("hugepages-") {
                c.bad(format!(
                    "the limit type {name:?} for NUMA node {node} is not supported, only [memory hugepages-<HugePageSize>] is accepted"
                ));
            }
            match Amount::parse(value) {
                Ok(a) if a == Amount::ZERO => c.bad(format!(
                    "reserved memory may not be zero for NUMA node {node} and resource {name:?}"
                )),
                Ok(_) => {}
                Err(e) => c.bad(format!(
                    "reserved memory for NUMA node {node} and resource {name:?}: {e}"
                )),
            }
            if !seen.insert((node, name.clone())) {
                c.bad(format!(
                    "the reserved memory has a duplicate value for NUMA node {node} and resource {name:?}"
                ));
            }
        }
    }
}

fn cgroup_driver(c: &mut Check) {
    let kc = c.kc;
    if !matches!(kc.cgroup_driver.as_str(), "cgroupfs" | "systemd") {
        c.bad(format!(
            "cgroupDriver (--cgroup-driver) {:?} must be one of: \"cgroupfs\", \"systemd\"",
            kc.cgroup_driver
        ));
    }
}

fn authorization_mode(c: &mut Check) {
    let kc = c.kc;
    if !matches!(kc.authorization.mode.as_str(), "AlwaysAllow" | "Webhook") {
        c.bad(format!(
            "authorization.mode (--authorization-mode) {:?} must be one of: \"AlwaysAllow\", \"Webhook\"",
            kc.authorization.mode
        ));
    }
}

fn logging_format(c: &mut Check) {
    let kc = c.kc;
    if !matches!(kc.logging.format.as_str(), "text" | "json") {
        c.bad(format!(
            "logging.format: Unsupported value: {:?}: supported values: \"json\", \"text\"",
            kc.logging.format
        ));
    }
}

fn tracing(c: &mut Check) {
    let Some(t) = &c.kc.tracing else { return };
    if let Some(rate) = t.sampling_rate_per_million {
        if rate < 0 {
            c.bad(format!(
                "tracing.samplingRatePerMillion: Invalid value: {rate}: sampling rate must be positive"
            ));
        } else if rate > 1_000_000 {
            c.bad(format!(
                "tracing.samplingRatePerMillion: Invalid value: {rate}: sampling rate per million must be less than or equal to one million"
            ));
        }
    }
    if let Some(endpoint) = &t.endpoint
        && let Err(err) = crate::telemetry::trace::parse_endpoint(endpoint)
    {
        c.bad(format!(
            "tracing.endpoint: Invalid value: {endpoint:?}: {err}"
        ));
    }
}

/// Memory throttling factor and reservation policy.
fn memory_qos(c: &mut Check) {
    let kc = c.kc;
    if kc.memory_throttling_factor <= 0.0 || kc.memory_throttling_factor > 1.0 {
        c.bad(format!(
            "memoryThrottlingFactor {} must be greater than 0 and less than or equal to 1.0",
            kc.memory_throttling_factor
        ));
    }
    if !matches!(
        kc.memory_reservation_policy.as_str(),
        "" | "None" | "TieredReservation"
    ) {
        c.bad(format!(
            "option {:?} specified for memoryReservationPolicy. Valid options are \"None\" or \"TieredReservation\"",
            kc.memory_reservation_policy
        ));
    }
}

fn runtime_endpoint(c: &mut Check) {
    let kc = c.kc;
    if kc.container_runtime_endpoint.is_empty() {
        c.bad("the containerRuntimeEndpoint was not specified or empty".into());
    }
}

fn system_log_query(c: &mut Check) {
    let kc = c.kc;
    if kc.enable_system_log_query {
        if !c.gate("NodeLogQuery") {
            c.bad("NodeLogQuery feature gate is required for enableSystemLogQuery".into());
        }
        if !kc.enable_system_log_handler {
            c.bad("enableSystemLogHandler is required for enableSystemLogQuery".into());
        }
    }
}

/// Container log rotation: the workers and the monitor interval.
fn container_logs(c: &mut Check) {
    let kc = c.kc;
    if kc.container_log_max_workers < 1 {
        c.bad("containerLogMaxWorkers must be greater than or equal to 1".into());
    }
    if kc.container_log_monitor_interval < GoDuration::from_secs(3) {
        c.bad("containerLogMonitorInterval must be a positive time duration greater than or equal to 3s".into());
    }
    // containerLogMaxFiles and containerLogMaxSize are checked where upstream checks them,
    // when the log manager is built (logrotate::Policy), with its messages.
}

fn pod_logs_dir(c: &mut Check) {
    let kc = c.kc;
    let dir = kc.pod_logs_dir.as_str();
    if dir.is_empty() {
        c.bad("podLogsDir was not specified".into());
        return;
    }
    let p = Path::new(dir);
    if !p.is_absolute() {
        c.bad(format!("pod logs path {dir:?} must be absolute path"));
    }
    let clean = dir == "/"
        || (!dir.ends_with('/')
            && !dir.contains("//")
            && p.components()
                .all(|c| !matches!(c, Component::CurDir | Component::ParentDir)));
    if !clean {
        c.bad(format!("pod logs path {dir:?} must be normalized"));
    }
    if !dir.is_ascii() {
        c.bad(format!(
            "pod logs path {dir:?} mut contains ASCII characters only"
        ));
    }
}
/// Checks threshold maps the way the eviction manager parses them at startup.
fn eviction(c: &mut Check) {
    let kc = c.kc;
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
                c.bad(format!("{field}: unsupported eviction signal {signal:?}"));
                continue;
            }
            if let Some(pct) = value.strip_suffix('%') {
                match pct.parse::<f64>() {
                    Ok(p) if (0.0..=100.0).contains(&p) => {}
                    _ => c.bad(format!(
                        "{field}: invalid percentage {value:?} for signal {signal:?}"
                    )),
                }
            } else {
                match Amount::parse(value) {
                    Ok(q) if q >= Amount::ZERO => {}
                    Ok(_) => c.bad(format!(
                        "{field}: eviction threshold {signal} must be positive: {value}"
                    )),
                    Err(e) => c.bad(format!(
                        "{field}: invalid value {value:?} for signal {signal:?}: {e}"
                    )),
                }
            }
        }
    }
    for (signal, period) in &kc.eviction_soft_grace_period {
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            c.bad(format!(
                "evictionSoftGracePeriod (--eviction-soft-grace-period): unsupported eviction signal {signal:?}"
            ));
        } else if parse_go_duration(period).is_err() {
            c.bad(format!(
                "evictionSoftGracePeriod (--eviction-soft-grace-period): invalid duration {period:?} for signal {signal:?}"
            ));
        }
    }
    for signal in kc.eviction_soft.keys() {
        if EVICTION_SIGNALS.contains(&signal.as_str())
            && !kc.eviction_soft_grace_period.contains_key(signal)
        {
            c.bad(format!(
                "evictionSoft (--eviction-soft): grace period must be specified for the soft eviction threshold {signal}"
            ));
        }
    }
}
fn reserved(c: &mut Check) {
    let kc = c.kc;
    for (field, map) in [
        ("systemReserved (--system-reserved)", &kc.system_reserved),
        ("kubeReserved (--kube-reserved)", &kc.kube_reserved),
    ] {
        for (res, value) in map {
            match Amount::parse(value) {
                Ok(q) if q >= Amount::ZERO => {}
                Ok(_) => c.bad(format!(
                    "{field}: resource quantity for {res:?} must not be negative: {value}"
                )),
                Err(e) => c.bad(format!(
                    "{field}: invalid quantity {value:?} for {res:?}: {e}"
                )),
            }
        }
    }
}
fn addresses(c: &mut Check) {
    let kc = c.kc;
    if kc.address.parse::<IpAddr>().is_err() {
        c.bad(format!(
            "address (--address) {:?} must be a valid IP address",
            kc.address
        ));
    }
    if !kc.healthz_bind_address.is_empty() && kc.healthz_bind_address.parse::<IpAddr>().is_err() {
        c.bad(format!(
            "healthzBindAddress (--healthz-bind-address) {:?} must be a valid IP address",
            kc.healthz_bind_address
        ));
    }
    for dns in &kc.cluster_dns {
        if dns.parse::<IpAddr>().is_err() {
            c.bad(format!(
                "clusterDNS (--cluster-dns) {dns:?} must be a valid IP address"
            ));
        }
    }
}
fn change_detection_strategy(c: &mut Check) {
    let kc = c.kc;
    if !matches!(
        kc.config_map_and_secret_change_detection_strategy.as_str(),
        "Get" | "Cache" | "Watch"
    ) {
        c.bad(format!(
            "configMapAndSecretChangeDetectionStrategy {:?} must be one of: \"Get\", \"Cache\", \"Watch\"",
            kc.config_map_and_secret_change_detection_strategy
        ));
    }
}

/// Periods that must not be zero.
fn frequencies(c: &mut Check) {
    let kc = c.kc;
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
            c.bad(format!("{name} must be greater than 0"));
        }
    }
}
