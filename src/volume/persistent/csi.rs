//! A CSI PersistentVolume prepared for `volume::csi::mount`, from the objects upstream reads
//! for it: the driver's CSIDriver object (attachRequired, podInfoOnMount, fsGroupPolicy; its
//! defaults when there is none), the VolumeAttachment an attach/detach controller and the
//! driver's attacher mark attached (its metadata is the publish context), and the secrets the
//! volume names for staging and publishing.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Pod, Secret, SecretReference};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kube::api::Api;

use super::claims::Bound;
use crate::volume::FailureKind;
use crate::volume::csi::api::volume_capability::access_mode::Mode;
use crate::volume::csi::mount::{CsiVolume, attachment_name};

/// The CSIDriver's settings the kubelet acts on.
struct DriverPolicy {
    attach_required: bool,
    pod_info_on_mount: bool,
    fs_group_policy: String,
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
        volume_context.extend(pod_info(pod));
    }
    let access_modes = spec.access_modes.unwrap_or_default();
    let fs_type = source.fs_type.unwrap_or_default();
    let group_policy_applies = match policy.fs_group_policy.as_str() {
        "File" => true,
        "None" => false,
        // ReadWriteOnceWithFSType, the default.
        _ => !fs_type.is_empty() && access_modes == ["ReadWriteOnce"],
    };
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
    })
}

async fn driver_policy(client: &kube::Client, driver: &str) -> Result<DriverPolicy, String> {
    let drivers: Api<CSIDriver> = Api::all(client.clone());
    let found = drivers
        .get_opt(driver)
        .await
        .map_err(|e| format!("failed to get CSIDriver {driver}: {e}"))?;
    let spec = found.map(|d| d.spec).unwrap_or_default();
    Ok(DriverPolicy {
        // Without a CSIDriver object a driver is taken to need attaching, as upstream does.
        attach_required: spec.attach_required.unwrap_or(true),
        pod_info_on_mount: spec.pod_info_on_mount.unwrap_or(false),
        fs_group_policy: spec
            .fs_group_policy
            .unwrap_or_else(|| "ReadWriteOnceWithFSType".to_string()),
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
    let va = attachments
        .get(&name)
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
    let secret = api
        .get(name)
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
fn pod_info(pod: &Pod) -> Vec<(String, String)> {
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
        ("ephemeral", "false".to_string()),
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
        let info: HashMap<String, String> = pod_info(&pod).into_iter().collect();
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
}
