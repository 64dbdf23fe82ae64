//! The device manager (upstream's cm/devicemanager): device plugins register on
//! `/var/lib/kubelet/device-plugins/kubelet.sock` (a fixed path, whatever `--root-dir` says, as
//! upstream's), the kubelet follows each plugin's devices through ListAndWatch and shows them
//! in the Node's capacity and allocatable, admission refuses a pod that asks for more devices
//! than are free, and a container that holds devices gets the plugin's Allocate answer (env,
//! mounts, device nodes, annotations, CDI devices) in its CRI config. What each container holds
//! is kept in `kubelet_internal_checkpoint`, upstream's file, so a restarted kubelet (ours or
//! upstream's) keeps the allocations.
//!
//! Unlike upstream, admission only counts: devices are picked, and the plugin asked, when the
//! container starts, so a slow or hanging plugin holds up that container (with an event and a
//! retry) and never the sync loop.

#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
pub mod api {
    tonic::include_proto!("v1beta1");
}
pub mod checkpoint;
pub mod endpoint;
pub mod registration;
pub mod state;
mod topology;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use endpoint::{Endpoint, EndpointError};
pub use state::{AllocationError, Capacity};
use state::{Device, State};

use crate::cm::numa::{NumaMask, ResourceHints};

/// Upstream's DevicePluginPath.
pub const DEVICE_PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// The file upstream's device manager leaves in the folder when the plugin watcher is on.
pub const DEPRECATION_MARKER: &str = "DEPRECATION";
pub const SUPPORTED_VERSIONS: &[&str] = &["v1beta1"];
const HEALTHY: &str = "Healthy";
/// The NUMA key of devices without topology in the checkpoint (upstream's nodeWithoutTopology).
const NO_TOPOLOGY: i64 = -1;

#[derive(Debug, thiserror::Error)]
pub enum DeviceManagerError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("serving device plugin registration: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error(transparent)]
    Allocation(#[from] AllocationError),
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    #[error("unknown Device Plugin {0}")]
    UnknownPlugin(String),
    #[error(
        "no more device plugin resources are taken ({} already)",
        state::MAX_RESOURCES
    )]
    TooManyResources,
}

/// What a container's devices add to its CRI config.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    pub envs: Vec<(String, String)>,
    pub mounts: Vec<api::Mount>,
    pub devices: Vec<api::DeviceSpec>,
    pub annotations: Vec<(String, String)>,
    pub cdi_devices: Vec<String>,
}

impl RunOptions {
    /// Adds one plugin's answer; what an earlier answer set stays (upstream keeps the first
    /// value of an env or annotation, the first mount or device of a container path).
    fn merge(&mut self, resp: &api::ContainerAllocateResponse) {
        let mut envs: Vec<(&String, &String)> = resp.envs.iter().collect();
        envs.sort();
        for (k, v) in envs {
            match self.envs.iter().find(|(key, _)| key == k) {
                Some((_, old)) if old != v => {
                    warn!(env = %k, expected = %v, got = %old, "Environment variable has conflicting setting")
                }
                Some(_) => {}
                None => self.envs.push((k.clone(), v.clone())),
            }
        }
        add_by_container_path(&mut self.mounts, &resp.mounts, "mount", |m| {
            (&m.container_path, &m.host_path)
        });
        add_by_container_path(&mut self.devices, &resp.devices, "device", |d| {
            (&d.container_path, &d.host_path)
        });
        let mut annotations: Vec<(&String, &String)> = resp.annotations.iter().collect();
        annotations.sort();
        for (k, v) in annotations {
            if !self.annotations.iter().any(|(key, _)| key == k) {
                self.annotations.push((k.clone(), v.clone()));
            }
        }
        for c in &resp.cdi_devices {
            if !self.cdi_devices.contains(&c.name) {
                self.cdi_devices.push(c.name.clone());
            }
        }
    }
}

/// Adds each of `new` whose container path `into` does not hold yet; one that names a held path
/// with another host path is logged and left out. `paths` gives (container path, host path).
fn add_by_container_path<T: Clone>(
    into: &mut Vec<T>,
    new: &[T],
    what: &str,
    paths: fn(&T) -> (&str, &str),
) {
    for n in new {
        let (container, host) = paths(n);
        match into.iter().map(paths).find(|(c, _)| *c == container) {
            Some((_, held)) if held != host => {
                warn!(container_path = %container, "Container {what} has conflicting setting")
            }
            Some(_) => {}
            None => into.push(n.clone()),
        }
    }
}

/// One container's devices of one resource on one NUMA node (None: without topology), for
/// pod-resources, which groups them so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldDevices {
    pub resource: String,
    pub ids: Vec<String>,
    pub numa: Option<i64>,
}

pub struct DeviceManager {
    dir: PathBuf,
    boot_id: String,
    state: Mutex<State>,
    /// The live plugin per resource.
    endpoints: Mutex<HashMap<String, Endpoint>>,
    /// Serialises checkpoint writes, so an older snapshot never lands after a newer one.
    checkpoint_file: Mutex<()>,
    /// Bumped whenever capacity or allocatable may have changed, for the node status.
    changes: watch::Sender<u64>,
    cancel: CancellationToken,
}

impl DeviceManager {
    /// The manager over `dir`, with what its checkpoint holds: the allocations, and every
    /// resource it names as known but without devices until its plugin registers again.
    pub fn new(dir: &Path, boot_id: &str, cancel: CancellationToken) -> Arc<Self> {
        let mut state = State::default();
        let path = checkpoint::path_in(dir);
        match checkpoint::load(&path) {
            Ok(None) => {}
            Ok(Some((_, written_in))) if !written_in.is_empty() && written_in != boot_id => {
                info!(checkpoint = %path.display(), "Device checkpoint is from an earlier boot: its allocations are not kept");
            }
            Ok(Some((data, _))) => restore(&mut state, data),
            // Upstream goes on without it too.
            Err(e) => {
                warn!(err = %e, "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date")
            }
        }
        Arc::new(DeviceManager {
            dir: dir.to_path_buf(),
            boot_id: boot_id.to_string(),
            state: Mutex::new(state),
            endpoints: Mutex::new(HashMap::new()),
            checkpoint_file: Mutex::new(()),
            changes: watch::channel(0).0,
            cancel,
        })
    }

    pub fn socket_path(&self) -> PathBuf {
        self.dir.join(KUBELET_SOCKET)
    }

    /// Leaves upstream's `DEPRECATION` marker in the folder once plugins may announce
    /// themselves through plugins_registry: plugins built on upstream's stub (the node e2e
    /// suite's sample plugin among them) then skip calling `kubelet.sock` with an endpoint
    /// that is not in this folder, which would be refused and make them exit.
    pub fn mark_registry_announcements(&self) {
        let path = self.dir.join(DEPRECATION_MARKER);
        let made = std::fs::create_dir_all(&self.dir).and_then(|()| std::fs::File::create(&path));
        match made {
            Ok(_) => debug!(path = %path.display(), "Created the device plugin deprecation file"),
            Err(e) => {
                warn!(path = %path.display(), err = %e, "Failed to create the device plugin deprecation file")
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn endpoints(&self) -> std::sync::MutexGuard<'_, HashMap<String, Endpoint>> {
        self.endpoints.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes the stale sockets of the folder (plugins of an earlier run, the old kubelet
    /// socket; the checkpoint and anything not a socket stay), then binds `kubelet.sock`.
    pub fn bind(&self) -> Result<tokio::net::UnixListener, DeviceManagerError> {
        let io = |op, path: &Path, source| DeviceManagerError::Io {
            op,
            path: path.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| io("create", &self.dir, e))?;
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io("read", &self.dir, e))?;
        for entry in entries.flatten() {
            use std::os::unix::fs::FileTypeExt;
            let is_socket = entry.file_type().is_ok_and(|t| t.is_socket());
            if is_socket && let Err(e) = std::fs::remove_file(entry.path()) {
                warn!(path = %entry.path().display(), err = %e, "Failed to remove a stale device plugin socket");
            }
        }
        let path = self.socket_path();
        match tokio::net::UnixListener::bind(&path) {
            // Another kubelet starting on this machine at the same moment bound it between
            // the sweep and here: this one takes the folder over, as the later start would.
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                let _ = std::fs::remove_file(&path);
                tokio::net::UnixListener::bind(&path)
            }
            other => other,
        }
        .map_err(|e| io("listen on", &path, e))
    }

    /// Serves Registration on the bound socket until cancelled; a failure ends the kubelet.
    pub fn spawn(
        self: &Arc<Self>,
        listener: tokio::net::UnixListener,
        tasks: &mut crate::tasks::Tasks,
    ) {
        tasks.critical_fallible(
            "device plugin registration server",
            self.clone().serve(listener),
        );
    }

    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::UnixListener,
    ) -> Result<(), DeviceManagerError> {
        info!(socket = %self.socket_path().display(), "Serving device plugin registration");
        let cancel = self.cancel.clone();
        let service = registration::RegistrationService { manager: self };
        tonic::transport::Server::builder()
            .add_service(api::registration_server::RegistrationServer::new(service))
            .serve_with_incoming_shutdown(crate::grpc_uds::incoming(listener), cancel.cancelled())
            .await
            .map_err(DeviceManagerError::Serve)
    }

    /// Capacity changes, for the node status to follow at once.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A plugin registered: dial it, ask its options, and follow its devices. A plugin that
    /// registers the same resource again replaces the one before.
    async fn connect(
        self: &Arc<Self>,
        resource: &str,
        endpoint: &str,
    ) -> Result<(), DeviceManagerError> {
        self.connect_at(resource, &self.dir.join(endpoint)).await
    }

    /// As `connect`, for a plugin at `socket` anywhere (announced through plugins_registry).
    pub async fn connect_at(
        self: &Arc<Self>,
        resource: &str,
        socket: &Path,
    ) -> Result<(), DeviceManagerError> {
        let socket = socket.to_path_buf();
        if !self.state().connect_allowed(resource) {
            return Err(DeviceManagerError::TooManyResources);
        }
        let stop = self.cancel.child_token();
        let ep = Endpoint::connect(resource, &socket, stop.clone()).await?;
        let stream = ep.list_and_watch().await?;
        crate::metrics::kubelet()
            .device_plugin_registrations
            .inc(&[resource]);
        info!(resource_name = %resource, socket = %socket.display(), pre_start_required = ep.options.pre_start_required, get_preferred_allocation_available = ep.options.get_preferred_allocation_available, "Connected to new client");
        if !self.state().connect(resource) {
            stop.cancel();
            return Err(DeviceManagerError::TooManyResources);
        }
        if let Some(old) = self.endpoints().insert(resource.to_string(), ep.clone()) {
            old.stop.cancel();
        }
        let manager = self.clone();
        tokio::spawn(async move { manager.follow(ep, stream).await });
        Ok(())
    }

    /// Takes in each device list the plugin sends until its stream ends or another
    /// registration replaces it; a stream that ends marks its devices unhealthy.
    async fn follow(
        self: Arc<Self>,
        ep: Endpoint,
        mut stream: tonic::Streaming<api::ListAndWatchResponse>,
    ) {
        loop {
            let next = tokio::select! {
                _ = ep.stop.cancelled() => return,
                next = stream.message() => next,
            };
            match next {
                Ok(Some(list)) => self.take_devices(&ep.resource, list),
                Ok(None) => {
                    warn!(resource = %ep.resource, "ListAndWatch ended unexpectedly for device plugin");
                    break;
                }
                Err(status) => {
                    warn!(resource = %ep.resource, err = %status, "ListAndWatch ended unexpectedly for device plugin");
                    break;
                }
            }
        }
        let current = {
            let mut endpoints = self.endpoints();
            let current = endpoints
                .get(&ep.resource)
                .is_some_and(|e| e.socket == ep.socket && !e.stop.is_cancelled());
            if current {
                endpoints.remove(&ep.resource);
            }
            current
        };
        if current {
            self.disconnected(&ep.resource);
        }
    }

    fn disconnected(&self, resource: &str) {
        info!(resource = %resource, "Device plugin disconnected: its devices are unhealthy until it registers again");
        self.state().disconnect(resource, Instant::now());
        self.save();
        self.changed();
    }

    /// A plugin announced through plugins_registry went (its socket is gone).
    pub fn deregister(&self, resource: &str) {
        let Some(ep) = self.endpoints().remove(resource) else {
            return;
        };
        ep.stop.cancel();
        self.disconnected(resource);
    }

    fn take_devices(&self, resource: &str, list: api::ListAndWatchResponse) {
        let total = list.devices.len();
        let devices = list.devices.into_iter().map(|d| {
            let numa = d
                .topology
                .map(|t| t.nodes.into_iter().map(|n| n.id).collect())
                .unwrap_or_default();
            (
                d.id,
                Device {
                    healthy: d.health == HEALTHY,
                    numa,
                },
            )
        });
        let listed = self.state().update_devices(resource, devices);
        if listed.kept < total {
            warn!(resource = %resource, devices = total, kept = listed.kept, "Device plugin lists more devices than are kept");
        }
        if !listed.changed {
            return;
        }
        debug!(resource = %resource, devices = listed.kept, "State pushed for device plugin");
        self.save();
        self.changed();
    }

    /// Admission: the pod's plugin resources must fit in the free healthy devices, in
    /// upstream's words when they do not.
    pub fn admit(&self, pod: &Pod) -> Result<(), AllocationError> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        self.state().admit(uid, pod)
    }

    /// The container's hints per plugin resource, over the machine's NUMA `nodes`.
    pub fn hints(
        &self,
        pod: &Pod,
        container: &Container,
        nodes: &[u32],
    ) -> BTreeMap<String, ResourceHints> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        self.state().hints(uid, pod, container, nodes)
    }

    /// The whole pod's hints per plugin resource.
    pub fn pod_hints(&self, pod: &Pod, nodes: &[u32]) -> BTreeMap<String, ResourceHints> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        self.state().pod_hints(uid, pod, nodes)
    }

    /// Picks the container's devices at admission, from `affinity`'s nodes first, when the
    /// topology manager aligns them (its Allocate call still comes at container start).
    pub fn assign_aligned(
        &self,
        pod: &Pod,
        container: &Container,
        affinity: Option<NumaMask>,
    ) -> Result<(), AllocationError> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if self.state().assign_aligned(uid, pod, container, affinity)? {
            self.save();
        }
        Ok(())
    }

    /// A pod that is gone gives its devices back.
    pub fn forget(&self, uid: &str) {
        if self.state().forget(uid) {
            self.save();
        }
    }

    /// Keeps the devices of the pods `keep` names only (those restored for pods that did not
    /// come back go).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        if self.state().retain(keep) {
            self.save();
        }
    }

    pub fn capacity(&self) -> Capacity {
        self.state().capacity(Instant::now())
    }

    pub fn container_devices(&self, uid: &str, container: &str) -> Vec<HeldDevices> {
        let state = self.state();
        let Some(resources) = state.pods.get(uid).and_then(|c| c.get(container)) else {
            return Vec::new();
        };
        resources
            .iter()
            .flat_map(|(resource, a)| {
                per_numa(&state, resource, &a.ids)
                    .into_iter()
                    .map(|(node, ids)| HeldDevices {
                        resource: resource.clone(),
                        ids,
                        numa: (node != NO_TOPOLOGY).then_some(node),
                    })
            })
            .collect()
    }

    /// Every healthy device: (resource, ID, NUMA nodes).
    pub fn allocatable_devices(&self) -> Vec<(String, String, Vec<i64>)> {
        self.state().healthy_devices()
    }

    /// What `container`'s devices add to its config: devices are picked now if they were not
    /// yet (GetPreferredAllocation first when the plugin offers it), the plugin is asked to
    /// Allocate them unless it already answered, and PreStartContainer runs when required.
    pub async fn run_options(
        &self,
        pod: &Pod,
        container: &Container,
    ) -> Result<RunOptions, DeviceManagerError> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let needs: Vec<(String, usize)> = {
            let state = self.state();
            state::container_needs(container)
                .into_iter()
                .filter(|(name, _)| state.is_plugin_resource(name))
                .collect()
        };
        let mut options = RunOptions::default();
        for (resource, needed) in needs {
            let endpoint = self.endpoints().get(&resource).cloned();
            let ids = self
                .pick(
                    uid,
                    pod,
                    &container.name,
                    &resource,
                    needed,
                    endpoint.as_ref(),
                )
                .await?;
            let held = self
                .state()
                .held(uid, &container.name, &resource)
                .and_then(|a| a.response.clone());
            let response = match held {
                Some(r) => r,
                None => {
                    let Some(ep) = endpoint.as_ref() else {
                        self.state().unassign(uid, &container.name, &resource);
                        return Err(DeviceManagerError::UnknownPlugin(resource));
                    };
                    let started = Instant::now();
                    let answer = ep.allocate(ids.clone()).await;
                    crate::metrics::kubelet()
                        .device_plugin_alloc_duration
                        .observe(&[&resource], started.elapsed().as_secs_f64());
                    match answer {
                        Ok(r) => {
                            self.state()
                                .set_response(uid, &container.name, &resource, r.clone());
                            self.save();
                            r
                        }
                        Err(e) => {
                            self.state().unassign(uid, &container.name, &resource);
                            return Err(e.into());
                        }
                    }
                }
            };
            if let Some(ep) = endpoint.as_ref().filter(|e| e.options.pre_start_required) {
                ep.pre_start(ids).await?;
            }
            options.merge(&response);
        }
        Ok(options)
    }

    /// The devices `container` holds of `resource`, picking them first if need be.
    async fn pick(
        &self,
        uid: &str,
        pod: &Pod,
        container: &str,
        resource: &str,
        needed: usize,
        endpoint: Option<&Endpoint>,
    ) -> Result<Vec<String>, DeviceManagerError> {
        // Another container may take a candidate while the plugin is asked: then pick again.
        for _ in 0..3 {
            let candidates = self
                .state()
                .candidates(uid, pod, container, resource, needed)?;
            let Some((best, rest)) = candidates else {
                let state = self.state();
                let held = state.held(uid, container, resource);
                return Ok(held
                    .map(|a| a.ids.iter().cloned().collect())
                    .unwrap_or_default());
            };
            let mut order: Vec<String> = best.iter().chain(&rest).cloned().collect();
            if let Some(ep) = endpoint.filter(|e| e.options.get_preferred_allocation_available) {
                let must: Vec<String> = best.iter().take(needed).cloned().collect();
                let preferred = ep.preferred(order.clone(), must, needed).await?;
                let mut first: Vec<String> = preferred
                    .into_iter()
                    .filter(|id| order.contains(id))
                    .collect();
                first.dedup();
                order.retain(|id| !first.contains(id));
                first.extend(order);
                order = first;
            }
            let chosen: BTreeSet<String> = order.into_iter().take(needed).collect();
            let mut state = self.state();
            let still = state.candidates(uid, pod, container, resource, needed)?;
            let free = |id: &String| {
                still
                    .as_ref()
                    .is_some_and(|(b, r)| b.contains(id) || r.contains(id))
            };
            if chosen.iter().all(free) {
                state.assign(uid, container, resource, chosen.clone());
                return Ok(chosen.into_iter().collect());
            }
        }
        Err(AllocationError::Unavailable {
            resource: resource.to_string(),
            requested: needed,
            available: 0,
        }
        .into())
    }

    /// Writes the checkpoint from the state as it is now.
    fn save(&self) {
        let _file = self
            .checkpoint_file
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let data = to_checkpoint(&self.state());
        let path = checkpoint::path_in(&self.dir);
        if let Err(e) = checkpoint::save(&path, data, &self.boot_id) {
            warn!(err = %e, "Failed to write the device manager checkpoint");
        }
    }
}

impl State {
    /// Whether a plugin for `resource` may connect (known, or room for one more).
    fn connect_allowed(&self, resource: &str) -> bool {
        self.resources.contains_key(resource) || self.resources.len() < state::MAX_RESOURCES
    }
}

/// Device IDs by the NUMA node their plugin places them on (NO_TOPOLOGY for none); a device
/// on several nodes is under each, as upstream records it.
fn per_numa(state: &State, resource: &str, ids: &BTreeSet<String>) -> BTreeMap<i64, Vec<String>> {
    let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for id in ids {
        let numa = state.numa_of(resource, id);
        let nodes = if numa.is_empty() {
            vec![NO_TOPOLOGY]
        } else {
            numa
        };
        for n in nodes {
            out.entry(n).or_default().push(id.clone());
        }
    }
    out
}

fn to_checkpoint(state: &State) -> checkpoint::Data {
    let mut entries = Vec::new();
    for (uid, containers) in &state.pods {
        for (container, resources) in containers {
            for (resource, a) in resources {
                let device_ids = per_numa(state, resource, &a.ids)
                    .into_iter()
                    .map(|(n, ids)| (n, Some(ids)))
                    .collect();
                entries.push(checkpoint::Entry {
                    pod_uid: uid.clone(),
                    container_name: container.clone(),
                    resource_name: resource.clone(),
                    device_ids: Some(device_ids),
                    alloc_resp: a.response.as_ref().map(checkpoint::encode_response),
                });
            }
        }
    }
    let registered = state
        .registered()
        .into_iter()
        .map(|(name, ids)| (name, Some(ids)))
        .collect();
    checkpoint::Data {
        pod_device_entries: Some(entries),
        registered_devices: Some(registered),
    }
}

fn restore(state: &mut State, data: checkpoint::Data) {
    let now = Instant::now();
    for (resource, _) in data.registered_devices.into_iter().flatten() {
        // Known, with no devices until its plugin is back (as upstream's stopped endpoint).
        if state.connect(&resource) {
            state.disconnect(&resource, now);
        }
    }
    for e in data.pod_device_entries.into_iter().flatten() {
        let ids: BTreeSet<String> = e
            .device_ids
            .into_iter()
            .flatten()
            .flat_map(|(_, ids)| ids.into_iter().flatten())
            .collect();
        state.assign(&e.pod_uid, &e.container_name, &e.resource_name, ids);
        if let Some(r) = e
            .alloc_resp
            .as_deref()
            .and_then(checkpoint::decode_response)
        {
            state.set_response(&e.pod_uid, &e.container_name, &e.resource_name, r);
        }
    }
}

#[cfg(test)]
mod tests;
