//! The pod-resources gRPC service (v1, and v1alpha1 beside it) on
//! `<root-dir>/pod-resources/kubelet.sock`: which pods and containers run here and what
//! devices, exclusive CPUs and memory they hold. Devices come
//! from the device manager, exclusive CPUs from the CPU manager (none with its `none` policy),
//! memory by NUMA node from the memory manager (none with its `None` policy).

#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
pub mod api {
    tonic::include_proto!("v1");
}
pub mod v1alpha1;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::info;

use crate::cm::cpumanager::CpuManager;
use crate::cm::devicemanager::{DeviceManager, HeldDevices};
use crate::cm::memorymanager::{Block, MemoryManager};
use crate::events::TokenBucket;
use crate::status::StatusStore;
use api::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};

/// Upstream's limits on the socket: 100 requests a second, bursts of 10.
const QPS: f64 = 100.0;
const BURST: f64 = 10.0;
pub const SOCKET_DIR: &str = "pod-resources";
pub const SOCKET_NAME: &str = "kubelet.sock";

#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("serving pod resources: {0}")]
    Serve(#[from] tonic::transport::Error),
}

pub fn socket_path(root_dir: &Path) -> PathBuf {
    root_dir.join(SOCKET_DIR).join(SOCKET_NAME)
}

pub struct PodResourcesService {
    status: Arc<StatusStore>,
    limiter: Mutex<TokenBucket>,
    /// The KubeletPodResourcesGet gate (beta, on by default since 1.34).
    get_enabled: bool,
    devices: Option<Arc<DeviceManager>>,
    cpus: Option<Arc<CpuManager>>,
    memory: Option<Arc<MemoryManager>>,
}

/// Whether `Get` is served: the KubeletPodResourcesGet gate, on unless turned off.
pub fn get_enabled(feature_gates: &std::collections::BTreeMap<String, bool>) -> bool {
    feature_gates
        .get("KubeletPodResourcesGet")
        .copied()
        .unwrap_or(true)
}

impl PodResourcesService {
    pub fn new(status: Arc<StatusStore>, get_enabled: bool) -> Self {
        PodResourcesService {
            status,
            limiter: Mutex::new(TokenBucket::new(QPS, BURST, Instant::now())),
            get_enabled,
            devices: None,
            cpus: None,
            memory: None,
        }
    }

    pub fn with_devices(mut self, devices: Arc<DeviceManager>) -> Self {
        self.devices = Some(devices);
        self
    }

    pub fn with_cpus(mut self, cpus: Arc<CpuManager>) -> Self {
        self.cpus = Some(cpus);
        self
    }

    pub fn with_memory(mut self, memory: Arc<MemoryManager>) -> Self {
        self.memory = Some(memory);
        self
    }

    fn resources_of(&self, pod: &Pod) -> api::PodResources {
        resources_of(
            pod,
            self.devices.as_deref(),
            self.cpus.as_deref(),
            self.memory.as_deref(),
        )
    }

    fn admit(&self) -> Result<(), Status> {
        let mut bucket = self.limiter.lock().unwrap_or_else(|e| e.into_inner());
        bucket
            .take(Instant::now())
            .map_err(|_| Status::resource_exhausted("rejected by rate limit"))
    }
}

fn is_active(pod: &Pod) -> bool {
    !pod.status.as_ref().is_some_and(crate::status::has_finished)
}

fn topology(numa: Option<i64>) -> Option<api::TopologyInfo> {
    numa.map(|id| api::TopologyInfo {
        nodes: vec![api::NumaNode { id }],
    })
}

fn container_memory(blocks: Vec<Block>) -> Vec<api::ContainerMemory> {
    blocks
        .into_iter()
        .map(|b| api::ContainerMemory {
            memory_type: b.resource,
            size: b.size,
            topology: Some(api::TopologyInfo {
                nodes: b
                    .numa_affinity
                    .into_iter()
                    .map(|id| api::NumaNode { id: i64::from(id) })
                    .collect(),
            }),
        })
        .collect()
}

fn container_devices(held: Vec<HeldDevices>) -> Vec<api::ContainerDevices> {
    held.into_iter()
        .map(|h| api::ContainerDevices {
            resource_name: h.resource,
            device_ids: h.ids,
            topology: topology(h.numa),
        })
        .collect()
}

/// A pod's entry: its containers plus init containers that keep running (sidecars), each
/// with the devices it holds.
fn resources_of(
    pod: &Pod,
    devices: Option<&DeviceManager>,
    cpus: Option<&CpuManager>,
    memory: Option<&MemoryManager>,
) -> api::PodResources {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let sidecars = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let containers = spec.map(|s| s.containers.iter()).into_iter().flatten();
    api::PodResources {
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        containers: sidecars
            .chain(containers)
            .map(|c| api::ContainerResources {
                name: c.name.clone(),
                devices: devices
                    .map(|d| container_devices(d.container_devices(uid, &c.name)))
                    .unwrap_or_default(),
                cpu_ids: cpus
                    .map(|m| {
                        m.exclusive_cpus(uid, &c.name)
                            .iter()
                            .map(i64::from)
                            .collect()
                    })
                    .unwrap_or_default(),
                memory: memory
                    .map(|m| container_memory(m.blocks(uid, &c.name)))
                    .unwrap_or_default(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl PodResourcesLister for PodResourcesService {
    async fn list(
        &self,
        _: Request<api::ListPodResourcesRequest>,
    ) -> Result<Response<api::ListPodResourcesResponse>, Status> {
        self.admit()?;
        let pod_resources = self
            .status
            .pods()
            .iter()
            .filter(|p| is_active(p))
            .map(|p| self.resources_of(p))
            .collect();
        Ok(Response::new(api::ListPodResourcesResponse {
            pod_resources,
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<api::AllocatableResourcesRequest>,
    ) -> Result<Response<api::AllocatableResourcesResponse>, Status> {
        self.admit()?;
        // One entry per device, as upstream lists them.
        let devices = self
            .devices
            .as_ref()
            .map(|d| d.allocatable_devices())
            .unwrap_or_default()
            .into_iter()
            .map(|(resource_name, id, numa)| api::ContainerDevices {
                resource_name,
                device_ids: vec![id],
                topology: (!numa.is_empty()).then(|| api::TopologyInfo {
                    nodes: numa.into_iter().map(|id| api::NumaNode { id }).collect(),
                }),
            })
            .collect();
        let cpu_ids = self
            .cpus
            .as_ref()
            .map(|m| m.allocatable_cpus().iter().map(i64::from).collect())
            .unwrap_or_default();
        let memory = self
            .memory
            .as_ref()
            .map(|m| container_memory(m.allocatable()))
            .unwrap_or_default();
        Ok(Response::new(api::AllocatableResourcesResponse {
            devices,
            cpu_ids,
            memory,
        }))
    }

    async fn get(
        &self,
        request: Request<api::GetPodResourcesRequest>,
    ) -> Result<Response<api::GetPodResourcesResponse>, Status> {
        self.admit()?;
        if !self.get_enabled {
            return Err(Status::unknown("PodResources API Get method disabled"));
        }
        let req = request.into_inner();
        let pod = self.status.find(&req.pod_namespace, &req.pod_name, None);
        match pod {
            Some(pod) => Ok(Response::new(api::GetPodResourcesResponse {
                pod_resources: Some(self.resources_of(&pod)),
            })),
            // Upstream answers a plain error (gRPC code Unknown) with this text.
            None => Err(Status::unknown(format!(
                "pod {} in namespace {} not found",
                req.pod_name, req.pod_namespace
            ))),
        }
    }
}

/// Binds the socket (replacing a stale one from a previous run), so a failure is a start-up
/// error, then serves until cancelled.
pub fn bind(root_dir: &Path) -> Result<tokio::net::UnixListener, PodResourcesError> {
    let path = socket_path(root_dir);
    let io = |op, source| PodResourcesError::Io {
        op,
        path: path.clone(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io("create", e))?;
    }
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io("remove", e)),
        _ => {}
    }
    tokio::net::UnixListener::bind(&path).map_err(|e| io("listen on", e))
}

/// Serves the bound socket until cancelled; a failure ends the kubelet.
pub fn spawn(
    listener: tokio::net::UnixListener,
    service: PodResourcesService,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) {
    tasks.critical_fallible(
        "pod-resources server",
        serve(listener, service, cancel.child_token()),
    );
}

pub async fn serve(
    listener: tokio::net::UnixListener,
    service: PodResourcesService,
    cancel: CancellationToken,
) -> Result<(), PodResourcesError> {
    if let Ok(addr) = listener.local_addr()
        && let Some(path) = addr.as_pathname()
    {
        info!(socket = %path.display(), "Serving pod resources");
    }
    let service = Arc::new(service);
    let alpha = v1alpha1::V1Alpha1(service.clone());
    tonic::transport::Server::builder()
        .add_service(PodResourcesListerServer::from_arc(service))
        .add_service(
            v1alpha1::api::pod_resources_lister_server::PodResourcesListerServer::new(alpha),
        )
        .serve_with_incoming_shutdown(crate::grpc_uds::incoming(listener), cancel.cancelled())
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests;
