//! Calls to one driver's Node service. Like upstream, every operation dials the driver's
//! socket afresh: a driver restarted under the same socket is simply reached again.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use tonic::transport::Channel;

use super::CsiError;
use super::api;
use super::api::node_client::NodeClient;

/// Upstream's bound on a CSI call (csiTimeout), which drivers are written against.
pub const CSI_TIMEOUT: Duration = Duration::from_secs(120);
/// How long reaching the socket may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The Node service capabilities the kubelet acts on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCapabilities {
    pub stage_unstage: bool,
    pub volume_mount_group: bool,
    pub get_volume_stats: bool,
    pub expand_volume: bool,
}

/// What NodeGetVolumeStats says of a published volume; a count the driver left out is None.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeStats {
    pub available_bytes: Option<u64>,
    pub capacity_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
    pub inodes_free: Option<u64>,
    pub inodes: Option<u64>,
    pub inodes_used: Option<u64>,
}

/// What NodeGetInfo says about this node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub node_id: String,
    pub max_volumes: i64,
    /// Topology segments (label key → value).
    pub topology: BTreeMap<String, String>,
}

pub struct Client {
    node: NodeClient<Channel>,
}

impl Client {
    pub async fn connect(endpoint: &Path) -> Result<Self, CsiError> {
        let channel = crate::grpc_uds::dial(endpoint, DIAL_TIMEOUT)
            .await
            .map_err(|source| CsiError::Dial {
                endpoint: endpoint.display().to_string(),
                source,
            })?;
        Ok(Self {
            node: NodeClient::new(channel),
        })
    }

    pub async fn node_get_info(&mut self) -> Result<NodeInfo, CsiError> {
        let reply = call(
            "NodeGetInfo",
            self.node.node_get_info(api::NodeGetInfoRequest {}),
        )
        .await?;
        Ok(NodeInfo {
            node_id: reply.node_id,
            max_volumes: reply.max_volumes_per_node,
            topology: reply
                .accessible_topology
                .map(|t| t.segments.into_iter().collect())
                .unwrap_or_default(),
        })
    }
}

impl Client {
    pub async fn node_get_capabilities(&mut self) -> Result<NodeCapabilities, CsiError> {
        use api::node_service_capability::{Type, rpc::Type as Rpc};
        let reply = call(
            "NodeGetCapabilities",
            self.node
                .node_get_capabilities(api::NodeGetCapabilitiesRequest {}),
        )
        .await?;
        let mut caps = NodeCapabilities::default();
        for c in reply.capabilities {
            let Some(Type::Rpc(rpc)) = c.r#type else {
                continue;
            };
            match Rpc::try_from(rpc.r#type) {
                Ok(Rpc::StageUnstageVolume) => caps.stage_unstage = true,
                Ok(Rpc::VolumeMountGroup) => caps.volume_mount_group = true,
                Ok(Rpc::GetVolumeStats) => caps.get_volume_stats = true,
                Ok(Rpc::ExpandVolume) => caps.expand_volume = true,
                _ => {}
            }
        }
        Ok(caps)
    }

    pub async fn node_stage_volume(
        &mut self,
        req: api::NodeStageVolumeRequest,
    ) -> Result<(), CsiError> {
        call("NodeStageVolume", self.node.node_stage_volume(req))
            .await
            .map(drop)
    }

    pub async fn node_unstage_volume(
        &mut self,
        volume_id: &str,
        staging_target_path: &str,
    ) -> Result<(), CsiError> {
        let req = api::NodeUnstageVolumeRequest {
            volume_id: volume_id.to_string(),
            staging_target_path: staging_target_path.to_string(),
        };
        call("NodeUnstageVolume", self.node.node_unstage_volume(req))
            .await
            .map(drop)
    }

    pub async fn node_publish_volume(
        &mut self,
        req: api::NodePublishVolumeRequest,
    ) -> Result<(), CsiError> {
        call("NodePublishVolume", self.node.node_publish_volume(req))
            .await
            .map(drop)
    }

    pub async fn node_expand_volume(
        &mut self,
        req: api::NodeExpandVolumeRequest,
    ) -> Result<(), CsiError> {
        call("NodeExpandVolume", self.node.node_expand_volume(req))
            .await
            .map(drop)
    }

    pub async fn node_unpublish_volume(
        &mut self,
        volume_id: &str,
        target_path: &str,
    ) -> Result<(), CsiError> {
        let req = api::NodeUnpublishVolumeRequest {
            volume_id: volume_id.to_string(),
            target_path: target_path.to_string(),
        };
        call("NodeUnpublishVolume", self.node.node_unpublish_volume(req))
            .await
            .map(drop)
    }
}

impl Client {
    /// The usage of the volume published at `volume_path`, bounded by `within` (the stats
    /// provider cannot wait as long as a mount may).
    pub async fn node_get_volume_stats(
        &mut self,
        volume_id: &str,
        volume_path: &str,
        within: Duration,
    ) -> Result<VolumeStats, CsiError> {
        use api::volume_usage::Unit;
        let req = api::NodeGetVolumeStatsRequest {
            volume_id: volume_id.to_string(),
            volume_path: volume_path.to_string(),
            staging_target_path: String::new(),
        };
        let op = "NodeGetVolumeStats";
        let reply = match tokio::time::timeout(within, self.node.node_get_volume_stats(req)).await {
            Ok(Ok(reply)) => reply.into_inner(),
            Ok(Err(status)) => return Err(CsiError::Call { op, status }),
            Err(_) => return Err(CsiError::Timeout { op, after: within }),
        };
        let count = |n: i64| u64::try_from(n).ok();
        let mut stats = VolumeStats::default();
        for u in reply.usage {
            match Unit::try_from(u.unit) {
                Ok(Unit::Bytes) => {
                    stats.available_bytes = count(u.available);
                    stats.capacity_bytes = count(u.total);
                    stats.used_bytes = count(u.used);
                }
                Ok(Unit::Inodes) => {
                    stats.inodes_free = count(u.available);
                    stats.inodes = count(u.total);
                    stats.inodes_used = count(u.used);
                }
                _ => {}
            }
        }
        Ok(stats)
    }
}

/// One call under `CSI_TIMEOUT`; dropping the future on expiry cancels it on the driver's side.
async fn call<T>(
    op: &'static str,
    fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, CsiError> {
    match tokio::time::timeout(CSI_TIMEOUT, fut).await {
        Ok(Ok(reply)) => Ok(reply.into_inner()),
        Ok(Err(status)) => Err(CsiError::Call { op, status }),
        Err(_) => Err(CsiError::Timeout {
            op,
            after: CSI_TIMEOUT,
        }),
    }
}
