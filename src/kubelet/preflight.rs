//! What the kubelet checks and prepares before any loop starts: settings this version cannot
//! honour, its own oom_score_adj, its folders, and a runtime that answers.

use std::path::Path;

use tracing::{info, warn};

use super::KubeletError;
use crate::config::Settings;
use crate::cri::RuntimeClient;
use crate::host::Host;

/// Settings this version parses (so upstream configurations load) but cannot honour yet.
/// Refusing or warning here keeps the kubelet from silently doing something else.
pub fn check_supported(settings: &Settings, host: &Host) -> Result<(), KubeletError> {
    let cfg = &settings.config;
    if cfg.fail_swap_on && host.swap_on() {
        return Err(KubeletError::Unsupported(
            "running with swap on (failSwapOn is true; turn swap off or set failSwapOn: false)"
                .into(),
        ));
    }
    for (setting, missing) in super::no_effect::given(settings) {
        warn!(
            setting,
            missing,
            "This setting is not implemented by this version of kubelet-rs and has no effect"
        );
    }
    if settings.flags.bootstrap_kubeconfig.is_some() && settings.flags.kubeconfig.is_none() {
        warn!("--bootstrap-kubeconfig needs --kubeconfig to write to; running standalone");
    }
    Ok(())
}

/// Upstream's words for cgroup v1 hosts since v1.31, in the log and in the node's event.
pub const CGROUP_V1_WARNING: &str =
    "cgroup v1 support is in maintenance mode, please migrate to cgroup v2";

/// Upstream keeps cgroup v1 in maintenance mode: on a v1 host the kubelet warns, or with
/// failCgroupV1 refuses to start. Returns whether the host is on v1 (the caller then records
/// the node's CgroupV1 event once it can).
pub fn check_cgroup_version(
    fail_cgroup_v1: bool,
    version: Option<crate::cm::layout::CgroupVersion>,
) -> Result<bool, KubeletError> {
    // No cgroup mount at all is the cgroup manager's error to report, with its path.
    if version != Some(crate::cm::layout::CgroupVersion::V1) {
        return Ok(false);
    }
    if fail_cgroup_v1 {
        return Err(KubeletError::CgroupV1Refused);
    }
    warn!("{CGROUP_V1_WARNING}");
    Ok(true)
}

/// The cgroup driver to use: the runtime's own when it says (the CRI RuntimeConfig call, as
/// upstream does since 1.28), else the configured one, which must then match the runtime's.
pub async fn cgroup_driver(
    settings: &Settings,
    cri: &RuntimeClient,
) -> Result<String, KubeletError> {
    let configured = &settings.config.cgroup_driver;
    let reported = match cri.runtime_config().await {
        Ok(resp) => resp.linux.map(|l| l.cgroup_driver),
        Err(e) if e.code() == Some(tonic::Code::Unimplemented) => {
            info!(cgroup_driver = %configured,
                  "The runtime does not report its cgroup driver (no RuntimeConfig); using the configured one");
            return Ok(configured.clone());
        }
        Err(source) => {
            return Err(KubeletError::Runtime {
                endpoint: settings.config.container_runtime_endpoint.clone(),
                source,
            });
        }
    };
    let driver = match reported.and_then(|d| crate::cri::api::CgroupDriver::try_from(d).ok()) {
        Some(crate::cri::api::CgroupDriver::Systemd) => "systemd",
        Some(crate::cri::api::CgroupDriver::Cgroupfs) => "cgroupfs",
        None => return Ok(configured.clone()),
    };
    if driver != configured {
        warn!(configured = %configured, runtime = driver,
              "cgroupDriver differs from the runtime's; using the runtime's");
    } else {
        info!(
            cgroup_driver = driver,
            "Using the cgroup driver the runtime reports"
        );
    }
    Ok(driver.to_string())
}

pub fn apply_oom_score_adj(value: i32) {
    if let Err(err) = std::fs::write("/proc/self/oom_score_adj", value.to_string()) {
        // Lowering it needs CAP_SYS_RESOURCE; running without is allowed, just less protected.
        warn!(value, %err, "Failed to set the kubelet's oom_score_adj");
    }
}

/// The root dir, its pods folder and the pod log root (`podLogsDir`).
pub fn create_dirs(root_dir: &Path, logs_root: &Path) -> Result<(), KubeletError> {
    for dir in [root_dir, &root_dir.join("pods"), logs_root] {
        std::fs::create_dir_all(dir).map_err(|source| KubeletError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// Connects to the CRI runtime and asks its version; returns the client and the runtime's
/// name (the sync loop reports it in pod statuses).
pub async fn connect_runtime(
    settings: &Settings,
) -> Result<(RuntimeClient, crate::volume::image::RuntimeVersion), KubeletError> {
    let cfg = &settings.config;
    let endpoint = &cfg.container_runtime_endpoint;
    let failed = |source| KubeletError::Runtime {
        endpoint: endpoint.clone(),
        source,
    };
    let cri = RuntimeClient::connect(
        endpoint,
        &cfg.image_service_endpoint,
        cfg.runtime_request_timeout.0,
    )
    .await
    .map_err(failed)?;
    let version = cri.version().await.map_err(failed)?;
    info!(
        runtime = %version.runtime_name,
        runtime_version = %version.runtime_version,
        api = %version.runtime_api_version,
        "Container runtime connected"
    );
    Ok((
        cri,
        crate::volume::image::RuntimeVersion {
            name: version.runtime_name,
            version: version.runtime_version,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::layout::CgroupVersion;

    #[test]
    fn cgroup_v1_warns_or_refuses_as_fail_cgroup_v1_says() {
        assert!(check_cgroup_version(false, Some(CgroupVersion::V1)).unwrap());
        let err = check_cgroup_version(true, Some(CgroupVersion::V1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is in maintenance mode"
        );
        for fail in [false, true] {
            assert!(!check_cgroup_version(fail, Some(CgroupVersion::V2)).unwrap());
            assert!(!check_cgroup_version(fail, None).unwrap());
        }
    }
}
