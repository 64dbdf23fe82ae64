//! The settings this version parses (so upstream's configurations load) and does not act on.
//! Each one given a value other than its default is named in one warning at start, so none is
//! dropped without a word; every other setting takes effect or is refused by validation. The
//! test below holds the lists to the code: a configuration key must be in one of them, and a
//! key claimed to take effect must be read somewhere outside the parse and validation.

use crate::config::{KubeletConfiguration, Settings};

/// KubeletConfiguration keys with no effect in this version, with what is missing.
pub const CONFIG_KEYS: &[(&str, &str)] = &[
    (
        "configMapAndSecretChangeDetectionStrategy",
        "configMaps and secrets are always watched",
    ),
    ("contentType", "the API client always speaks JSON"),
    (
        "crashLoopBackOff",
        "the back-off ceiling stays upstream's default",
    ),
    ("enableContentionProfiling", "no profiling"),
    ("enableDebugFlagsHandler", "no /debug/flags/v"),
    ("enableProfilingHandler", "no /debug/pprof"),
    ("enableSystemLogQuery", "no node log query"),
    ("hairpinMode", "hairpin is the CNI plugin's"),
    ("httpCheckFrequency", "staticPodURL is not read"),
    (
        "imagePullCredentialsVerificationPolicy",
        "pulled images are not checked against credentials",
    ),
    ("kernelMemcgNotification", "memory pressure is polled"),
    ("kubeAPIBurst", "the API client is not rate limited"),
    ("kubeAPIQPS", "the API client is not rate limited"),
    ("kubeletCgroups", "the kubelet is not moved to a cgroup"),
    ("makeIPTablesUtilChains", "no iptables chains are made"),
    ("maxOpenFiles", "RLIMIT_NOFILE is not set"),
    ("memoryReservationPolicy", "no MemoryQoS"),
    ("memorySwap", "containers get no swap"),
    ("memoryThrottlingFactor", "no MemoryQoS"),
    (
        "mergeDefaultEvictionSettings",
        "given eviction thresholds replace the defaults",
    ),
    ("podCIDR", "pod addresses are the CNI plugin's"),
    (
        "preloadedImagesVerificationAllowlist",
        "pulled images are not checked against credentials",
    ),
    ("protectKernelDefaults", "kernel tunables are not checked"),
    ("qosReserved", "QoS cgroups reserve nothing"),
    ("registryBurst", "image pulls are not rate limited"),
    ("registryPullQPS", "image pulls are not rate limited"),
    ("showHiddenMetricsForVersion", "hidden metrics stay hidden"),
    (
        "singleProcessOOMKill",
        "cgroup v2 OOM kills take the whole container",
    ),
    ("staticPodURL", "static pods are read from files only"),
    ("staticPodURLHeader", "staticPodURL is not read"),
    (
        "streamingConnectionIdleTimeout",
        "upgraded streaming connections have no idle timeout",
    ),
    (
        "systemCgroups",
        "non-kernel processes are not moved to a cgroup",
    ),
    ("volumePluginDir", "no FlexVolume plugins"),
    (
        "volumeStatsAggPeriod",
        "volume usage is measured when asked for",
    ),
];

/// Flag-only settings with no effect, by flag name.
pub const FLAGS: &[(&str, &str)] = &[
    ("exit-on-lock-contention", "no lock file"),
    ("housekeeping-interval", "stats are read when asked for"),
    (
        "image-credential-provider-bin-dir",
        "no credential provider plugins",
    ),
    (
        "image-credential-provider-config",
        "no credential provider plugins",
    ),
    ("lock-file", "no lock file"),
    ("runtime-cgroups", "the runtime is not moved to a cgroup"),
];

/// The no-effect settings given a value other than the default, each with what is missing.
pub fn given(settings: &Settings) -> Vec<(&'static str, &'static str)> {
    let value = |c: &KubeletConfiguration| serde_json::to_value(c).unwrap_or_default();
    let (cfg, default) = (
        value(&settings.config),
        value(&KubeletConfiguration::defaulted()),
    );
    let mut out: Vec<(&str, &str)> = CONFIG_KEYS
        .iter()
        .filter(|(key, _)| cfg.get(key) != default.get(key))
        .copied()
        .collect();
    out.extend(
        FLAGS
            .iter()
            .filter(|(flag, _)| settings.flags.given.contains(*flag)),
    );
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use serde_json::json;

    use super::*;

    /// Keys upstream v1.34 does not act on either (its own help says so), and keys whose
    /// every value but the default is refused by validation: no warning for either.
    const UPSTREAM_NO_OP: &[&str] = &["iptablesMasqueradeBit", "iptablesDropBit"];
    const REFUSED_UNLESS_DEFAULT: &[&str] = &["runOnce"];

    #[test]
    fn the_refused_keys_are_refused() {
        let mut c = KubeletConfiguration::defaulted();
        c.run_once = true;
        assert!(!crate::cli::validate::validate_config(&c).is_empty());
    }

    /// Every identifier after a `.` in the files that act on the settings (not the parse, the
    /// validation, this module or tests), lowercased and without underscores, so that a
    /// field `kube_api_qps` read as `cfg.kube_api_qps` matches the key `kubeAPIQPS`.
    fn read_somewhere() -> BTreeSet<String> {
        fn walk(dir: &Path, out: &mut BTreeSet<String>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                if path.is_dir() {
                    if name != "config" && name != "cli" {
                        walk(&path, out);
                    }
                    continue;
                }
                if !name.ends_with(".rs")
                    || name == "tests.rs"
                    || name.ends_with("_tests.rs")
                    || name == "no_effect.rs"
                {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for part in text.split('.').skip(1) {
                    let ident: String = part
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .filter(|c| *c != '_')
                        .collect();
                    if !ident.is_empty() {
                        out.insert(ident.to_ascii_lowercase());
                    }
                }
            }
        }
        let mut out = BTreeSet::new();
        walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
        out
    }

    #[test]
    fn every_configuration_key_takes_effect_is_refused_or_is_named() {
        let keys = crate::cli::config::struct_fields::<KubeletConfiguration>();
        let no_effect: BTreeSet<&str> = CONFIG_KEYS.iter().map(|(k, _)| *k).collect();
        let quiet: BTreeSet<&str> = UPSTREAM_NO_OP
            .iter()
            .chain(REFUSED_UNLESS_DEFAULT)
            .copied()
            .collect();
        for key in no_effect.iter().chain(&quiet) {
            assert!(keys.contains(key), "{key} is not a configuration key");
        }
        let read = read_somewhere();
        let mut silent = Vec::new();
        for key in keys {
            if matches!(*key, "apiVersion" | "kind")
                || no_effect.contains(key)
                || quiet.contains(key)
            {
                continue;
            }
            if !read.contains(&key.to_ascii_lowercase()) {
                silent.push(*key);
            }
        }
        assert!(
            silent.is_empty(),
            "keys claimed to take effect that nothing outside the parse reads: {silent:?}"
        );
    }

    #[test]
    fn each_no_effect_key_given_is_named_and_the_defaults_name_none() {
        let defaulted = Settings {
            flags: Default::default(),
            config: KubeletConfiguration::defaulted(),
            warnings: Vec::new(),
        };
        assert!(given(&defaulted).is_empty());
        for (key, why) in CONFIG_KEYS {
            let mut value = serde_json::to_value(&defaulted.config).unwrap();
            let changed = match *key {
                "configMapAndSecretChangeDetectionStrategy" => json!("Get"),
                "contentType" => json!("application/json"),
                "crashLoopBackOff" => json!({"maxContainerRestartPeriod": "1m0s"}),
                "hairpinMode" => json!("hairpin-veth"),
                "httpCheckFrequency"
                | "streamingConnectionIdleTimeout"
                | "volumeStatsAggPeriod" => {
                    json!("1m7s")
                }
                "imagePullCredentialsVerificationPolicy" => json!("AlwaysVerify"),
                "kubeAPIBurst" | "kubeAPIQPS" | "maxOpenFiles" | "registryBurst"
                | "registryPullQPS" => json!(7),
                "kubeletCgroups" | "systemCgroups" => json!("/system.slice"),
                "memoryReservationPolicy" => json!("TieredReservation"),
                "memorySwap" => json!({"swapBehavior": "LimitedSwap"}),
                "memoryThrottlingFactor" => json!(0.5),
                "podCIDR" => json!("10.0.0.0/24"),
                "preloadedImagesVerificationAllowlist" => json!(["registry.example/*"]),
                "qosReserved" => json!({"memory": "50%"}),
                "showHiddenMetricsForVersion" => json!("1.33"),
                "singleProcessOOMKill" => json!(true),
                "staticPodURL" => json!("http://127.0.0.1/pods"),
                "staticPodURLHeader" => json!({"X": ["y"]}),
                "volumePluginDir" => json!("/var/lib/flex"),
                _ => match value.get(*key) {
                    Some(serde_json::Value::Bool(b)) => json!(!b),
                    _ => json!(true),
                },
            };
            value[*key] = changed;
            let config: KubeletConfiguration =
                serde_json::from_value(value).unwrap_or_else(|e| panic!("{key}: {e}"));
            let settings = Settings {
                config,
                ..defaulted.clone()
            };
            assert_eq!(given(&settings), [(*key, *why)], "{key}");
        }
        let mut flags = defaulted.clone();
        flags.flags.given.insert("lock-file".into());
        flags.flags.given.insert("root-dir".into());
        assert_eq!(given(&flags), [("lock-file", "no lock file")]);
    }
}
