//! One collection: ask the runtime, read /proc and cgroups in one blocking pass, measure the
//! filesystems (full scope only), then assemble. Every step is bounded: CRI calls by the
//! client's deadline, local reads and filesystem probes by timeouts.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use tracing::{debug, info};

use crate::cm::layout::Layout;
use crate::cri::api;
use crate::pod::paths;
use crate::volume::csi::client::VolumeStats;
use crate::volume::in_place::{MeasuredBy, PodVolume};

use super::assemble::{self, ClaimedReading, Collected, FsView, Inputs, Rates, VolumeReading};
use super::fs::FsInfo;
use super::local::{self, LocalRequest, LocalSample};
use super::runtime::{self, RuntimeView};
use super::types::{FsStats, Time};
use super::{Scope, StatsError, StatsProvider};

/// How long a claim or CSI volume's reading is reused (the stats provider's own du cache
/// keeps its walks as long).
const CLAIMED_TTL: Duration = Duration::from_secs(30);

/// /proc and cgroupfs never block for long; this only guards against the unexpected.
const LOCAL_READ_WAIT: Duration = Duration::from_secs(5);

/// Volume plugins whose data lives in the pod folder, with their folder names; the flag says
/// whether upstream counts the volume as local ephemeral storage.
fn volume_dir(v: &k8s_openapi::api::core::v1::Volume) -> Option<(&'static str, bool)> {
    if let Some(e) = &v.empty_dir {
        return Some((
            "kubernetes.io~empty-dir",
            e.medium.as_deref() != Some("Memory"),
        ));
    }
    if v.config_map.is_some() {
        return Some(("kubernetes.io~configmap", true));
    }
    if v.secret.is_some() {
        return Some(("kubernetes.io~secret", false));
    }
    if v.downward_api.is_some() {
        return Some(("kubernetes.io~downward-api", false));
    }
    v.projected
        .as_ref()
        .map(|_| ("kubernetes.io~projected", false))
}

fn uid_of(s: &api::PodSandbox) -> &str {
    s.metadata
        .as_ref()
        .map(|m| m.uid.as_str())
        .unwrap_or_default()
}

impl StatsProvider {
    pub(super) async fn collect(
        &self,
        scope: Scope,
        update_rates: bool,
    ) -> Result<Collected, StatsError> {
        let full = scope == Scope::Full;
        let view = self.runtime_view(full).await?;
        let pods: HashMap<String, Pod> = self
            .status
            .pods()
            .into_iter()
            .filter_map(|p| Some((p.metadata.uid.clone()?, p)))
            .collect();
        let pod_cgroups = self.pod_cgroups(&view, &pods);
        let sandbox_pids = if full {
            self.sandbox_pids(&view).await
        } else {
            Vec::new()
        };
        let container_cgroups: Vec<(String, String)> = view
            .containers
            .iter()
            .filter_map(|c| {
                let sandbox = view.sandboxes.iter().find(|s| s.id == c.pod_sandbox_id)?;
                let pod = pod_cgroups.get(uid_of(sandbox))?;
                Some((c.id.clone(), self.cgroups.container_cgroup(pod, &c.id)))
            })
            .collect();
        let req = LocalRequest {
            layout: self.cgroups.layout().clone(),
            pod_cgroups: pod_cgroups
                .iter()
                .map(|(u, n)| (u.clone(), n.clone()))
                .collect(),
            container_cgroups: container_cgroups.clone(),
            kubepods: self.kubepods.clone(),
            sandbox_pids,
            full,
            // The sampler only wants cumulative CPU.
            psi: self.psi && !update_rates && matches!(self.cgroups.layout(), Layout::V2(_)),
        };
        let local = read_local(req).await?;
        let fs = if full {
            Some(self.fs_view(&view, &pods).await)
        } else {
            None
        };
        let mut rates = Rates {
            cache: &self.rates,
            update: update_rates,
            seen: HashSet::new(),
        };
        let collected = assemble::assemble(
            &Inputs {
                node_name: &self.node_name,
                view: &view,
                local: &local,
                fs: fs.as_ref(),
                pods: &pods,
                pod_cgroups: &pod_cgroups,
                container_cgroups: &container_cgroups.into_iter().collect(),
            },
            &mut rates,
        );
        if update_rates {
            self.rates.retain(&rates.seen);
        }
        Ok(collected)
    }

    async fn runtime_view(&self, full: bool) -> Result<RuntimeView, StatsError> {
        let (sandboxes, containers, stats) = tokio::try_join!(
            self.cri.list_pod_sandbox(None),
            self.cri.list_containers(None),
            self.cri.list_container_stats(None),
        )?;
        let sandboxes = runtime::live_sandboxes(sandboxes);
        let live: HashSet<&str> = sandboxes.iter().map(|s| s.id.as_str()).collect();
        let containers: Vec<api::Container> = runtime::live_containers(containers)
            .into_iter()
            .filter(|c| live.contains(c.pod_sandbox_id.as_str()))
            .collect();
        let stats = stats
            .into_iter()
            .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
            .collect();
        let sandbox_stats = if full {
            self.sandbox_stats().await
        } else {
            HashMap::new()
        };
        Ok(RuntimeView {
            sandboxes,
            containers,
            stats,
            sandbox_stats,
        })
    }

    /// ListPodSandboxStats, remembered as missing after the first Unimplemented.
    async fn sandbox_stats(&self) -> HashMap<String, api::PodSandboxStats> {
        if self.no_sandbox_stats.load(Ordering::Relaxed) {
            return HashMap::new();
        }
        match self.cri.list_pod_sandbox_stats(None).await {
            Ok(list) => list
                .into_iter()
                .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
                .collect(),
            Err(err) => {
                if err.code() == Some(tonic::Code::Unimplemented) {
                    info!(
                        "The runtime does not implement ListPodSandboxStats; pod network stats come from the sandbox process"
                    );
                    self.no_sandbox_stats.store(true, Ordering::Relaxed);
                } else {
                    debug!(%err, "ListPodSandboxStats failed");
                }
                HashMap::new()
            }
        }
    }

    /// Pod UID → cgroup name, for pods the kubelet knows (their QoS class places the cgroup).
    fn pod_cgroups(
        &self,
        view: &RuntimeView,
        pods: &HashMap<String, Pod>,
    ) -> HashMap<String, String> {
        view.sandboxes
            .iter()
            .filter_map(|s| {
                let uid = uid_of(s);
                // Without cgroupsPerQOS pods have no cgroup of their own.
                let name = self.cgroups.pod_cgroup(pods.get(uid)?)?;
                Some((uid.to_string(), name))
            })
            .collect()
    }

    /// A process in each ready sandbox's network namespace, for sandboxes whose network the
    /// runtime's sandbox stats did not cover. Pids are cached per sandbox.
    async fn sandbox_pids(&self, view: &RuntimeView) -> Vec<(String, i32)> {
        let wanted: Vec<&api::PodSandbox> = view
            .sandboxes
            .iter()
            .filter(|s| s.state == api::PodSandboxState::SandboxReady as i32)
            .filter(|s| {
                view.sandbox_stats
                    .get(&s.id)
                    .and_then(|st| st.linux.as_ref())
                    .and_then(|l| l.network.as_ref())
                    .is_none_or(|n| n.default_interface.is_none() && n.interfaces.is_empty())
            })
            .collect();
        let known: HashMap<String, i32> = {
            let mut cache = self.pids.lock().unwrap_or_else(|e| e.into_inner());
            let live: HashSet<&str> = view.sandboxes.iter().map(|s| s.id.as_str()).collect();
            cache.retain(|id, _| live.contains(id.as_str()));
            cache.clone()
        };
        let missing: Vec<&api::PodSandbox> = wanted
            .iter()
            .copied()
            .filter(|s| !known.contains_key(&s.id))
            .collect();
        let asked = join_all(missing.iter().map(|s| self.cri.pod_sandbox_info(&s.id))).await;
        let mut found: Vec<(String, i32)> = Vec::new();
        for (s, info) in missing.iter().zip(asked) {
            match info.map(|i| runtime::sandbox_pid(&i)) {
                Ok(Some(pid)) => found.push((s.id.clone(), pid)),
                Ok(None) => debug!(sandbox = %s.id, "Sandbox info has no pid"),
                Err(err) => debug!(sandbox = %s.id, %err, "Sandbox info failed"),
            }
        }
        if !found.is_empty() {
            let mut cache = self.pids.lock().unwrap_or_else(|e| e.into_inner());
            cache.extend(found.iter().cloned());
        }
        let mut all = known;
        all.extend(found);
        wanted
            .iter()
            .filter_map(|s| Some((s.id.clone(), *all.get(&s.id)?)))
            .collect()
    }

    async fn fs_view(&self, view: &RuntimeView, pods: &HashMap<String, Pod>) -> FsView {
        let at = Some(SystemTime::now());
        let root = self.statvfs(&self.root_dir).await;
        let (image_fs, container_fs) = self.image_fs().await;
        let mounts: HashSet<String> = view
            .stats
            .values()
            .filter_map(|s| {
                Some(
                    s.writable_layer
                        .as_ref()?
                        .fs_id
                        .as_ref()?
                        .mountpoint
                        .clone(),
                )
            })
            .filter(|m| !m.is_empty())
            .collect();
        let mut mount_info = HashMap::new();
        for m in mounts {
            if let Some(info) = self.statvfs(Path::new(&m)).await {
                mount_info.insert(m, info);
            }
        }
        FsView {
            at,
            root,
            image_fs,
            container_fs,
            mounts: mount_info,
            logs: self.log_usage(view).await,
            volumes: self.volume_usage(view, pods).await,
            etc_hosts: self.etc_hosts_usage(view).await,
            claimed: self.claimed_usage(view).await,
        }
    }

    /// The running pods' claim and inline CSI volumes, by pod UID.
    async fn claimed_usage(&self, view: &RuntimeView) -> HashMap<String, Vec<ClaimedReading>> {
        let running: HashSet<&str> = view.sandboxes.iter().map(uid_of).collect();
        let mut out: HashMap<String, Vec<ClaimedReading>> = HashMap::new();
        for (uid, reading) in self.measure_claimed(Some(&running)).await {
            out.entry(uid).or_default().push(reading);
        }
        out
    }

    /// Every pod's claim and inline CSI volumes, for `kubelet_volume_stats_*`.
    pub async fn claimed_volumes(&self) -> Vec<ClaimedReading> {
        let measured = self.measure_claimed(None).await;
        measured.into_iter().map(|(_, r)| r).collect()
    }

    /// The claim and inline CSI volumes of the pods in `pods` (all when None), each as
    /// upstream's plugin of its kind measures it: statfs of a local volume, NodeGetVolumeStats
    /// of a CSI one; a volume that cannot be measured is left out.
    async fn measure_claimed(&self, pods: Option<&HashSet<&str>>) -> Vec<(String, ClaimedReading)> {
        let Some(claimed) = &self.claimed else {
            return Vec::new();
        };
        let all = claimed.volumes.all();
        let now = Instant::now();
        let cached: Vec<Option<VolumeStats>> = {
            let mut readings = self
                .claimed_readings
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let set_up: HashSet<(&str, &str)> = all
                .iter()
                .map(|v| (v.pod_uid.as_str(), v.volume.as_str()))
                .collect();
            readings.retain(|(uid, volume), _| set_up.contains(&(uid.as_str(), volume.as_str())));
            all.iter()
                .map(|v| {
                    let key = (v.pod_uid.clone(), v.volume.clone());
                    let (at, stats) = readings.get(&key)?;
                    (now.duration_since(*at) < CLAIMED_TTL).then_some(*stats)
                })
                .collect()
        };
        let (wanted, cached): (Vec<PodVolume>, Vec<Option<VolumeStats>>) = all
            .into_iter()
            .zip(cached)
            .filter(|(v, _)| pods.is_none_or(|p| p.contains(v.pod_uid.as_str())))
            .unzip();
        let read = join_all(wanted.iter().zip(&cached).map(|(v, hit)| async move {
            if hit.is_some() {
                return *hit;
            }
            let path = &v.in_place.path;
            let stats = match &v.in_place.measured_by {
                MeasuredBy::Nothing => None,
                MeasuredBy::StatFs => self.statvfs(path).await.map(|i| VolumeStats {
                    available_bytes: Some(i.available),
                    capacity_bytes: Some(i.capacity),
                    used_bytes: Some(i.used),
                    inodes_free: Some(i.inodes_free),
                    inodes: Some(i.inodes),
                    inodes_used: Some(i.inodes.saturating_sub(i.inodes_free)),
                }),
                MeasuredBy::Csi { driver, handle } => {
                    let drivers = claimed.drivers.as_deref()?;
                    crate::volume::csi::usage::volume_stats(drivers, driver, handle, path).await
                }
            }?;
            let key = (v.pod_uid.clone(), v.volume.clone());
            let mut readings = self
                .claimed_readings
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            readings.insert(key, (Instant::now(), stats));
            Some(stats)
        }))
        .await;
        wanted
            .into_iter()
            .zip(read)
            .filter_map(|(v, stats)| {
                let reading = ClaimedReading {
                    name: v.volume,
                    claim: v.in_place.claim,
                    stats: stats?,
                };
                Some((v.pod_uid, reading))
            })
            .collect()
    }

    async fn statvfs(&self, path: &Path) -> Option<FsInfo> {
        match self.fs.statvfs(path).await {
            Ok(i) => Some(i),
            Err(err) => {
                debug!(path = %path.display(), %err, "statvfs failed");
                None
            }
        }
    }

    /// The runtime's image filesystem usage with the capacity of the filesystem it sits on.
    async fn image_fs(&self) -> (Option<FsStats>, Option<FsStats>) {
        let resp = match self.cri.image_fs_info().await {
            Ok(r) => r,
            Err(err) => {
                debug!(%err, "ImageFsInfo failed");
                return (None, None);
            }
        };
        let image = match resp.image_filesystems.first() {
            Some(u) => Some(self.usage_stats(u).await),
            None => None,
        };
        let container = match resp.container_filesystems.first() {
            Some(u) => Some(self.usage_stats(u).await),
            None => None,
        };
        (image, container)
    }

    async fn usage_stats(&self, u: &api::FilesystemUsage) -> FsStats {
        let info = match u.fs_id.as_ref().filter(|f| !f.mountpoint.is_empty()) {
            Some(f) => self.statvfs(Path::new(&f.mountpoint)).await,
            None => None,
        };
        FsStats {
            time: Time::from_unix_nanos(u.timestamp),
            available_bytes: info.map(|i| i.available),
            capacity_bytes: info.map(|i| i.capacity),
            used_bytes: u.used_bytes.as_ref().map(|v| v.value),
            inodes_free: info.map(|i| i.inodes_free),
            inodes: info.map(|i| i.inodes),
            inodes_used: u.inodes_used.as_ref().map(|v| v.value),
        }
    }

    async fn log_usage(&self, view: &RuntimeView) -> HashMap<String, super::fs::DiskUsage> {
        let dirs: Vec<(String, PathBuf)> = view
            .containers
            .iter()
            .filter_map(|c| {
                let s = view.sandboxes.iter().find(|s| s.id == c.pod_sandbox_id)?;
                let m = s.metadata.as_ref()?;
                let dir = paths::pod_log_dir(&self.pod_logs_dir, &m.namespace, &m.name, &m.uid)
                    .join(&c.metadata.as_ref()?.name);
                Some((c.id.clone(), dir))
            })
            .collect();
        let usage = join_all(dirs.iter().map(|(_, d)| self.fs.disk_usage(d))).await;
        dirs.into_iter()
            .zip(usage)
            .filter_map(|((id, _), u)| Some((id, u.ok()?)))
            .collect()
    }

    async fn volume_usage(
        &self,
        view: &RuntimeView,
        pods: &HashMap<String, Pod>,
    ) -> HashMap<String, Vec<VolumeReading>> {
        let mut wanted: Vec<(String, String, PathBuf, bool)> = Vec::new();
        for s in &view.sandboxes {
            let uid = uid_of(s);
            let volumes = pods
                .get(uid)
                .and_then(|p| p.spec.as_ref())
                .and_then(|s| s.volumes.as_ref());
            for v in volumes.into_iter().flatten() {
                if let Some((plugin, ephemeral)) = volume_dir(v) {
                    let dir = paths::pod_dir(&self.root_dir, uid)
                        .join("volumes")
                        .join(plugin)
                        .join(&v.name);
                    wanted.push((uid.to_string(), v.name.clone(), dir, ephemeral));
                }
            }
        }
        let read = join_all(wanted.iter().map(|(_, _, dir, _)| async move {
            let usage = self.fs.disk_usage(dir).await.ok()?;
            let fs = self.fs.statvfs(dir).await.ok()?;
            Some((fs, usage))
        }))
        .await;
        let mut out: HashMap<String, Vec<VolumeReading>> = HashMap::new();
        for ((uid, name, _, ephemeral), r) in wanted.into_iter().zip(read) {
            if let Some((fs, usage)) = r {
                out.entry(uid).or_default().push(VolumeReading {
                    name,
                    fs,
                    usage,
                    ephemeral,
                });
            }
        }
        out
    }

    async fn etc_hosts_usage(&self, view: &RuntimeView) -> HashMap<String, super::fs::DiskUsage> {
        let files: Vec<(String, PathBuf)> = view
            .sandboxes
            .iter()
            .map(|s| {
                (
                    uid_of(s).to_string(),
                    paths::pod_dir(&self.root_dir, uid_of(s)).join("etc-hosts"),
                )
            })
            .collect();
        let usage = join_all(files.iter().map(|(_, f)| self.fs.disk_usage(f))).await;
        files
            .into_iter()
            .zip(usage)
            .filter_map(|((uid, _), u)| Some((uid, u.ok()?)))
            .collect()
    }
}

async fn read_local(req: LocalRequest) -> Result<LocalSample, StatsError> {
    let task = tokio::task::spawn_blocking(move || local::read_all(&req));
    match tokio::time::timeout(LOCAL_READ_WAIT, task).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(StatsError::Blocking(e.to_string())),
        Err(_) => Err(StatsError::Timeout {
            what: "reading /proc and cgroups".into(),
            after: LOCAL_READ_WAIT,
        }),
    }
}
