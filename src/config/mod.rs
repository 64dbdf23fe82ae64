//! What the kubelet was told to do: the flag-only settings, the effective
//! `KubeletConfiguration` (its types and upstream's defaulting) and the Go durations they
//! use. Plain data that every subsystem reads its own settings from; `cli/` fills it from the
//! command line and the config files.

pub mod defaults;
pub mod duration;
pub mod kubelet;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;

pub use duration::GoDuration;
pub use kubelet::*;

/// The Kubernetes version this kubelet implements and reports.
pub const KUBELET_VERSION: &str = "v1.34.0";

/// Version string as printed by `--version`. The implementation name rides in the
/// semver build metadata so tools that parse `Kubernetes vX.Y.Z...` keep working.
/// Go's strconv.ParseBool, which upstream's flags and policy options use.
pub fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

pub fn version_string() -> String {
    format!(
        "{KUBELET_VERSION}+kubelet-rs.{}",
        env!("CARGO_PKG_VERSION").replace('+', "-")
    )
}

pub const DEFAULT_ROOT_DIR: &str = "/var/lib/kubelet";
pub const DEFAULT_CERT_DIR: &str = "/var/lib/kubelet/pki";
pub const DEFAULT_POD_INFRA_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// Settings that exist only as flags (upstream `KubeletFlags`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletFlags {
    pub config_file: Option<PathBuf>,
    pub config_dir: Option<PathBuf>,
    pub kubeconfig: Option<PathBuf>,
    pub bootstrap_kubeconfig: Option<PathBuf>,
    pub hostname_override: Option<String>,
    /// `--node-ip`: none, one, or an IPv4+IPv6 pair.
    pub node_ip: Vec<IpAddr>,
    pub node_labels: BTreeMap<String, String>,
    pub root_dir: PathBuf,
    pub cert_dir: PathBuf,
    /// Effective log verbosity (`-v` or `logging.verbosity`), saturated to u8.
    pub verbosity: u8,
    pub pod_infra_container_image: String,
    pub runtime_cgroups: String,
    pub cloud_provider: String,
    pub lock_file: Option<PathBuf>,
    pub exit_on_lock_contention: bool,
    pub image_credential_provider_config: Option<PathBuf>,
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    pub minimum_container_ttl_duration: GoDuration,
    pub max_per_pod_container_count: i32,
    pub max_container_count: i32,
    pub housekeeping_interval: GoDuration,
    /// Normalised names of every flag given on the command line.
    pub given: BTreeSet<String>,
}

impl Default for KubeletFlags {
    fn default() -> Self {
        Self {
            config_file: None,
            config_dir: None,
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            hostname_override: None,
            node_ip: Vec::new(),
            node_labels: BTreeMap::new(),
            root_dir: PathBuf::from(DEFAULT_ROOT_DIR),
            cert_dir: PathBuf::from(DEFAULT_CERT_DIR),
            verbosity: 0,
            pod_infra_container_image: DEFAULT_POD_INFRA_IMAGE.to_string(),
            runtime_cgroups: String::new(),
            cloud_provider: String::new(),
            lock_file: None,
            exit_on_lock_contention: false,
            image_credential_provider_config: None,
            image_credential_provider_bin_dir: None,
            minimum_container_ttl_duration: GoDuration::ZERO,
            max_per_pod_container_count: 1,
            max_container_count: -1,
            housekeeping_interval: GoDuration::from_secs(10),
            given: BTreeSet::new(),
        }
    }
}

/// Everything the kubelet was told to do.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Settings that exist only as flags.
    pub flags: KubeletFlags,
    /// The effective KubeletConfiguration: defaults, then the file, then flags.
    pub config: KubeletConfiguration,
    /// Deprecation and lenient-decoding notices, to log once logging is up.
    pub warnings: Vec<String>,
}

impl Settings {
    /// The node name: `--hostname-override` or the machine hostname, trimmed and
    /// lowercased like upstream's `GetHostname`.
    pub fn node_name(&self) -> String {
        node_name_for(self.flags.hostname_override.as_deref())
            .unwrap_or_else(|| "localhost".to_string())
    }
}

pub fn node_name_for(override_name: Option<&str>) -> Option<String> {
    let raw = match override_name {
        Some(o) if !o.trim().is_empty() => o.to_string(),
        _ => crate::sys::hostname()?,
    };
    let name = raw.trim().to_lowercase();
    (!name.is_empty()).then_some(name)
}
