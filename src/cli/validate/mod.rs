//! Validation of the effective configuration, following upstream's
//! `ValidateKubeletConfiguration` and `ValidateKubeletFlags`. Every problem is
//! collected; messages use upstream's wording so operators recognise them.

mod gates;
mod labels;
mod sections;

pub use gates::feature_enabled;
pub use labels::validate_node_labels;

use crate::config::KubeletConfiguration;

/// The configuration under validation and the problems found so far.
struct Check<'a> {
    kc: &'a KubeletConfiguration,
    errs: Vec<String>,
}

impl Check<'_> {
    fn bad(&mut self, msg: String) {
        self.errs.push(format!("invalid configuration: {msg}"));
    }

    fn gate(&self, name: &str) -> bool {
        feature_enabled(&self.kc.feature_gates, name)
    }
}

/// Validates the merged configuration; returns all problems found.
pub fn validate_config(kc: &KubeletConfiguration) -> Vec<String> {
    let mut check = Check {
        kc,
        errs: Vec::new(),
    };
    for section in sections::SECTIONS {
        section(&mut check);
    }
    check.errs
}

/// Why a cpuset does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpusetError {
    #[error("invalid cpuset element {0:?}")]
    Element(String),
    #[error("invalid range {0:?} (start > end)")]
    Range(String),
}

/// Parses Linux cpuset syntax ("0-3,8,10-11").
pub fn parse_cpuset(s: &str) -> Result<Vec<u32>, CpusetError> {
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
        let element = || CpusetError::Element(part.to_string());
        let lo: u32 = lo.parse().map_err(|_| element())?;
        let hi: u32 = hi.parse().map_err(|_| element())?;
        if lo > hi {
            return Err(CpusetError::Range(part.to_string()));
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::duration::GoDuration;

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
        c.container_log_max_workers = 0;
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
        assert!(has(
            "containerLogMaxWorkers must be greater than or equal to 1"
        ));
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
    fn tracing_as_upstream_validates_it() {
        use crate::config::TracingConfiguration;
        let mut c = base();
        let set = |c: &mut KubeletConfiguration, endpoint: Option<&str>, rate: Option<i32>| {
            c.tracing = Some(TracingConfiguration {
                endpoint: endpoint.map(str::to_string),
                sampling_rate_per_million: rate,
            });
        };
        set(&mut c, None, None);
        assert!(validate_config(&c).is_empty(), "an empty block is valid");
        set(&mut c, Some("localhost:4317"), Some(1_000_000));
        assert!(validate_config(&c).is_empty());
        set(&mut c, Some("unix:///run/otel.sock"), Some(0));
        assert!(validate_config(&c).is_empty());
        set(&mut c, None, Some(-1));
        assert_eq!(
            validate_config(&c),
            [
                "invalid configuration: tracing.samplingRatePerMillion: Invalid value: -1: sampling rate must be positive"
            ]
        );
        set(&mut c, None, Some(1_000_001));
        assert_eq!(
            validate_config(&c),
            [
                "invalid configuration: tracing.samplingRatePerMillion: Invalid value: 1000001: sampling rate per million must be less than or equal to one million"
            ]
        );
        set(&mut c, Some("http://collector:4317"), None);
        assert_eq!(
            validate_config(&c),
            [
                "invalid configuration: tracing.endpoint: Invalid value: \"http://collector:4317\": unsupported scheme: http.  Options are none, dns, unix, or unix-abstract.  See https://github.com/grpc/grpc/blob/master/doc/naming.md"
            ]
        );
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
