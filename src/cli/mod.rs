//! Command line and configuration file handling, compatible with the upstream kubelet.
//!
//! Precedence matches upstream: built-in defaults, then the `--config` file (with
//! v1beta1 defaulting), then `--config-dir` drop-ins, then every config-backed flag
//! that was actually given on the command line, in command-line order.

pub mod config;
mod flags;
pub mod validate;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;

pub use flags::FlagError;

use flags::Setter;

use crate::config::{
    KUBELET_VERSION, KubeletConfiguration, KubeletFlags, Settings, node_name_for, version_string,
};

/// Why the kubelet will not start with this command line.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// `--help`: print the text to stdout and exit 0.
    #[error("{0}")]
    Help(String),
    /// `--version`: print the text to stdout and exit 0.
    #[error("{0}")]
    Version(String),
    /// A flag is unknown or its value does not parse.
    #[error("failed to parse kubelet flag: {0}")]
    Usage(#[from] FlagError),
    /// The `--config` file (or a drop-in) could not be read or decoded.
    #[error("failed to load kubelet config file, path: {}, error: {source}", path.display())]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// Why it could not be loaded.
        source: config::ConfigError,
    },
    /// The merged settings break upstream's validation rules (each message names the field).
    #[error("failed to validate kubelet flags and configuration, error: [{}]", .0.join(", "))]
    Invalid(Vec<String>),
}

impl CliError {
    /// Process exit status: 0 for help and version, 1 otherwise (like upstream).
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Help(_) | CliError::Version(_) => 0,
            _ => 1,
        }
    }
}

/// Parses the command line (`args[0]` is the program name), loads the config file
/// and drop-ins, applies flags given explicitly, and validates the result.
pub fn parse<I, T>(args: I) -> Result<Settings, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<String> = args
        .into_iter()
        .skip(1)
        .map(|a| a.into().to_string_lossy().into_owned())
        .collect();
    let occurrences = flags::tokenize(&args)?;

    let mut kf = KubeletFlags::default();
    let mut warnings = Vec::new();
    let mut warned = BTreeSet::new();
    let mut help = false;
    let mut version = None;
    // Config-backed values are checked against a scratch config now so that a bad
    // value is reported before --help or config loading, as upstream does.
    let mut scratch = KubeletConfiguration::defaulted();
    let mut seen = BTreeSet::new();
    for occ in &occurrences {
        let name = occ.def.name;
        let first = seen.insert(name);
        kf.given.insert(name.to_string());
        if let Some(w) = flags::usage_warning(occ.def)
            && warned.insert(name)
        {
            warnings.push(w);
        }
        match occ.def.setter {
            Setter::Help => help = flags::parse_bool(&occ.value).map_err(|e| occ.invalid(e))?,
            Setter::Version => version = Some(occ),
            Setter::Flags(set) => set(&mut kf, &occ.value).map_err(|e| occ.invalid(e))?,
            Setter::Config(set) => {
                set(&mut scratch, &occ.value, first).map_err(|e| occ.invalid(e))?
            }
            Setter::Ignored => {}
        }
    }
    if help {
        return Err(CliError::Help(flags::usage()));
    }
    if let Some(occ) = version {
        match occ.value.as_str() {
            "raw" => return Err(CliError::Version(raw_version())),
            other => {
                let wanted = flags::parse_bool(other).map_err(|e| occ.invalid(e))?;
                if wanted {
                    return Err(CliError::Version(format!(
                        "Kubernetes {}",
                        version_string()
                    )));
                }
            }
        }
    }

    let mut config = match &kf.config_file {
        Some(path) => {
            let loaded = config::load_file(path).map_err(|source| CliError::ConfigFile {
                path: path.clone(),
                source,
            })?;
            warnings.extend(loaded.warnings);
            loaded.config
        }
        None => KubeletConfiguration::legacy_flag_defaults(),
    };
    if let Some(dir) = &kf.config_dir {
        let merged = config::merge_dropins(config, dir).map_err(|source| CliError::ConfigFile {
            path: dir.clone(),
            source,
        })?;
        warnings.extend(merged.warnings);
        config = merged.config;
    }

    let mut seen = BTreeSet::new();
    for occ in &occurrences {
        if let Setter::Config(set) = occ.def.setter {
            let first = seen.insert(occ.def.name);
            set(&mut config, &occ.value, first).map_err(|e| occ.invalid(e))?;
        }
    }
    kf.verbosity = u8::try_from(config.logging.verbosity).unwrap_or(u8::MAX);

    let mut errors = validate::validate_config(&config);
    errors.extend(validate::validate_node_labels(&kf.node_labels));
    if !kf.cloud_provider.is_empty() && kf.cloud_provider != "external" {
        errors.push(format!(
            "cloud provider {:?} was specified, but built-in cloud providers are disabled. Please set --cloud-provider=external and migrate to an external cloud provider",
            kf.cloud_provider
        ));
    }
    if node_name_for(kf.hostname_override.as_deref()).is_none() {
        errors.push("empty hostname is invalid".to_string());
    }
    if !errors.is_empty() {
        return Err(CliError::Invalid(errors));
    }
    Ok(Settings {
        flags: kf,
        config,
        warnings,
    })
}

fn raw_version() -> String {
    let (major, minor) = KUBELET_VERSION
        .trim_start_matches('v')
        .split_once('.')
        .map(|(ma, rest)| (ma, rest.split('.').next().unwrap_or("")))
        .unwrap_or(("", ""));
    format!(
        "version.Info{{Major:{major:?}, Minor:{minor:?}, GitVersion:{:?}, GitCommit:{:?}, GitTreeState:{:?}, BuildDate:\"\", GoVersion:\"\", Compiler:\"rustc\", Platform:\"{}/{}\"}}",
        version_string(),
        // Stamped by build.rs: the commit this binary is built from, and whether its sources
        // differed from it.
        env!("KRS_GIT_COMMIT"),
        env!("KRS_GIT_TREE_STATE"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn run(list: &[&str]) -> Result<Settings, CliError> {
        let mut v = vec!["kubelet".to_string()];
        v.extend(list.iter().map(|s| s.to_string()));
        parse(v)
    }

    fn ok(list: &[&str]) -> Settings {
        match run(list) {
            Ok(s) => s,
            Err(e) => panic!("parse {list:?}: {e}"),
        }
    }

    fn write_config(dir: &tempfile::TempDir, body: &str) -> String {
        let path = dir.path().join("kubelet.yaml");
        if let Err(e) = std::fs::write(&path, format!("{HEADER}{body}")) {
            panic!("write: {e}");
        }
        path.to_string_lossy().into_owned()
    }

    fn tmp() -> tempfile::TempDir {
        match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("tempdir: {e}"),
        }
    }

    #[test]
    fn no_args_uses_legacy_flag_defaults() {
        let s = ok(&["--hostname-override=node-a"]);
        assert_eq!(s.flags.root_dir, PathBuf::from("/var/lib/kubelet"));
        assert_eq!(s.flags.cert_dir, PathBuf::from("/var/lib/kubelet/pki"));
        assert_eq!(
            s.flags.pod_infra_container_image,
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(s.config.read_only_port, 10255);
        assert!(s.config.authentication.anonymous.enabled);
        assert_eq!(s.config.authorization.mode, "AlwaysAllow");
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn flags_land_in_settings() {
        let s = ok(&[
            "--hostname-override=Node-A ",
            "--register-node=false",
            "--node-labels=a=b,c=d",
            "--node-labels",
            "e=f",
            "--node-ip=10.0.0.5",
            "-v=4",
            "--max-pods",
            "42",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--container-runtime-endpoint=unix:///run/crio/crio.sock",
        ]);
        assert!(!s.config.register_node);
        assert_eq!(s.flags.node_labels.len(), 3);
        assert_eq!(s.flags.node_labels["c"], "d");
        assert_eq!(
            s.flags.node_ip,
            vec![
                "10.0.0.5"
                    .parse::<IpAddr>()
                    .unwrap_or(IpAddr::from([0, 0, 0, 0]))
            ]
        );
        assert_eq!(s.flags.verbosity, 4);
        assert_eq!(s.config.logging.verbosity, 4);
        assert_eq!(s.config.max_pods, 42);
        assert_eq!(
            s.flags.kubeconfig,
            Some(PathBuf::from("/etc/kubernetes/kubelet.conf"))
        );
        assert_eq!(
            s.config.container_runtime_endpoint,
            "unix:///run/crio/crio.sock"
        );
        assert_eq!(s.node_name(), "node-a");
        assert!(s.flags.given.contains("node-labels"));
        assert!(
            s.warnings.iter().any(|w| w.starts_with("Flag --max-pods has been deprecated, This parameter should be set via the config file")),
            "{:?}",
            s.warnings
        );
        assert!(
            !s.warnings.iter().any(|w| w.contains("--v ")),
            "-v is not deprecated"
        );
    }

    #[test]
    fn unknown_flag_is_a_usage_error() {
        let e = run(&["--no-such-flag"]).err();
        assert!(
            matches!(&e, Some(CliError::Usage(m)) if m.to_string() == "unknown flag: --no-such-flag"),
            "{e:?}"
        );
        assert_eq!(e.map(|e| e.exit_code()), Some(1));
        let e = run(&["--max-pods=lots"]).err();
        assert!(matches!(e, Some(CliError::Usage(m)) if m.to_string().contains("\"--max-pods\"")));
    }

    #[test]
    fn removed_flags_are_ignored_with_a_warning() {
        let s = ok(&[
            "--hostname-override=n",
            "--network-plugin",
            "cni",
            "--container-runtime=remote",
            "--allow-privileged",
            "--logtostderr=true",
            "--pod-infra-container-image=registry.k8s.io/pause:3.9",
        ]);
        for flag in [
            "--network-plugin",
            "--container-runtime",
            "--allow-privileged",
            "--logtostderr",
        ] {
            assert!(
                s.warnings
                    .iter()
                    .any(|w| w.starts_with(&format!("Flag {flag} is not supported"))),
                "{flag}: {:?}",
                s.warnings
            );
        }
        assert!(s.warnings.iter().any(|w| w.starts_with(
            "Flag --pod-infra-container-image has been deprecated, will be removed in 1.35"
        )));
        assert_eq!(
            s.flags.pod_infra_container_image,
            "registry.k8s.io/pause:3.9"
        );
    }

    #[test]
    fn help_and_version_exit_zero() {
        let h = run(&["--help"]).err();
        assert!(matches!(&h, Some(CliError::Help(t)) if t.contains("--config string")));
        assert_eq!(h.map(|e| e.exit_code()), Some(0));
        let v = run(&["--version"]).err();
        assert!(
            matches!(&v, Some(CliError::Version(t)) if t.starts_with("Kubernetes v1.34.0+kubelet-rs")),
            "{v:?}"
        );
        assert_eq!(v.map(|e| e.exit_code()), Some(0));
        assert!(
            matches!(run(&["--version=raw"]), Err(CliError::Version(t)) if t.contains("Minor:\"34\""))
        );
        assert!(run(&["--version=false", "--hostname-override=n"]).is_ok());
    }

    #[test]
    fn config_file_then_explicit_flags() {
        let dir = tmp();
        let path = write_config(
            &dir,
            "maxPods: 50\nclusterDomain: cluster.local\nregisterNode: false\nfeatureGates:\n  A: true\n  B: true\n",
        );
        let s = ok(&[
            "--config",
            &path,
            "--hostname-override=n",
            "--cluster-domain=example.org",
            "--feature-gates=B=false",
        ]);
        assert_eq!(s.config.max_pods, 50, "file value kept when flag not given");
        assert!(!s.config.register_node);
        assert_eq!(s.config.cluster_domain, "example.org", "explicit flag wins");
        assert_eq!(s.config.feature_gates.get("A"), Some(&true));
        assert_eq!(s.config.feature_gates.get("B"), Some(&false));
        // v1beta1 defaults, not legacy flag defaults, apply with a file.
        assert_eq!(s.config.read_only_port, 0);
        assert!(!s.config.authentication.anonymous.enabled);
        assert_eq!(s.config.authorization.mode, "Webhook");
        // Flags given before --config still override the file.
        let s = ok(&[
            "--max-pods=7",
            "--hostname-override=n",
            &format!("--config={path}"),
        ]);
        assert_eq!(s.config.max_pods, 7);
    }

    #[test]
    fn config_file_problems() {
        let e = run(&["--config=/nonexistent/kubelet.yaml"]).err();
        assert!(
            matches!(&e, Some(CliError::ConfigFile { path, .. }) if path == &PathBuf::from("/nonexistent/kubelet.yaml"))
        );
        let dir = tmp();
        let path = write_config(&dir, "maxPods: 5\nnotAField: true\n");
        let s = ok(&["--config", &path, "--hostname-override=n"]);
        assert_eq!(s.config.max_pods, 5);
        assert!(
            s.warnings
                .iter()
                .any(|w| w.contains("unknown field \"notAField\"")),
            "{:?}",
            s.warnings
        );
        let path = write_config(&dir, "healthzPort: 70000\nport: 99999\n");
        let e = run(&["--config", &path, "--hostname-override=n"]).err();
        match e {
            Some(CliError::Invalid(errs)) => {
                assert!(
                    errs.iter()
                        .any(|m| m.contains("healthzPort (--healthz-port) 70000"))
                );
                assert!(errs.iter().any(|m| m.contains("port (--port) 99999")));
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn json_config_file() {
        let dir = tmp();
        let path = dir.path().join("kubelet.json");
        let body = r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","cgroupDriver":"systemd","evictionHard":{"memory.available":"200Mi"}}"#;
        if let Err(e) = std::fs::write(&path, body) {
            panic!("write: {e}");
        }
        let p = path.to_string_lossy().into_owned();
        let s = ok(&[
            "--config",
            &p,
            "--hostname-override=n",
            "--eviction-hard=nodefs.available<1%",
        ]);
        assert_eq!(s.config.cgroup_driver, "systemd");
        assert_eq!(
            s.config.eviction_hard.len(),
            1,
            "flag map replaces file map"
        );
        assert_eq!(s.config.eviction_hard["nodefs.available"], "1%");
    }

    #[test]
    fn invalid_labels_and_cloud_provider() {
        let e = run(&[
            "--hostname-override=n",
            "--node-labels=node-role.kubernetes.io/master=",
            "--cloud-provider=aws",
        ])
        .err();
        match e {
            Some(CliError::Invalid(errs)) => {
                assert_eq!(errs.len(), 2, "{errs:?}");
                assert!(errs[0].contains("--node-labels"));
                assert!(errs[1].contains("cloud provider \"aws\""));
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
        assert!(run(&["--hostname-override=n", "--cloud-provider=external"]).is_ok());
    }

    #[test]
    fn version_string_is_semver_with_build_metadata() {
        let v = version_string();
        assert!(v.starts_with("v1.34.0+kubelet-rs."));
        let meta = v.split_once('+').map(|(_, m)| m).unwrap_or("");
        assert!(
            meta.split('.')
                .all(|id| !id.is_empty()
                    && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        );
    }
}
