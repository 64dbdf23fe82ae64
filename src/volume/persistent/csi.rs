//! A CSI volume prepared for `volume::csi::mount`, from the objects upstream reads for it: the
//! driver's CSIDriver object (attachRequired, podInfoOnMount, fsGroupPolicy,
//! volumeLifecycleModes; its defaults when there is none), the VolumeAttachment an
//! attach/detach controller and the driver's attacher mark attached (its metadata is the
//! publish context), and the secrets the volume names for staging and publishing. Either a
//! PersistentVolume's (`prepare`) or a pod's inline ephemeral volume (`prepare_inline`).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{CSIVolumeSource, Pod, Secret, SecretReference};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kube::api::Api;

use super::claims::Bound;
use crate::volume::FailureKind;
use crate::volume::csi::api::volume_capability::access_mode::Mode;
use crate::volume::csi::mount::{CsiVolume, Lifecycle, attachment_name, inline_handle};

/// The CSIDriver's settings the kubelet acts on.
struct DriverPolicy {
    attach_required: bool,
    pod_info_on_mount: bool,
    fs_group_policy: String,
    /// The lifecycle modes the object lists; None when the driver has no CSIDriver object.
    lifecycle_modes: Option<Vec<String>>,
    requires_republish: bool,
    /// (audience, expirationSeconds) of the tokens the driver is given.
    token_requests: Vec<(String, i64)>,
}

impl DriverPolicy {
    /// Whether the fsGroup is applied to a volume of `fs_type` (upstream's supportsFSGroup;
    /// `read_write_once`: the volume's access modes hold ReadWriteOnce, as an inline volume's
    /// always do).
    fn applies_fs_group(&self, fs_type: &str, read_write_once: bool) -> bool {
        match self.fs_group_policy.as_str() {
            "File" => true,
            "None" => false,
            // ReadWriteOnceWithFSType, the default.
            _ => !fs_type.is_empty() && read_write_once,
        }
    }
}

/// The volume for `volume::csi::mount`; its `mount_group` is set when the pod's fsGroup is to
/// be applied (by the driver when it offers VOLUME_MOUNT_GROUP, else by the kubelet after
/// publishing).
pub async fn prepare(
    client: &kube::Client,
    pod: &Pod,
    bound: &Bound,
) -> Result<CsiVolume, (FailureKind, String)> {
    let spec = bound.pv.spec.clone().unwrap_or_default();
    let source = spec.csi.unwrap_or_default();
    let set_up = |reason: String| (FailureKind::SetUp, reason);
    let policy = driver_policy(client, &source.driver)
        .await
        .map_err(set_up)?;
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    let publish_context = if policy.attach_required {
        attached(client, &source.volume_handle, &source.driver, node)
            .await
            .map_err(|reason| (FailureKind::WaitForAttach, reason))?
    } else {
        HashMap::new()
    };
    let stage_secrets = secrets(
        client,
        source.node_stage_secret_ref.as_ref(),
        "NodeStageSecretRef",
    )
    .await
    .map_err(|reason| (FailureKind::MountDevice, reason))?;
    let publish_secrets = secrets(
        client,
        source.node_publish_secret_ref.as_ref(),
        "NodePublishSecretRef",
    )
    .await
    .map_err(set_up)?;
    let mut volume_context: HashMap<String, String> = source
        .volume_attributes
        .unwrap_or_default()
        .into_iter()
        .collect();
    if policy.pod_info_on_mount {
        volume_context.extend(pod_info(pod, Lifecycle::Persistent));
    }
    let access_modes = spec.access_modes.unwrap_or_default();
    let fs_type = source.fs_type.unwrap_or_default();
    let group_policy_applies =
        policy.applies_fs_group(&fs_type, access_modes.iter().any(|m| m == "ReadWriteOnce"));
    let fs_group = super::fs_group(pod).filter(|_| group_policy_applies && !bound.read_only);
    Ok(CsiVolume {
        name: bound.pv.metadata.name.clone().unwrap_or_default(),
        driver: source.driver,
        handle: source.volume_handle,
        read_only: bound.read_only,
        fs_type,
        mount_flags: spec.mount_options.unwrap_or_default(),
        access_mode: access_mode(&access_modes),
        volume_context,
        publish_context,
        stage_secrets,
        publish_secrets,
        mount_group: fs_group,
        lifecycle: Lifecycle::Persistent,
        requires_republish: policy.requires_republish,
        token_requests: policy.token_requests,
        block: bound.block,
    })
}

/// A pod's inline CSI volume (`volumes[].csi`), which the driver must list as an `Ephemeral`
/// lifecycle mode in its CSIDriver object. Its handle is upstream's, derived from the pod and
/// the volume's name; it is never staged or attached. `client` is None when standalone, where
/// no CSIDriver object can be read.
pub async fn prepare_inline(
    client: Option<&kube::Client>,
    pod: &Pod,
    volume: &str,
    source: &CSIVolumeSource,
) -> Result<CsiVolume, (FailureKind, String)> {
    let new_mounter = |reason: String| (FailureKind::NewMounter, reason);
    let policy = match client {
        Some(client) => driver_policy(client, &source.driver)
            .await
            .map_err(new_mounter)?,
        None => DriverPolicy {
            attach_required: false,
            pod_info_on_mount: false,
            fs_group_policy: String::new(),
            lifecycle_modes: None,
            requires_republish: false,
            token_requests: Vec::new(),
        },
    };
    supports_ephemeral(&source.driver, policy.lifecycle_modes.as_deref()).map_err(new_mounter)?;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let secret_ref = source
        .node_publish_secret_ref
        .as_ref()
        .map(|r| SecretReference {
            name: Some(r.name.clone()),
            namespace: Some(namespace.to_string()),
        });
    let publish_secrets = match client {
        Some(client) => secrets(client, secret_ref.as_ref(), "NodePublishSecretRef")
            .await
            .map_err(|reason| (FailureKind::SetUp, reason))?,
        None => HashMap::new(),
    };
    let mut volume_context: HashMap<String, String> = source
        .volume_attributes
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    if policy.pod_info_on_mount {
        volume_context.extend(pod_info(pod, Lifecycle::Ephemeral));
    }
    let fs_type = source.fs_type.clone().unwrap_or_default();
    let read_only = source.read_only.unwrap_or(false);
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let fs_group =
        super::fs_group(pod).filter(|_| policy.applies_fs_group(&fs_type, true) && !read_only);
    Ok(CsiVolume {
        name: volume.to_string(),
        driver: source.driver.clone(),
        handle: inline_handle(uid, volume),
        read_only,
        fs_type,
        mount_flags: Vec::new(),
        access_mode: Mode::SingleNodeWriter,
        volume_context,
        publish_context: HashMap::new(),
        stage_secrets: HashMap::new(),
        publish_secrets,
        mount_group: fs_group,
        lifecycle: Lifecycle::Ephemeral,
        requires_republish: policy.requires_republish,
        token_requests: policy.token_requests,
        block: false,
    })
}

/// Whether the driver takes inline volumes, in upstream's words when it does not.
fn supports_ephemeral(driver: &str, modes: Option<&[String]>) -> Result<(), String> {
    match modes {
        None => Err(format!(
            "volume mode \"Ephemeral\" not supported by driver {driver} (no CSIDriver object)"
        )),
        Some(modes) if modes.iter().any(|m| m == "Ephemeral") => Ok(()),
        Some(modes) => {
            let quoted: Vec<String> = modes.iter().map(|m| format!("{m:?}")).collect();
            Err(format!(
                "volume mode \"Ephemeral\" not supported by driver {driver} (only supports [{}])",
                quoted.join(" ")
            ))
        }
    }
}

async fn driver_policy(client: &kube::Client, driver: &str) -> Result<DriverPolicy, String> {
    let drivers: Api<CSIDriver> = Api::all(client.clone());
    let found = super::read(drivers.get_opt(driver))
        .await
        .map_err(|e| format!("failed to get CSIDriver {driver}: {e}"))?;
    let lifecycle_modes = found.as_ref().map(|d| {
        // The API server's default for an object that lists none.
        d.spec
            .volume_lifecycle_modes
            .clone()
            .unwrap_or_else(|| vec!["Persistent".to_string()])
    });
    let spec = found.map(|d| d.spec).unwrap_or_default();
    Ok(DriverPolicy {
        lifecycle_modes,
        // Without a CSIDriver object a driver is taken to need attaching, as upstream does.
        attach_required: spec.attach_required.unwrap_or(true),
        pod_info_on_mount: spec.pod_info_on_mount.unwrap_or(false),
        fs_group_policy: spec
            .fs_group_policy
            .unwrap_or_else(|| "ReadWriteOnceWithFSType".to_string()),
        requires_republish: spec.requires_republish.unwrap_or(false),
        token_requests: spec
            .token_requests
            .unwrap_or_default()
            .into_iter()
            .map(|t| {
                let seconds = t
                    .expiration_seconds
                    .unwrap_or(crate::podinputs::tokens::DEFAULT_EXPIRATION_SECONDS);
                (t.audience, seconds)
            })
            .collect(),
    })
}

/// The publish context of an attached volume, or why it is not attached (yet).
async fn attached(
    client: &kube::Client,
    handle: &str,
    driver: &str,
    node: &str,
) -> Result<HashMap<String, String>, String> {
    let name = attachment_name(handle, driver, node);
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let va = super::read(attachments.get(&name))
        .await
        .map_err(|e| format!("volume {handle} has GET error for volume attachment {name}: {e}"))?;
    let status = va.status.unwrap_or_default();
    if let Some(err) = status.attach_error.and_then(|e| e.message) {
        return Err(format!("attachment failed for volume {handle}: {err}"));
    }
    if !status.attached {
        return Err(format!(
            "volume {handle} is not attached to node {node} yet (VolumeAttachment {name})"
        ));
    }
    Ok(status
        .attachment_metadata
        .unwrap_or_default()
        .into_iter()
        .collect())
}

async fn secrets(
    client: &kube::Client,
    reference: Option<&SecretReference>,
    what: &str,
) -> Result<HashMap<String, String>, String> {
    let Some(r) = reference else {
        return Ok(HashMap::new());
    };
    let namespace = r.namespace.as_deref().unwrap_or("default");
    let name = r.name.as_deref().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = super::read(api.get(name))
        .await
        .map_err(|e| format!("fetching {what} {namespace}/{name} failed: {e}"))?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect())
}

/// The `csi.storage.k8s.io/*` keys a driver with podInfoOnMount gets.
fn pod_info(pod: &Pod, lifecycle: Lifecycle) -> Vec<(String, String)> {
    let m = &pod.metadata;
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".to_string());
    [
        ("pod.name", m.name.clone().unwrap_or_default()),
        ("pod.namespace", m.namespace.clone().unwrap_or_default()),
        ("pod.uid", m.uid.clone().unwrap_or_default()),
        ("serviceAccount.name", sa),
        ("ephemeral", (lifecycle == Lifecycle::Ephemeral).to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("csi.storage.k8s.io/{k}"), v))
    .collect()
}

/// The CSI access mode of the volume's first access mode, as upstream maps it.
fn access_mode(modes: &[String]) -> Mode {
    match modes.first().map(String::as_str) {
        Some("ReadOnlyMany") => Mode::MultiNodeReaderOnly,
        Some("ReadWriteMany") => Mode::MultiNodeMultiWriter,
        Some("ReadWriteOncePod") => Mode::SingleNodeSingleWriter,
        _ => Mode::SingleNodeWriter,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_info_and_access_modes_as_upstream_gives_them() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("shop".into());
        pod.metadata.uid = Some("u-1".into());
        let info: HashMap<String, String> =
            pod_info(&pod, Lifecycle::Persistent).into_iter().collect();
        assert_eq!(info["csi.storage.k8s.io/pod.name"], "web");
        assert_eq!(info["csi.storage.k8s.io/pod.namespace"], "shop");
        assert_eq!(info["csi.storage.k8s.io/pod.uid"], "u-1");
        assert_eq!(info["csi.storage.k8s.io/serviceAccount.name"], "default");
        assert_eq!(info["csi.storage.k8s.io/ephemeral"], "false");
        let modes = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            access_mode(&modes(&["ReadWriteOnce"])),
            Mode::SingleNodeWriter
        );
        assert_eq!(
            access_mode(&modes(&["ReadOnlyMany"])),
            Mode::MultiNodeReaderOnly
        );
        assert_eq!(
            access_mode(&modes(&["ReadWriteMany", "ReadOnlyMany"])),
            Mode::MultiNodeMultiWriter
        );
        assert_eq!(access_mode(&[]), Mode::SingleNodeWriter);
    }

    #[test]
    fn inline_volumes_need_a_driver_that_lists_them() {
        // sha256("u-1" + "scratch"), as upstream names the volume to its driver.
        let handle = inline_handle("u-1", "scratch");
        assert!(
            handle.starts_with("csi-") && handle.len() == 4 + 64,
            "{handle}"
        );
        assert_ne!(handle, inline_handle("u-2", "scratch"));
        assert_eq!(
            supports_ephemeral("d.csi", None).unwrap_err(),
            r#"volume mode "Ephemeral" not supported by driver d.csi (no CSIDriver object)"#
        );
        let modes = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            supports_ephemeral("d.csi", Some(&modes(&["Persistent"]))).unwrap_err(),
            r#"volume mode "Ephemeral" not supported by driver d.csi (only supports ["Persistent"])"#
        );
        assert!(supports_ephemeral("d.csi", Some(&modes(&["Persistent", "Ephemeral"]))).is_ok());
        let policy = |p: &str| DriverPolicy {
            attach_required: false,
            pod_info_on_mount: false,
            fs_group_policy: p.to_string(),
            lifecycle_modes: None,
            requires_republish: false,
            token_requests: Vec::new(),
        };
        assert!(policy("ReadWriteOnceWithFSType").applies_fs_group("ext4", true));
        assert!(!policy("ReadWriteOnceWithFSType").applies_fs_group("", true));
        assert!(!policy("ReadWriteOnceWithFSType").applies_fs_group("ext4", false));
        assert!(policy("File").applies_fs_group("", false));
        assert!(!policy("None").applies_fs_group("ext4", true));
    }
}
