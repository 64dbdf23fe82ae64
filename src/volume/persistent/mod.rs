//! Volumes backed by a PersistentVolume: the claim resolved to its volume (`claims`), the
//! volume's node affinity checked against the node, then handed to the plugin of its kind:
//! hostPath (used at its path), `local` (bind-mounted, or its device linked for a Block
//! volume) or CSI (`csi`, prepared here and mounted by `volume::csi::mount`).

pub mod claims;
pub mod csi;
pub mod local;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeSpec, Pod};

use super::FailureKind;

/// Bounds each API read of a volume's preparation: a slow API server fails this sync's setup
/// (the next sync tries again) rather than holding the pod's sync for the client's long read
/// timeout.
const READ_TIMEOUT: std::time::Duration = crate::podinputs::FETCH_TIMEOUT;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer from the API server within {0:?}")]
    TimedOut(std::time::Duration),
}

/// One API read within [`READ_TIMEOUT`].
pub(crate) async fn read<T>(
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, ReadError> {
    match tokio::time::timeout(READ_TIMEOUT, request).await {
        Ok(answer) => Ok(answer?),
        Err(_) => Err(ReadError::TimedOut(READ_TIMEOUT)),
    }
}

/// A claim's volume, ready for its plugin, or why it is not.
pub enum Resolved {
    HostPath {
        path: String,
        kind: String,
        read_only: bool,
    },
    Local(local::LocalMount),
    Nfs {
        pv: String,
        mount: crate::volume::nfs::NfsMount,
    },
    Csi(Box<crate::volume::csi::mount::CsiVolume>),
    Failed {
        /// The name events give the volume.
        shown: String,
        kind: FailureKind,
        reason: String,
    },
}

/// Reads the claim with `client` (None when standalone) on each sync, so a claim that binds
/// later lets the pod start on a later sync, and prepares its volume for its plugin.
pub async fn resolve(
    client: Option<&kube::Client>,
    pod: &Pod,
    volume: &str,
    claim: &claims::ClaimRef,
) -> Resolved {
    let process = |reason: String| Resolved::Failed {
        shown: volume.to_string(),
        kind: FailureKind::Process,
        reason,
    };
    let Some(client) = client else {
        return process(format!(
            "error processing PVC {}/{}: claims need an API server",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            claim.source.claim_name
        ));
    };
    let bound = match claims::resolve(client, pod, volume, claim).await {
        Ok(b) => b,
        Err(e) => return process(e.to_string()),
    };
    let pv = bound.pv.metadata.name.clone().unwrap_or_default();
    let failed = |kind, reason| Resolved::Failed {
        shown: pv.clone(),
        kind,
        reason,
    };
    let spec = bound.pv.spec.clone().unwrap_or_default();
    // Only the local and CSI plugins map devices, as upstream's.
    if bound.block && spec.local.is_none() && spec.csi.is_none() {
        return failed(
            FailureKind::SetUp,
            format!(
                "{} PersistentVolumes of volumeMode Block are not supported: no volume plugin matched",
                kind_name(&spec)
            ),
        );
    }
    if let Err(reason) = check_node_affinity(client, pod, &bound.pv).await {
        return failed(FailureKind::NodeAffinity, reason);
    }
    if let Some(hp) = spec.host_path {
        return Resolved::HostPath {
            path: hp.path,
            kind: hp.type_.unwrap_or_default(),
            read_only: bound.read_only,
        };
    }
    if let Some(source) = spec.local {
        return Resolved::Local(local::LocalMount {
            pv,
            path: source.path,
            read_only: bound.read_only,
            fs_group: fs_group(pod),
            on_root_mismatch: on_root_mismatch(pod),
            block: bound.block,
        });
    }
    if let Some(source) = spec.nfs {
        return Resolved::Nfs {
            pv,
            mount: crate::volume::nfs::NfsMount {
                server: source.server,
                path: source.path,
                // The claim's readOnly or the volume's own.
                read_only: bound.read_only || source.read_only.unwrap_or(false),
                options: spec.mount_options.unwrap_or_default(),
            },
        };
    }
    if spec.csi.is_some() {
        return match csi::prepare(client, pod, &bound).await {
            Ok(prepared) => Resolved::Csi(Box::new(prepared)),
            Err((kind, reason)) => failed(kind, reason),
        };
    }
    failed(
        FailureKind::SetUp,
        format!(
            "{} PersistentVolumes are not supported by this version of kubelet-rs",
            kind_name(&spec)
        ),
    )
}

pub fn fs_group(pod: &Pod) -> Option<u32> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.fs_group)
        .and_then(|g| u32::try_from(g).ok())
}

pub fn on_root_mismatch(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.fs_group_change_policy.as_deref())
        == Some("OnRootMismatch")
}

/// The volume's required node affinity against this node (the pod's node) as the API server
/// has it: upstream's check before any mount of a PersistentVolume.
async fn check_node_affinity(
    client: &kube::Client,
    pod: &Pod,
    pv: &PersistentVolume,
) -> Result<(), String> {
    let pinned = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .is_some_and(|a| a.required.is_some());
    if !pinned {
        return Ok(());
    }
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let node = read(nodes.get(node_name))
        .await
        .map_err(|e| format!("error getting node {node_name:?}: {e}"))?;
    let labels = node.metadata.labels.unwrap_or_default();
    local::check_node_affinity(pv, &labels, node_name)
}

/// The kind of a volume, as its field in the PersistentVolume's spec is named.
pub fn kind_name(spec: &PersistentVolumeSpec) -> &'static str {
    match spec {
        s if s.host_path.is_some() => "hostPath",
        s if s.local.is_some() => "local",
        s if s.csi.is_some() => "csi",
        s if s.nfs.is_some() => "nfs",
        s if s.iscsi.is_some() => "iscsi",
        s if s.fc.is_some() => "fc",
        s if s.rbd.is_some() => "rbd",
        s if s.cephfs.is_some() => "cephfs",
        s if s.glusterfs.is_some() => "glusterfs",
        _ => "this kind of",
    }
}
