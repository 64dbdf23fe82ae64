#![allow(dead_code)]

//! A device plugin of our own for the tests, served from the test process as a real plugin
//! runs beside the kubelet: the DevicePlugin service on its socket in the device-plugins
//! folder, registered with the kubelet's Registration service. Like upstream's sample plugin
//! it watches `kubelet.sock`: when a (re)started kubelet makes it anew (and has cleared the
//! folder, its socket with it), it serves again and registers again. Its devices are names
//! with a health the test sets; Allocate answers with an env variable naming the devices, a
//! device node (`/dev/null` as `/dev/krs-widget`), a read-only mount of a folder of its own
//! and an annotation. Every Allocate and every registration verdict is kept for the test.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubelet_rs::testing::deviceplugin as api;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

pub const DIR: &str = "/var/lib/kubelet/device-plugins";
pub const ENV: &str = "KRS_TEST_DEVICES";
pub const DEVICE_PATH: &str = "/dev/krs-widget";
pub const MOUNT_PATH: &str = "/krs-widget";
pub const ANNOTATION: &str = "test.kubelet-rs.io/widgets";

#[derive(Clone)]
struct Service {
    devices: watch::Receiver<Vec<api::Device>>,
    allocations: Arc<Mutex<Vec<Vec<String>>>>,
    mount_dir: PathBuf,
    stop: CancellationToken,
}

type DeviceStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<api::ListAndWatchResponse, Status>> + Send>,
>;

#[tonic::async_trait]
impl api::device_plugin_server::DevicePlugin for Service {
    async fn get_device_plugin_options(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<api::DevicePluginOptions>, Status> {
        Ok(Response::new(api::DevicePluginOptions::default()))
    }

    async fn list_and_watch(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<DeviceStream>, Status> {
        let mut rx = self.devices.clone();
        let stop = self.stop.clone();
        let stream = async_stream_lists(move |tx| async move {
            loop {
                let list = rx.borrow_and_update().clone();
                if tx
                    .send(Ok(api::ListAndWatchResponse { devices: list }))
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    r = rx.changed() => if r.is_err() { return },
                }
            }
        });
        Ok(Response::new(stream))
    }

    async fn allocate(
        &self,
        req: Request<api::AllocateRequest>,
    ) -> Result<Response<api::AllocateResponse>, Status> {
        let mut answers = Vec::new();
        for c in req.into_inner().container_requests {
            self.allocations.lock().unwrap().push(c.devices_ids.clone());
            let ids = c.devices_ids.join(",");
            answers.push(api::ContainerAllocateResponse {
                envs: HashMap::from([(ENV.to_string(), ids.clone())]),
                mounts: vec![api::Mount {
                    container_path: MOUNT_PATH.into(),
                    host_path: self.mount_dir.display().to_string(),
                    read_only: true,
                }],
                devices: vec![api::DeviceSpec {
                    container_path: DEVICE_PATH.into(),
                    host_path: "/dev/null".into(),
                    permissions: "rw".into(),
                }],
                annotations: HashMap::from([(ANNOTATION.to_string(), ids)]),
                cdi_devices: Vec::new(),
            });
        }
        Ok(Response::new(api::AllocateResponse {
            container_responses: answers,
        }))
    }
}

/// A stream fed by a task, so the plugin needs no stream-building crate.
fn async_stream_lists<F, Fut>(body: F) -> DeviceStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<api::ListAndWatchResponse, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(body(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

pub struct TestPlugin {
    pub resource: String,
    pub socket: PathBuf,
    devices: watch::Sender<Vec<api::Device>>,
    pub allocations: Arc<Mutex<Vec<Vec<String>>>>,
    /// The kubelet's verdicts on each registration: None for accepted, else its message.
    pub verdicts: Arc<Mutex<Vec<Option<String>>>>,
    cancel: CancellationToken,
    _mount_dir: tempfile::TempDir,
}

fn device(id: &str, healthy: bool) -> api::Device {
    api::Device {
        id: id.to_string(),
        health: if healthy { "Healthy" } else { "Unhealthy" }.to_string(),
        topology: None,
    }
}

fn inode(path: &Path) -> Option<(u64, i64)> {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.ino(), m.ctime_nsec()))
}

impl TestPlugin {
    /// Serves `resource` with these healthy devices on `<DIR>/<socket_name>`, and registers
    /// whenever the kubelet's socket is (re)made; runs on the caller's tokio runtime.
    pub fn start(resource: &str, socket_name: &str, ids: &[&str]) -> Self {
        let socket = Path::new(DIR).join(socket_name);
        let mount_dir = tempfile::tempdir().unwrap();
        std::fs::write(mount_dir.path().join("hello"), "from the widget plugin\n").unwrap();
        let (devices, rx) = watch::channel(ids.iter().map(|id| device(id, true)).collect());
        let allocations = Arc::new(Mutex::new(Vec::new()));
        let verdicts = Arc::new(Mutex::new(Vec::new()));
        let cancel = CancellationToken::new();
        let service = Service {
            devices: rx,
            allocations: allocations.clone(),
            mount_dir: mount_dir.path().to_path_buf(),
            stop: cancel.clone(),
        };
        tokio::spawn(run(
            resource.to_string(),
            socket.clone(),
            service,
            verdicts.clone(),
            cancel.clone(),
        ));
        TestPlugin {
            resource: resource.to_string(),
            socket,
            devices,
            allocations,
            verdicts,
            cancel,
            _mount_dir: mount_dir,
        }
    }

    pub fn set_health(&self, id: &str, healthy: bool) {
        self.devices.send_modify(|list| {
            for d in list.iter_mut().filter(|d| d.id == id) {
                *d = device(id, healthy);
            }
        });
    }

    pub fn verdicts(&self) -> Vec<Option<String>> {
        self.verdicts.lock().unwrap().clone()
    }

    pub fn stop(&self) {
        self.cancel.cancel();
    }
}

impl Drop for TestPlugin {
    fn drop(&mut self) {
        self.cancel.cancel();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Serves the plugin while the kubelet's socket stays the same one; each new kubelet socket
/// means a new kubelet: serve afresh (the old socket is gone) and register.
async fn run(
    resource: String,
    socket: PathBuf,
    service: Service,
    verdicts: Arc<Mutex<Vec<Option<String>>>>,
    cancel: CancellationToken,
) {
    let kubelet_socket = Path::new(DIR).join("kubelet.sock");
    let mut seen = None;
    let mut serving: Option<CancellationToken> = None;
    loop {
        let now = inode(&kubelet_socket);
        if now.is_some() && now != seen {
            seen = now;
            if let Some(old) = serving.take() {
                old.cancel();
            }
            let stop = cancel.child_token();
            let _ = std::fs::remove_file(&socket);
            let listener = tokio::net::UnixListener::bind(&socket).expect("bind plugin socket");
            let svc = service.clone();
            let s = stop.clone();
            tokio::spawn(async move {
                let _ = tonic::transport::Server::builder()
                    .add_service(api::device_plugin_server::DevicePluginServer::new(svc))
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::UnixListenerStream::new(listener),
                        s.cancelled(),
                    )
                    .await;
            });
            serving = Some(stop);
            let verdict = register(&kubelet_socket, &resource, &socket).await;
            verdicts.lock().unwrap().push(verdict);
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

async fn register(kubelet_socket: &Path, resource: &str, socket: &Path) -> Option<String> {
    let channel = match kubelet_rs::testing::connect_channel(
        &kubelet_socket.display().to_string(),
        Duration::from_secs(5),
    )
    .await
    {
        Ok(c) => c,
        Err(e) => return Some(format!("dial: {e}")),
    };
    let req = api::RegisterRequest {
        version: "v1beta1".into(),
        endpoint: socket.file_name().unwrap().to_string_lossy().into_owned(),
        resource_name: resource.to_string(),
        options: Some(api::DevicePluginOptions::default()),
    };
    match api::registration_client::RegistrationClient::new(channel)
        .register(req)
        .await
    {
        Ok(_) => None,
        Err(s) => Some(s.message().to_string()),
    }
}
