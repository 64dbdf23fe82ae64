#![allow(dead_code)]

//! A CSI driver of our own for the tests, served from the test process: the Identity and
//! Node services on one unix socket, and the Registration service on a second socket in the
//! kubelet's plugins_registry, as CSI's node-driver-registrar serves it beside a real driver.
//! Its volumes are folders under its own folder (`backing/<handle>`), bind-mounted on the
//! staging path when it offers STAGE_UNSTAGE_VOLUME and on the target path. A Block volume is
//! a 4 MiB file (`backing/<handle>.img`) behind a loop device, attached when staged (or
//! first published) and detached when unstaged (or when the driver goes); its device is
//! bind-mounted on the file the kubelet names as the target. Every call and every verdict the
//! kubelet sends back is kept for the test to read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kubelet_rs::testing::csi;
use kubelet_rs::testing::pluginregistration as reg;
use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

/// What the driver says about itself and the node.
#[derive(Clone, Debug)]
pub struct Options {
    pub name: String,
    /// The registration's plugin type ("CSIPlugin" for a CSI driver).
    pub plugin_type: String,
    pub versions: Vec<String>,
    pub node_id: String,
    pub max_volumes: i64,
    pub topology: HashMap<String, String>,
    /// Whether it offers STAGE_UNSTAGE_VOLUME.
    pub stage: bool,
    /// Whether it offers EXPAND_VOLUME.
    pub expand: bool,
}

impl Options {
    pub fn new(name: &str, node_id: &str) -> Self {
        Self {
            name: name.to_string(),
            plugin_type: "CSIPlugin".to_string(),
            versions: vec!["1.0.0".to_string()],
            node_id: node_id.to_string(),
            max_volumes: 0,
            topology: HashMap::new(),
            stage: true,
            expand: false,
        }
    }
}

/// The kubelet's verdicts, in order: (registered, error).
pub type Verdicts = Arc<Mutex<Vec<(bool, String)>>>;

/// One Node service call: its name, the volume, the path it was given (target or staging)
/// and, for publishing, the volume context and whether read-only; for expanding, the size
/// asked for and the staging path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Call {
    pub op: &'static str,
    pub volume: String,
    pub path: String,
    pub context: HashMap<String, String>,
    pub read_only: bool,
    pub publish_context: HashMap<String, String>,
    pub bytes: i64,
    pub staging: String,
    /// The capability asked for a block volume.
    pub block: bool,
}

pub type Calls = Arc<Mutex<Vec<Call>>>;

pub struct TestDriver {
    pub endpoint: PathBuf,
    pub registration_socket: PathBuf,
    pub verdicts: Verdicts,
    pub calls: Calls,
    /// Where volume `h` keeps its data: `backing/h` (a folder) or `backing/h.img` (Block).
    pub backing: PathBuf,
    loops: Loops,
    servers: Vec<JoinHandle<()>>,
}

/// The loop device of each attached Block volume, by handle.
type Loops = Arc<Mutex<HashMap<String, PathBuf>>>;

impl TestDriver {
    /// Serves the driver's socket in `dir` and its registration socket in `registry`
    /// (`<root-dir>/plugins_registry`).
    pub fn start(opts: Options, dir: &Path, registry: &Path) -> Self {
        // A plugin name may hold a "/" (a device plugin's resource name).
        let file = opts.name.replace('/', "_");
        let endpoint = dir.join(format!("{file}.sock"));
        let registration_socket = registry.join(format!("{file}-reg.sock"));
        let verdicts = Verdicts::default();
        let calls = Calls::default();
        let backing = dir.join(format!("{file}-backing"));
        let loops = Loops::default();
        let driver = Driver {
            opts: opts.clone(),
            calls: calls.clone(),
            backing: backing.clone(),
            loops: loops.clone(),
        };
        let node = tonic::transport::Server::builder()
            .add_service(csi::identity_server::IdentityServer::new(driver.clone()))
            .add_service(csi::node_server::NodeServer::new(driver))
            .serve_with_incoming(incoming(&endpoint));
        let registrar = Registrar {
            opts,
            endpoint: endpoint.clone(),
            verdicts: verdicts.clone(),
        };
        let registration = tonic::transport::Server::builder()
            .add_service(reg::registration_server::RegistrationServer::new(registrar))
            .serve_with_incoming(incoming(&registration_socket));
        let servers = vec![
            tokio::spawn(async move {
                let _ = node.await;
            }),
            tokio::spawn(async move {
                let _ = registration.await;
            }),
        ];
        Self {
            endpoint,
            registration_socket,
            verdicts,
            calls,
            backing,
            loops,
            servers,
        }
    }

    /// The loop device of Block volume `handle`, while it is attached.
    pub fn loop_device(&self, handle: &str) -> Option<PathBuf> {
        self.loops.lock().unwrap().get(handle).cloned()
    }

    /// Takes the registration socket away, as a registrar that stops does.
    pub fn stop_registration(&mut self) {
        if let Some(server) = self.servers.pop() {
            server.abort();
        }
        let _ = std::fs::remove_file(&self.registration_socket);
    }

    pub fn verdicts(&self) -> Vec<(bool, String)> {
        self.verdicts.lock().unwrap().clone()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub fn ops(&self) -> Vec<&'static str> {
        self.calls().iter().map(|c| c.op).collect()
    }
}

impl Drop for TestDriver {
    fn drop(&mut self) {
        for s in &self.servers {
            s.abort();
        }
        let _ = std::fs::remove_file(&self.registration_socket);
        let _ = std::fs::remove_file(&self.endpoint);
        for device in self.loops.lock().unwrap().values() {
            detach_loop(device);
        }
    }
}

/// Attaches `file` (made 4 MiB if missing) to a free loop device.
pub fn attach_loop(file: &Path) -> Result<PathBuf, String> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(file)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    f.set_len(4 << 20)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let out = std::process::Command::new("losetup")
        .arg("--find")
        .arg("--show")
        .arg(file)
        .output()
        .map_err(|e| format!("losetup: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "losetup --find --show {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

pub fn detach_loop(device: &Path) {
    let _ = std::process::Command::new("losetup")
        .arg("-d")
        .arg(device)
        .status();
}

fn is_block(capability: Option<&csi::VolumeCapability>) -> bool {
    matches!(
        capability.and_then(|c| c.access_type.as_ref()),
        Some(csi::volume_capability::AccessType::Block(_))
    )
}

fn incoming(path: &Path) -> UnixListenerStream {
    let _ = std::fs::remove_file(path);
    UnixListenerStream::new(UnixListener::bind(path).expect("binding a test driver socket"))
}

#[derive(Clone)]
struct Driver {
    opts: Options,
    calls: Calls,
    backing: PathBuf,
    loops: Loops,
}

impl Driver {
    fn record(&self, call: Call) {
        self.calls.lock().unwrap().push(call);
    }

    /// The Block volume's loop device, attached now if it is not yet.
    fn device(&self, handle: &str) -> Result<PathBuf, Status> {
        if let Some(device) = self.loops.lock().unwrap().get(handle) {
            return Ok(device.clone());
        }
        let device = attach_loop(&self.backing.join(format!("{handle}.img")))
            .map_err(|e| internal("attach loop", e))?;
        self.loops
            .lock()
            .unwrap()
            .insert(handle.to_string(), device.clone());
        Ok(device)
    }

    /// Bind-mounts the Block volume's device on the file `target`, made here as CSI asks.
    fn publish_device(&self, handle: &str, target: &Path) -> Result<(), Status> {
        let device = self.device(handle)?;
        std::fs::File::create(target).map_err(|e| internal("create target file", e))?;
        rustix::mount::mount_bind(&device, target).map_err(|e| internal("bind mount", e))
    }
}

fn internal(what: &str, e: impl std::fmt::Display) -> Status {
    Status::internal(format!("{what}: {e}"))
}

fn bind(source: &Path, target: &Path, read_only: bool) -> Result<(), Status> {
    std::fs::create_dir_all(target).map_err(|e| internal("mkdir target", e))?;
    rustix::mount::mount_bind(source, target).map_err(|e| internal("bind mount", e))?;
    if read_only {
        let flags = rustix::mount::MountFlags::BIND | rustix::mount::MountFlags::RDONLY;
        rustix::mount::mount_remount(target, flags, "").map_err(|e| internal("remount ro", e))?;
    }
    Ok(())
}

fn unmount(target: &str) -> Result<(), Status> {
    match rustix::mount::unmount(target, rustix::mount::UnmountFlags::empty()) {
        // Not mounted (any more): CSI asks unpublish and unstage to be idempotent.
        Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(internal("unmount", e)),
    }
}

#[tonic::async_trait]
impl csi::identity_server::Identity for Driver {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: self.opts.name.clone(),
            vendor_version: "0.1.0".to_string(),
            manifest: HashMap::new(),
        }))
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for Driver {
    /// The statfs of the published volume, as a driver of a filesystem volume answers.
    async fn node_get_volume_stats(
        &self,
        req: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        use csi::volume_usage::Unit;
        let r = req.into_inner();
        let fs = rustix::fs::statvfs(r.volume_path.as_str())
            .map_err(|e| Status::not_found(format!("statfs {}: {e}", r.volume_path)))?;
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let usage = vec![
            csi::VolumeUsage {
                available: n(fs.f_bavail * fs.f_frsize),
                total: n(fs.f_blocks * fs.f_frsize),
                used: n((fs.f_blocks - fs.f_bfree) * fs.f_frsize),
                unit: Unit::Bytes as i32,
            },
            csi::VolumeUsage {
                available: n(fs.f_ffree),
                total: n(fs.f_files),
                used: n(fs.f_files - fs.f_ffree),
                unit: Unit::Inodes as i32,
            },
        ];
        Ok(Response::new(csi::NodeGetVolumeStatsResponse {
            usage,
            volume_condition: None,
        }))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        use csi::node_service_capability::{Rpc, Type, rpc::Type as RpcType};
        let rpc = |t: RpcType| csi::NodeServiceCapability {
            r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
        };
        let mut capabilities = vec![rpc(RpcType::GetVolumeStats)];
        if self.opts.stage {
            capabilities.push(rpc(RpcType::StageUnstageVolume));
        }
        if self.opts.expand {
            capabilities.push(rpc(RpcType::ExpandVolume));
        }
        Ok(Response::new(csi::NodeGetCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn node_stage_volume(
        &self,
        req: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        let r = req.into_inner();
        let block = is_block(r.volume_capability.as_ref());
        if block {
            self.device(&r.volume_id)?;
        } else {
            let source = self.backing.join(&r.volume_id);
            std::fs::create_dir_all(&source).map_err(|e| internal("mkdir backing", e))?;
            bind(&source, Path::new(&r.staging_target_path), false)?;
        }
        self.record(Call {
            block,
            op: "NodeStageVolume",
            volume: r.volume_id,
            path: r.staging_target_path,
            context: r.volume_context,
            read_only: false,
            publish_context: r.publish_context,
            ..Default::default()
        });
        Ok(Response::new(csi::NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        req: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        let r = req.into_inner();
        unmount(&r.staging_target_path)?;
        if let Some(device) = self.loops.lock().unwrap().remove(&r.volume_id) {
            detach_loop(&device);
        }
        self.record(Call {
            op: "NodeUnstageVolume",
            volume: r.volume_id,
            path: r.staging_target_path,
            context: HashMap::new(),
            read_only: false,
            publish_context: HashMap::new(),
            ..Default::default()
        });
        Ok(Response::new(csi::NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        req: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        let r = req.into_inner();
        let block = is_block(r.volume_capability.as_ref());
        if block {
            self.publish_device(&r.volume_id, Path::new(&r.target_path))?;
        } else {
            let source = if r.staging_target_path.is_empty() {
                let source = self.backing.join(&r.volume_id);
                std::fs::create_dir_all(&source).map_err(|e| internal("mkdir backing", e))?;
                source
            } else {
                PathBuf::from(&r.staging_target_path)
            };
            bind(&source, Path::new(&r.target_path), r.readonly)?;
        }
        self.record(Call {
            block,
            staging: r.staging_target_path,
            op: "NodePublishVolume",
            volume: r.volume_id,
            path: r.target_path,
            context: r.volume_context,
            read_only: r.readonly,
            publish_context: r.publish_context,
            ..Default::default()
        });
        Ok(Response::new(csi::NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        req: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        let r = req.into_inner();
        unmount(&r.target_path)?;
        // A folder, or the file a Block volume's device was bound on.
        if std::fs::remove_dir(&r.target_path).is_err() {
            let _ = std::fs::remove_file(&r.target_path);
        }
        self.record(Call {
            op: "NodeUnpublishVolume",
            volume: r.volume_id,
            path: r.target_path,
            context: HashMap::new(),
            read_only: false,
            publish_context: HashMap::new(),
            ..Default::default()
        });
        Ok(Response::new(csi::NodeUnpublishVolumeResponse {}))
    }

    /// Records the size asked for: a folder-backed volume has no size of its own to grow.
    async fn node_expand_volume(
        &self,
        req: Request<csi::NodeExpandVolumeRequest>,
    ) -> Result<Response<csi::NodeExpandVolumeResponse>, Status> {
        let r = req.into_inner();
        let bytes = r.capacity_range.map(|c| c.required_bytes).unwrap_or(0);
        self.record(Call {
            op: "NodeExpandVolume",
            volume: r.volume_id,
            path: r.volume_path,
            bytes,
            staging: r.staging_target_path,
            ..Default::default()
        });
        Ok(Response::new(csi::NodeExpandVolumeResponse {
            capacity_bytes: bytes,
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        let topology = (!self.opts.topology.is_empty()).then(|| csi::Topology {
            segments: self.opts.topology.clone(),
        });
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: self.opts.node_id.clone(),
            max_volumes_per_node: self.opts.max_volumes,
            accessible_topology: topology,
        }))
    }
}

struct Registrar {
    opts: Options,
    endpoint: PathBuf,
    verdicts: Verdicts,
}

#[tonic::async_trait]
impl reg::registration_server::Registration for Registrar {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(reg::PluginInfo {
            r#type: self.opts.plugin_type.clone(),
            name: self.opts.name.clone(),
            endpoint: self.endpoint.display().to_string(),
            supported_versions: self.opts.versions.clone(),
        }))
    }

    async fn notify_registration_status(
        &self,
        req: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let status = req.into_inner();
        self.verdicts
            .lock()
            .unwrap()
            .push((status.plugin_registered, status.error));
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}
