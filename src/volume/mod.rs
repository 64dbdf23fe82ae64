//! The volume manager: before a pod's containers start, and again on every sync while it runs,
//! it sets up each volume the pod's containers mount, on the host under the pod's folder, as
//! upstream lays them out. The API reads volumes need happen here; the runtime manager only
//! receives the folders (`PodVolumes`) and turns them into CRI mounts.
//!
//! The volumes the kubelet writes itself (configMap, secret, downwardAPI, projected) are
//! rewritten on every sync, atomically and only when their contents changed, so updates to the
//! objects and to the pod's labels and annotations reach running containers within a sync
//! period, as upstream's remount does. Claim and inline CSI volumes are set up once per pod
//! (`in_place`); on later syncs a claim's CSI volume is only checked for growth (`expansion`)
//! and a driver that asks for it (`requiresRepublish`) is published to again.

pub mod atomic_writer;
pub mod contents;
pub mod csi;
pub mod empty_dir;
pub mod etc_hosts;
mod expansion;
pub mod host_path;
pub mod image;
pub mod in_place;
pub mod mounts;
pub mod nfs;
pub mod ownership;
pub mod persistent;
mod plan;
mod teardown;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tracing::warn;

use crate::events::{EventRecorder, EventType};
use crate::fieldpath::NodeAllocatable;
use crate::podinputs::PodInputSource;
use crate::quantity::parse_bytes;
use atomic_writer::Ownership;
use empty_dir::Medium;
use in_place::{InPlace, InPlaceVolumes};
pub(crate) use plan::FailureKind;
use plan::{
    Applied, Failure, Kept, Plan, apply, csi_measured, has_copy, kind_name, measured_by,
    written_plugin,
};
pub use teardown::{release_volumes, remove_pod_dir};

/// Each volume plugin's folder under `<pod>/volumes/`, upstream's names.
pub const EMPTY_DIR: &str = "kubernetes.io~empty-dir";
const CONFIG_MAP: &str = "kubernetes.io~configmap";
const SECRET: &str = "kubernetes.io~secret";
const DOWNWARD_API: &str = "kubernetes.io~downward-api";
const PROJECTED: &str = "kubernetes.io~projected";
/// How long a refresh of a written volume that has a copy in place may take.
const REFRESH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A step of mounting that failed (`FailureKind::step` names it), in upstream's words,
    /// which users search for.
    #[error("MountVolume.{step} failed for volume \"{volume}\" : {reason}")]
    Mount {
        step: &'static str,
        volume: String,
        reason: String,
    },
    /// A volume that could not be worked out from the API (a claim not bound yet), in the
    /// words of upstream's volume manager, which lists the volumes it still waits for (its
    /// event says "Unable to attach or mount volumes: " first, as the pod worker's error does).
    #[error(
        "unmounted volumes=[{volumes}], unattached volumes=[], failed to process volumes=[{volumes}]: {reason}"
    )]
    Process { volumes: String, reason: String },
    /// CSI volumes that could not be unpublished or unstaged.
    #[error("{0}")]
    TearDown(String),
    #[error("blocking task failed: {0}")]
    Blocking(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} is still mounted; the pod folder is left in place")]
    StillMounted(String),
}

/// Building one container's mounts from the prepared volumes.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("volume {0:?} is not set up")]
    NotSetUp(String),
    #[error("volumeMount {mount:?}: invalid subPath {sub_path:?}")]
    SubPath { mount: String, sub_path: String },
    #[error("error SubPath `{0}` must not be an absolute path")]
    SubPathAbsolute(String),
    #[error("unable to provision SubPath `{0}`: must not contain '..'")]
    SubPathBacksteps(String),
    #[error("{0}")]
    SubPathExpr(String),
    /// Upstream's words, which leave out the host paths.
    #[error(
        "failed to create subPath directory for volumeMount {mount:?} of container {container:?}"
    )]
    SubPathCreate { mount: String, container: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where each volume of a pod is on the host, by volume name, and which ones every
/// container must see read-only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodVolumes {
    dirs: BTreeMap<String, PathBuf>,
    read_only: BTreeSet<String>,
}

impl PodVolumes {
    pub fn path(&self, volume: &str) -> Option<&Path> {
        self.dirs.get(volume).map(PathBuf::as_path)
    }

    pub fn insert(&mut self, volume: &str, path: PathBuf) {
        self.dirs.insert(volume.to_string(), path);
    }

    pub fn read_only(&self, volume: &str) -> bool {
        self.read_only.contains(volume)
    }

    fn set_read_only(&mut self, volume: &str) {
        self.read_only.insert(volume.to_string());
    }
}

pub use crate::pod::paths::pod_dir;

pub fn volume_dir(pod_dir: &Path, plugin: &str, volume: &str) -> PathBuf {
    pod_dir.join("volumes").join(plugin).join(volume)
}

/// The names of the volumes some container mounts or uses as a device: like upstream, a
/// volume no container uses is not set up.
fn used_volumes(pod: &Pod) -> BTreeSet<&str> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeSet::new();
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| {
            let mounted = c.volume_mounts.iter().flatten().map(|m| m.name.as_str());
            let devices = c.volume_devices.iter().flatten().map(|d| d.name.as_str());
            mounted.chain(devices)
        })
        .collect()
}

pub struct VolumeManager {
    root_dir: PathBuf,
    /// Where configMap, secret and token contents come from.
    inputs: Arc<PodInputSource>,
    node: NodeAllocatable,
    events: EventRecorder,
    /// The container runtime, which decides whether image volumes can be had.
    runtime: Option<image::RuntimeVersion>,
    /// The registered CSI drivers and this node's name, once the plugin manager runs.
    csi_drivers: Option<Arc<csi::Drivers>>,
    node_name: String,
    /// The claim and inline CSI volumes set up for each pod, which later syncs reuse.
    in_place: Arc<InPlaceVolumes>,
    /// The online growth of claims' CSI volumes, once CSI drivers can be had (none standalone).
    expansions: Option<Arc<expansion::Expansions>>,
}

impl VolumeManager {
    pub fn new(
        root_dir: PathBuf,
        inputs: Arc<PodInputSource>,
        node: NodeAllocatable,
        events: EventRecorder,
    ) -> Self {
        VolumeManager {
            root_dir,
            inputs,
            node,
            events,
            runtime: None,
            csi_drivers: None,
            node_name: String::new(),
            in_place: Arc::default(),
            expansions: None,
        }
    }

    /// Mounts CSI volumes with the drivers registered in `drivers`, for node `node_name`.
    pub fn with_csi(mut self, drivers: Arc<csi::Drivers>, node_name: &str) -> Self {
        // Standalone there are no claims to grow.
        self.expansions = self.inputs.client().map(|client| {
            Arc::new(expansion::Expansions::new(
                client.clone(),
                drivers.clone(),
                self.root_dir.clone(),
                self.events.clone(),
            ))
        });
        self.csi_drivers = Some(drivers);
        self.node_name = node_name.to_string();
        self
    }

    pub fn with_runtime(mut self, runtime: image::RuntimeVersion) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// The claim and inline CSI volumes set up for the pods, for the stats provider.
    pub fn in_place(&self) -> Arc<InPlaceVolumes> {
        self.in_place.clone()
    }

    /// The registered CSI drivers, once the plugin manager runs.
    pub fn csi_drivers(&self) -> Option<Arc<csi::Drivers>> {
        self.csi_drivers.clone()
    }

    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        pod_dir(&self.root_dir, uid)
    }

    /// Sets up (or refreshes) every volume the pod's containers mount. A volume that cannot
    /// be set up is a `FailedMount` event and an error, unless an earlier copy of it is in
    /// place: then the containers keep that one and the next sync tries again.
    pub async fn setup(&self, pod: &Pod) -> Result<PodVolumes, VolumeError> {
        let used = used_volumes(pod);
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
        let mut plans = Vec::new();
        let mut csi_volumes = Vec::new();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let pod_dir = self.pod_dir(uid);
        let in_place = self.in_place.pod(uid);
        // The claim and inline CSI volumes, which are set up once per pod: their claims and
        // how they are measured.
        let mut once = BTreeMap::new();
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        // The pod cgroup's memory limit, which bounds its tmpfs volumes as upstream's.
        let pod_memory_limit = pod.spec.as_ref().and_then(|s| {
            crate::cm::resources::pod_resources(s, &Default::default())
                .ok()?
                .memory_limit
        });
        for v in volumes
            .unwrap_or(&[])
            .iter()
            .filter(|v| used.contains(v.name.as_str()))
        {
            let plan = if let Some(hp) = &v.host_path {
                Plan::HostPath {
                    path: hp.path.clone(),
                    kind: hp.type_.clone().unwrap_or_default(),
                    read_only: false,
                }
            } else if let Some(claim) = persistent::claims::ClaimRef::of(pod, v) {
                if let Some(kept) = in_place.get(&v.name) {
                    if let (Some(e), Some(expansions)) = (&kept.expandable, &self.expansions) {
                        expansions.check(pod, &v.name, e, &kept.path);
                    }
                    if !kept.republish {
                        once.insert(v.name.clone(), None);
                        continue;
                    }
                }
                let resolved =
                    persistent::resolve(self.inputs.client(), pod, &v.name, &claim).await;
                if let persistent::Resolved::Failed { shown, reason, .. } = &resolved
                    && in_place.contains_key(&v.name)
                {
                    warn!(volume = %shown, %reason, "Could not prepare the volume again to republish it; the pod keeps it");
                    once.insert(v.name.clone(), None);
                    continue;
                }
                let claim = (namespace.to_string(), claim.source.claim_name);
                let (expandable, republish) = match &resolved {
                    persistent::Resolved::Csi(vol) => (
                        csi::expand::Expandable::of(vol, claim.clone()).map(Arc::new),
                        vol.requires_republish,
                    ),
                    _ => (None, false),
                };
                let kept = Kept {
                    claim: Some(claim),
                    measured_by: measured_by(&resolved),
                    expandable,
                    republish,
                };
                once.insert(v.name.clone(), Some(kept));
                match resolved {
                    persistent::Resolved::Csi(vol) if self.csi_drivers.is_some() => {
                        csi_volumes.push((v.name.clone(), *vol));
                        continue;
                    }
                    other => Plan::Resolved(other),
                }
            } else if let Some(source) = &v.csi {
                if in_place.get(&v.name).is_some_and(|kept| !kept.republish) {
                    once.insert(v.name.clone(), None);
                    continue;
                }
                let client = self.inputs.client();
                let prepared = persistent::csi::prepare_inline(client, pod, &v.name, source).await;
                if let Err((_, reason)) = &prepared
                    && in_place.contains_key(&v.name)
                {
                    warn!(volume = %v.name, %reason, "Could not prepare the volume again to republish it; the pod keeps it");
                    once.insert(v.name.clone(), None);
                    continue;
                }
                if let Ok(vol) = &prepared {
                    let kept = Kept {
                        claim: None,
                        measured_by: csi_measured(vol),
                        expandable: None,
                        republish: vol.requires_republish,
                    };
                    once.insert(v.name.clone(), Some(kept));
                }
                match prepared {
                    Ok(vol) if self.csi_drivers.is_some() => {
                        csi_volumes.push((v.name.clone(), vol));
                        continue;
                    }
                    Ok(vol) => Plan::Resolved(persistent::Resolved::Csi(Box::new(vol))),
                    Err((kind, reason)) => Plan::Resolved(persistent::Resolved::Failed {
                        shown: v.name.clone(),
                        kind,
                        reason,
                    }),
                }
            } else if let Some(e) = &v.empty_dir {
                let medium = if e.medium.as_deref() == Some("Memory") {
                    let size_limit = e.size_limit.as_ref().and_then(|q| parse_bytes(q).ok());
                    Medium::Memory {
                        size: empty_dir::memory_size(
                            self.node.memory_bytes,
                            pod_memory_limit,
                            size_limit,
                        ),
                    }
                } else {
                    Medium::Disk
                };
                Plan::EmptyDir { medium }
            } else if contents::is_written(v) {
                let plugin = written_plugin(v);
                let fetch = contents::files(&self.inputs, pod, v, self.node);
                // A refresh must not hold the pod's sync (a container restart) for long: the
                // copy in place stays in use when the API server is slow.
                let copy = volume_dir(&pod_dir, plugin, &v.name);
                let refreshing = tokio::task::spawn_blocking(move || has_copy(&copy))
                    .await
                    .unwrap_or(false);
                let got = if refreshing {
                    tokio::time::timeout(REFRESH_WAIT, fetch)
                        .await
                        .unwrap_or(Err(contents::ContentsError::RefreshTimedOut(REFRESH_WAIT)))
                } else {
                    fetch.await
                };
                match got {
                    Ok(files) => Plan::Write {
                        plugin,
                        files,
                        memory_size: empty_dir::memory_size(
                            self.node.memory_bytes,
                            pod_memory_limit,
                            None,
                        ),
                    },
                    Err(e) => Plan::FetchFailed {
                        plugin,
                        reason: e.to_string(),
                    },
                }
            } else if let Some(source) = &v.nfs {
                Plan::Nfs(nfs::NfsMount {
                    server: source.server.clone(),
                    path: source.path.clone(),
                    read_only: source.read_only.unwrap_or(false),
                    options: Vec::new(),
                })
            } else if v.image.is_some() {
                Plan::Image {
                    reason: image::unsupported_reason(self.runtime.as_ref()),
                }
            } else {
                Plan::Unsupported(kind_name(v))
            };
            plans.push((v.name.clone(), plan));
        }
        let own = Ownership {
            fs_group: pod
                .spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref())
                .and_then(|sc| sc.fs_group)
                .and_then(|g| u32::try_from(g).ok()),
        };
        let blocking_dir = pod_dir.clone();
        let mut applied = tokio::task::spawn_blocking(move || apply(&blocking_dir, plans, own))
            .await
            .map_err(|e| VolumeError::Blocking(e.to_string()))?;
        if let Some(drivers) = &self.csi_drivers {
            for (name, vol) in csi_volumes {
                let republishing = in_place.contains_key(&name);
                self.set_up_csi(
                    drivers,
                    pod,
                    &pod_dir,
                    &name,
                    vol,
                    republishing,
                    &mut applied,
                )
                .await;
            }
        }
        self.keep_in_place(uid, once, &in_place, &mut applied);
        let mut first_blocking = None;
        for f in applied.failures {
            let err = match f.kind.step() {
                None => VolumeError::Process {
                    volumes: f.volume,
                    reason: f.reason,
                },
                Some(step) => VolumeError::Mount {
                    step,
                    volume: f.volume,
                    reason: f.reason,
                },
            };
            let message = match &err {
                VolumeError::Process { .. } => {
                    format!("Unable to attach or mount volumes: {err}")
                }
                _ => err.to_string(),
            };
            self.events
                .pod(pod, EventType::Warning, "FailedMount", &message);
            if f.stale_copy_in_use {
                warn!(%err, "Keeping the volume's earlier contents");
            } else if first_blocking.is_none() {
                first_blocking = Some(err);
            }
        }
        match first_blocking {
            Some(err) => Err(err),
            None => Ok(applied.volumes),
        }
    }

    /// Gives the pod the volumes of `once` set up on an earlier sync, and records those this
    /// sync set up (`once` holds their claims and how they are measured).
    fn keep_in_place(
        &self,
        uid: &str,
        once: BTreeMap<String, Option<Kept>>,
        in_place: &BTreeMap<String, InPlace>,
        applied: &mut Applied,
    ) {
        let mut set_up = BTreeMap::new();
        for (name, how) in once {
            if let Some(kept) = in_place.get(&name) {
                applied.volumes.insert(&name, kept.path.clone());
                if kept.read_only {
                    applied.volumes.set_read_only(&name);
                }
                continue;
            }
            if let (Some(path), Some(how)) = (applied.volumes.path(&name), how) {
                let kept = InPlace {
                    path: path.to_path_buf(),
                    read_only: applied.volumes.read_only(&name),
                    claim: how.claim,
                    measured_by: how.measured_by,
                    expandable: how.expandable,
                    republish: how.republish,
                };
                set_up.insert(name, kept);
            }
        }
        self.in_place.add(uid, set_up);
    }

    fn forget_pod(&self, uid: &str) {
        self.inputs.forget_pod(uid);
        self.in_place.forget(uid);
        if let Some(expansions) = &self.expansions {
            expansions.forget(uid);
        }
    }

    /// Stages and publishes one CSI volume, then gives it to the fsGroup when the driver's
    /// policy says the kubelet should. `republishing`: the pod has it already (its driver asks
    /// to be called on each sync), and keeps it whatever this call gives.
    #[allow(clippy::too_many_arguments)]
    async fn set_up_csi(
        &self,
        drivers: &csi::Drivers,
        pod: &Pod,
        pod_dir: &Path,
        name: &str,
        mut vol: csi::mount::CsiVolume,
        republishing: bool,
        applied: &mut Applied,
    ) {
        let shown = vol.name.clone();
        let failure = |kind: FailureKind, reason: String| Failure {
            volume: shown.clone(),
            reason,
            stale_copy_in_use: republishing,
            kind,
        };
        if !vol.token_requests.is_empty() {
            match self.service_account_tokens(pod, &vol.token_requests).await {
                Ok(tokens) => {
                    vol.volume_context
                        .insert(csi::SERVICE_ACCOUNT_TOKENS.to_string(), tokens);
                }
                Err(e) => {
                    // Upstream's words, its spelling too.
                    let reason = format!(
                        "kubernetes.io/csi: mounter.SetUpAt failed to get service accoount token attributes: {e}"
                    );
                    applied.failures.push(failure(FailureKind::SetUp, reason));
                    return;
                }
            }
        }
        let result =
            csi::mount::set_up(drivers, &self.root_dir, pod_dir, &self.node_name, &vol).await;
        match result {
            Ok(csi::mount::Published { target, group_done }) => {
                if vol.read_only {
                    applied.volumes.set_read_only(name);
                }
                if let Some(gid) = vol.mount_group.filter(|_| !group_done) {
                    let dir = target.clone();
                    let read_only = vol.read_only;
                    let on_mismatch = persistent::on_root_mismatch(pod);
                    let done = tokio::task::spawn_blocking(move || {
                        ownership::set_volume_ownership(&dir, gid, read_only, on_mismatch)
                    })
                    .await;
                    if let Ok(Err(e)) | Err(e) = done.map_err(std::io::Error::other) {
                        applied
                            .failures
                            .push(failure(FailureKind::SetUp, e.to_string()));
                        return;
                    }
                }
                applied.volumes.insert(name, target);
            }
            Err(csi::mount::SetUpError::MountDevice(reason)) => {
                applied
                    .failures
                    .push(failure(FailureKind::MountDevice, reason));
            }
            Err(csi::mount::SetUpError::SetUp(reason)) => {
                applied.failures.push(failure(FailureKind::SetUp, reason));
            }
        }
    }

    /// The tokens a CSI driver asked for in its CSIDriver object (`tokenRequests`), as
    /// upstream hands them over: JSON of audience → {token, expirationTimestamp}.
    async fn service_account_tokens(
        &self,
        pod: &Pod,
        requests: &[(String, i64)],
    ) -> Result<String, crate::podinputs::InputError> {
        use k8s_openapi::api::authentication::v1::TokenRequestStatus;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let mut tokens = BTreeMap::new();
        for (audience, seconds) in requests {
            let (token, expires) = self
                .inputs
                .token_and_expiry(pod, audience, *seconds)
                .await?;
            let expiration_timestamp =
                Time(jiff::Timestamp::try_from(expires).unwrap_or(jiff::Timestamp::UNIX_EPOCH));
            tokens.insert(
                audience.clone(),
                TokenRequestStatus {
                    token,
                    expiration_timestamp,
                },
            );
        }
        Ok(serde_json::to_string(&tokens).unwrap_or_default())
    }

    /// Unpublishes (and, for the last user, unstages) the pod's CSI volumes.
    async fn tear_down_csi(&self, uid: &str) -> Result<(), VolumeError> {
        let Some(drivers) = &self.csi_drivers else {
            return Ok(());
        };
        let pods_dir = self.root_dir.join("pods");
        csi::mount::tear_down_pod(drivers, &self.root_dir, &pods_dir, &self.pod_dir(uid))
            .await
            .map_err(VolumeError::TearDown)
    }

    /// Gives back what a finished pod's volumes hold (its containers are stopped for good).
    pub async fn release(&self, uid: &str) -> Result<(), VolumeError> {
        self.forget_pod(uid);
        self.tear_down_csi(uid).await?;
        let dir = self.pod_dir(uid);
        tokio::task::spawn_blocking(move || release_volumes(&dir))
            .await
            .map_err(|e| VolumeError::Blocking(e.to_string()))?
    }

    /// Removes the pod's folder once its containers are gone.
    pub async fn teardown(&self, uid: &str) -> Result<(), VolumeError> {
        self.forget_pod(uid);
        self.tear_down_csi(uid).await?;
        let dir = self.pod_dir(uid);
        tokio::task::spawn_blocking(move || remove_pod_dir(&dir))
            .await
            .map_err(|e| VolumeError::Blocking(e.to_string()))?
    }
}

#[cfg(test)]
mod tests {
    use super::atomic_writer::FileEntry;
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMapVolumeSource, Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource,
        EmptyDirVolumeSource, HostPathVolumeSource, ObjectFieldSelector, PodSpec, Volume,
        VolumeMount,
    };

    fn volume(name: &str) -> Volume {
        Volume {
            name: name.into(),
            ..Default::default()
        }
    }

    fn pod(volumes: Vec<Volume>, mounted: &[&str]) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u1".into());
        pod.metadata.name = Some("web".into());
        pod.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                volume_mounts: Some(
                    mounted
                        .iter()
                        .map(|m| VolumeMount {
                            name: m.to_string(),
                            mount_path: format!("/{m}"),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }],
            volumes: Some(volumes),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn a_finished_pod_gives_its_volumes_back_and_keeps_its_folder() {
        let root = tempfile::tempdir().unwrap();
        let pod_dir = root.path().join("pods/u1");
        let data = volume_dir(&pod_dir, "kubernetes.io~empty-dir", "data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("fill"), vec![0u8; 4096]).unwrap();
        let msg = pod_dir.join("containers/c/abc");
        std::fs::create_dir_all(msg.parent().unwrap()).unwrap();
        std::fs::write(&msg, "bye").unwrap();
        release_volumes(&pod_dir).unwrap();
        assert!(!pod_dir.join("volumes").exists());
        assert_eq!(std::fs::read_to_string(&msg).unwrap(), "bye");
        // Twice is harmless.
        release_volumes(&pod_dir).unwrap();
    }

    fn manager(root: &Path) -> VolumeManager {
        VolumeManager::new(
            root.to_path_buf(),
            Arc::default(),
            NodeAllocatable::default(),
            EventRecorder::default(),
        )
    }

    #[tokio::test]
    async fn sets_up_used_volumes_and_names_what_it_cannot() {
        let root = tempfile::tempdir().unwrap();
        let host = root.path().join("data");
        let mut hp = volume("data");
        hp.host_path = Some(HostPathVolumeSource {
            path: host.to_string_lossy().into(),
            type_: Some("DirectoryOrCreate".into()),
        });
        let mut scratch = volume("scratch");
        scratch.empty_dir = Some(EmptyDirVolumeSource::default());
        let mut unused = volume("unused");
        unused.config_map = Some(ConfigMapVolumeSource {
            name: "nowhere".into(),
            ..Default::default()
        });
        let m = manager(root.path());
        let p = pod(vec![hp, scratch, unused], &["data", "scratch"]);
        let vols = m.setup(&p).await.unwrap();
        assert!(host.is_dir(), "DirectoryOrCreate did not create the folder");
        assert_eq!(vols.path("data"), Some(host.as_path()));
        let scratch_dir = m
            .pod_dir("u1")
            .join("volumes/kubernetes.io~empty-dir/scratch");
        assert_eq!(vols.path("scratch"), Some(scratch_dir.as_path()));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&scratch_dir)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o7777,
            0o777,
            "an emptyDir is writable by every user"
        );
        assert_eq!(
            vols.path("unused"),
            None,
            "a volume nobody mounts is left alone"
        );

        let mut pvc = volume("claim");
        pvc.persistent_volume_claim = Some(Default::default());
        pvc.persistent_volume_claim.as_mut().unwrap().claim_name = "data".into();
        let err = m.setup(&pod(vec![pvc], &["claim"])).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "unmounted volumes=[claim], unattached volumes=[], failed to process volumes=[claim]: error processing PVC default/data: claims need an API server"
        );
        let mut cm = volume("cfg");
        cm.config_map = Some(ConfigMapVolumeSource {
            name: "x".into(),
            ..Default::default()
        });
        let err = m.setup(&pod(vec![cm], &["cfg"])).await.unwrap_err();
        assert!(err.to_string().contains("needs an API server"), "{err}");

        m.teardown("u1").await.unwrap();
        assert!(!m.pod_dir("u1").exists());
        assert!(host.is_dir(), "hostPath data must survive pod removal");
    }

    #[test]
    fn mount_steps_are_worded_as_upstream_words_them() {
        let err = |kind: FailureKind| VolumeError::Mount {
            step: kind.step().unwrap(),
            volume: "pv-1".into(),
            reason: "why".into(),
        };
        let shown: Vec<String> = [
            FailureKind::SetUp,
            FailureKind::NodeAffinity,
            FailureKind::WaitForAttach,
            FailureKind::MountDevice,
            FailureKind::NewMounter,
        ]
        .into_iter()
        .map(|k| err(k).to_string())
        .collect();
        assert_eq!(
            shown,
            [
                "MountVolume.SetUp failed for volume \"pv-1\" : why",
                "MountVolume.NodeAffinity check failed for volume \"pv-1\" : why",
                "MountVolume.WaitForAttach failed for volume \"pv-1\" : why",
                "MountVolume.MountDevice failed for volume \"pv-1\" : why",
                "MountVolume.NewMounter initialization failed for volume \"pv-1\" : why",
            ]
        );
        assert_eq!(FailureKind::Process.step(), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_refresh_keeps_the_copy_in_place_without_holding_the_sync() {
        // An API server that takes connections and never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", silent.local_addr().unwrap());
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let root = tempfile::tempdir().unwrap();
        let m = VolumeManager::new(
            root.path().to_path_buf(),
            Arc::new(PodInputSource::new(Some(client))),
            NodeAllocatable::default(),
            EventRecorder::default(),
        );
        let mut cm = volume("cfg");
        cm.config_map = Some(ConfigMapVolumeSource {
            name: "settings".into(),
            ..Default::default()
        });
        let p = pod(vec![cm], &["cfg"]);
        let copy = volume_dir(&m.pod_dir("u1"), CONFIG_MAP, "cfg");
        std::fs::create_dir_all(&copy).unwrap();
        let files = [FileEntry {
            path: "color".into(),
            data: b"blue".to_vec(),
            mode: 0o644,
        }];
        atomic_writer::write(&copy, &files, Ownership { fs_group: None }).unwrap();
        let started = std::time::Instant::now();
        let vols = m.setup(&p).await.expect("the copy in place serves");
        assert!(
            started.elapsed() < REFRESH_WAIT * 3,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(vols.path("cfg"), Some(copy.as_path()));
        assert_eq!(std::fs::read_to_string(copy.join("color")).unwrap(), "blue");
    }

    #[tokio::test]
    async fn downward_api_follows_label_changes() {
        if !running_as_root() {
            // The downwardAPI folder is a tmpfs: mounting one needs root.
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let mut d = volume("podinfo");
        d.downward_api = Some(DownwardAPIVolumeSource {
            items: Some(vec![DownwardAPIVolumeFile {
                path: "labels".into(),
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.labels".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let m = manager(root.path());
        let mut p = pod(vec![d], &["podinfo"]);
        p.metadata.labels = Some([("a".to_string(), "1".to_string())].into());
        let vols = m.setup(&p).await.unwrap();
        let file = vols.path("podinfo").unwrap().join("labels");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "a=\"1\"");
        p.metadata.labels = Some([("a".to_string(), "2".to_string())].into());
        m.setup(&p).await.unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "a=\"2\"");
        m.teardown("u1").await.unwrap();
        assert!(!m.pod_dir("u1").exists());
    }

    fn running_as_root() -> bool {
        use std::os::unix::fs::MetadataExt;
        // /proc/self belongs to the process's effective user.
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }
}
