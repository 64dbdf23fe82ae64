//! Feature gates as far as validation and defaults depend on them.

use std::collections::BTreeMap;

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
