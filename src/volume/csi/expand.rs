//! Growing a claim's published volume while its pod runs (upstream's online NodeExpandVolume):
//! once the resizer has grown the PersistentVolume, the driver grows the file system the pod
//! sees, at the pod's target path and, for a staged volume, its staging path.

use std::path::Path;

use super::CsiError;
use super::api;
use super::client::Client;
use super::drivers::Drivers;
use super::mount::{CsiVolume, Lifecycle, capability, staging_path};

/// A claim's CSI volume that may grow: what the driver needs to grow it again.
#[derive(Clone, Debug)]
pub struct Expandable {
    /// The claim (namespace, name) whose status records the size the pod has.
    pub claim: (String, String),
    /// The volume as it was published; its secrets are not kept.
    pub vol: CsiVolume,
}

impl Expandable {
    /// A claim's persistent CSI volume; inline volumes have no claim to grow.
    pub fn of(vol: &CsiVolume, claim: (String, String)) -> Option<Self> {
        // A device grows with its driver's volume: there is no file system to grow.
        (vol.lifecycle == Lifecycle::Persistent && !vol.block).then(|| Expandable {
            claim,
            vol: CsiVolume {
                stage_secrets: Default::default(),
                publish_secrets: Default::default(),
                ..vol.clone()
            },
        })
    }
}

/// Why the driver did not grow the volume, in upstream's words.
#[derive(Debug, thiserror::Error)]
pub enum ExpandError {
    #[error("kubernetes.io/csi: driver name {0} not found in the list of registered CSI drivers")]
    NotRegistered(String),
    #[error(
        "Expander.NodeExpand found CSI plugin kubernetes.io/csi/{0} to not support node expansion"
    )]
    NotSupported(String),
    #[error("Expander.NodeExpand failed to check if node supports expansion : {0}")]
    Capabilities(CsiError),
    #[error("Expander.NodeExpand failed to expand the volume : {0}")]
    Call(CsiError),
}

impl ExpandError {
    /// FAILED_PRECONDITION: the driver cannot grow a volume in use. As upstream, the pod
    /// keeps its volume and this node does not ask again for that size.
    pub fn in_use(&self) -> bool {
        matches!(self, ExpandError::Call(CsiError::Call { status, .. })
            if status.code() == tonic::Code::FailedPrecondition)
    }
}

/// Asks the driver to grow the volume published at `target` to `bytes`.
pub async fn node_expand(
    drivers: &Drivers,
    root_dir: &Path,
    e: &Expandable,
    target: &Path,
    bytes: i64,
) -> Result<(), ExpandError> {
    let vol = &e.vol;
    let driver = drivers
        .get(&vol.driver)
        .ok_or_else(|| ExpandError::NotRegistered(vol.driver.clone()))?;
    let mut client = Client::connect(&driver.endpoint)
        .await
        .map_err(ExpandError::Capabilities)?;
    let caps = client
        .node_get_capabilities()
        .await
        .map_err(ExpandError::Capabilities)?;
    if !caps.expand_volume {
        return Err(ExpandError::NotSupported(vol.driver.clone()));
    }
    let staging = if caps.stage_unstage {
        staging_path(root_dir, &vol.driver, &vol.handle)
            .to_string_lossy()
            .into_owned()
    } else {
        String::new()
    };
    let req = api::NodeExpandVolumeRequest {
        volume_id: vol.handle.clone(),
        volume_path: target.to_string_lossy().into_owned(),
        capacity_range: Some(api::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        staging_target_path: staging,
        volume_capability: Some(capability(vol, caps.volume_mount_group)),
        secrets: Default::default(),
    };
    client
        .node_expand_volume(req)
        .await
        .map_err(ExpandError::Call)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_claimed_persistent_volumes_grow_and_keep_no_secrets() {
        let mut vol = CsiVolume {
            name: "pv-1".into(),
            driver: "d".into(),
            handle: "h".into(),
            ..Default::default()
        };
        vol.stage_secrets.insert("k".into(), "s3cret".into());
        vol.publish_secrets.insert("k".into(), "s3cret".into());
        let claim = ("ns".to_string(), "data".to_string());
        let e = Expandable::of(&vol, claim.clone()).expect("a persistent volume grows");
        assert!(e.vol.stage_secrets.is_empty() && e.vol.publish_secrets.is_empty());
        assert_eq!(e.vol.handle, "h");
        vol.lifecycle = Lifecycle::Ephemeral;
        assert!(Expandable::of(&vol, claim).is_none());
    }

    #[test]
    fn a_failed_precondition_is_the_in_use_refusal() {
        let call = |code| {
            ExpandError::Call(CsiError::Call {
                op: "NodeExpandVolume",
                status: tonic::Status::new(code, "no"),
            })
        };
        assert!(call(tonic::Code::FailedPrecondition).in_use());
        assert!(!call(tonic::Code::Internal).in_use());
        assert!(!ExpandError::NotSupported("d".into()).in_use());
        assert_eq!(
            call(tonic::Code::Internal).to_string(),
            "Expander.NodeExpand failed to expand the volume : rpc error: code = Internal desc = no"
        );
    }
}
