//! An in-memory CRI runtime for unit tests, served over a real unix socket so the kubelet's
//! own [`RuntimeClient`] (deadlines, error mapping, cancellation by dropping a call) is what
//! talks to it.
//!
//! It follows containerd's CRI plugin where the kubelet can tell the difference: sandbox and
//! container names are reserved until removal (so a reused attempt number fails), Stop and
//! Remove of an unknown id succeed while Status of one is NOT_FOUND, stopping or removing a
//! sandbox force-kills its containers, StartContainer needs a CREATED container in a READY
//! sandbox and creates the log file, CreateContainer needs the image locally, and exited
//! containers carry the reason "Completed" or "Error". Images are normalised
//! docker-style (`busybox` is `docker.io/library/busybox:latest`).
//!
//! ReopenContainerLog creates the log file anew, as containerd does for a running container.
//!
//! Test hooks: [`FakeRuntime::exit_container`] and [`FakeRuntime::exit_on_start`] end a
//! container's process, [`FakeRuntime::fail_next`] makes the next call of an RPC fail before
//! the runtime acts on it, [`FakeRuntime::delay`] holds an RPC (a delayed call that the client
//! abandons is listed by [`FakeRuntime::cancelled`]), [`FakeRuntime::omit_next_sandbox_id`]
//! breaks the CRI contract once, and [`FakeRuntime::calls`] is the call log. ExecSync runs
//! nothing: it answers exit code 0 for a running container, so it is there to be delayed.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use md5::{Digest, Md5};
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::RuntimeClient;
use super::api;
use super::api::image_service_server::{ImageService, ImageServiceServer};
use super::api::runtime_service_server::{RuntimeService, RuntimeServiceServer};

/// Exit code of a process killed by SIGKILL (forced stops).
pub const EXIT_SIGKILL: i32 = 137;
/// Exit code of a process that died of SIGTERM (stops with a grace period).
pub const EXIT_SIGTERM: i32 = 143;
/// containerd's exit code and reason for a container whose start failed.
const START_ERROR_CODE: i32 = 128;

/// One RPC as the fake received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub method: &'static str,
    /// The sandbox or container name (metadata name) the call is about, or the image; empty
    /// for calls about nothing in particular (List*, Version, Status).
    pub subject: String,
    /// StopContainer's grace period in seconds.
    pub timeout: Option<i64>,
}

struct Sandbox {
    status: api::PodSandboxStatus,
    /// The reserved name, released on removal.
    name: String,
}

struct Ctr {
    status: api::ContainerStatus,
    sandbox_id: String,
    name: String,
}

#[derive(Default)]
struct State {
    next_id: u64,
    next_ip: u32,
    sandboxes: Vec<Sandbox>,
    containers: Vec<Ctr>,
    /// Reserved sandbox and container names, to the id holding them.
    names: HashMap<String, String>,
    images: Vec<api::Image>,
    /// Normalised references a PullImage can fetch.
    registry: HashSet<String>,
    fail_next: HashMap<&'static str, Status>,
    delays: HashMap<&'static str, Duration>,
    exit_on_start: HashMap<String, i32>,
    stop_exit_code: Option<i32>,
    omit_sandbox_id: bool,
    calls: Vec<Call>,
    cancelled: Vec<&'static str>,
    /// The `traceparent` of every request that carried one.
    traceparents: Vec<String>,
}

impl State {
    fn new_id(&mut self) -> String {
        self.next_id += 1;
        let mut h = Md5::new();
        h.update(self.next_id.to_le_bytes());
        let d = hex::encode(h.finalize());
        format!("{d}{d}")
    }

    fn reserve(&mut self, name: &str, id: &str, what: &str) -> Result<(), Status> {
        if let Some(holder) = self.names.get(name) {
            return Err(Status::unknown(format!(
                "failed to reserve {what} name {name:?}: name {name:?} is reserved for {holder:?}"
            )));
        }
        self.names.insert(name.to_string(), id.to_string());
        Ok(())
    }

    fn sandbox(&self, id: &str) -> Option<&Sandbox> {
        self.sandboxes.iter().find(|s| s.status.id == id)
    }

    fn sandbox_mut(&mut self, id: &str) -> Option<&mut Sandbox> {
        self.sandboxes.iter_mut().find(|s| s.status.id == id)
    }

    fn container_mut(&mut self, id: &str) -> Option<&mut Ctr> {
        self.containers.iter_mut().find(|c| c.status.id == id)
    }

    fn image(&self, reference: &str) -> Option<&api::Image> {
        let wanted = normalize_image(reference);
        self.images
            .iter()
            .find(|i| i.id == reference || i.repo_tags.contains(&wanted))
    }

    /// The process is gone: `finished_at` is now and the exit code as given.
    fn exit(c: &mut Ctr, code: i32) {
        if c.status.state == api::ContainerState::ContainerRunning as i32 {
            c.status.state = api::ContainerState::ContainerExited as i32;
            c.status.finished_at = now_nanos();
            c.status.exit_code = code;
        }
    }

    /// What StopPodSandbox does: containers are killed outright, the network goes away.
    fn stop_sandbox(&mut self, id: &str) {
        for c in self.containers.iter_mut().filter(|c| c.sandbox_id == id) {
            Self::exit(c, EXIT_SIGKILL);
        }
        if let Some(sb) = self.sandbox_mut(id) {
            sb.status.state = api::PodSandboxState::SandboxNotready as i32;
            if let Some(net) = sb.status.network.as_mut() {
                net.ip.clear();
                net.additional_ips.clear();
            }
        }
    }

    fn remove_container(&mut self, id: &str) {
        if let Some(pos) = self.containers.iter().position(|c| c.status.id == id) {
            let c = self.containers.remove(pos);
            self.names.remove(&c.name);
        }
    }

    fn subject_of_sandbox(&self, id: &str) -> String {
        self.sandbox(id)
            .and_then(|s| s.status.metadata.as_ref())
            .map_or_else(|| id.to_string(), |m| m.name.clone())
    }

    fn subject_of_container(&self, id: &str) -> String {
        self.containers
            .iter()
            .find(|c| c.status.id == id)
            .and_then(|c| c.status.metadata.as_ref())
            .map_or_else(|| id.to_string(), |m| m.name.clone())
    }
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Docker-style reference normalisation, as containerd applies it to CRI image names:
/// a missing registry is docker.io (plus `library/` for single names), a missing tag is
/// `latest`. Image ids (`sha256:…`) are returned as they are.
pub fn normalize_image(reference: &str) -> String {
    if reference.starts_with("sha256:") {
        return reference.to_string();
    }
    let (first, rest) = reference.split_once('/').unwrap_or(("", reference));
    let has_registry =
        !first.is_empty() && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = if has_registry {
        reference.to_string()
    } else if first.is_empty() {
        format!("docker.io/library/{rest}")
    } else {
        format!("docker.io/{reference}")
    };
    let last = full.rsplit('/').next().unwrap_or_default();
    if full.contains('@') || last.contains(':') {
        full
    } else {
        format!("{full}:latest")
    }
}

fn labels_match(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn exited_reason(status: &api::ContainerStatus) -> String {
    let exited = status.state == api::ContainerState::ContainerExited as i32;
    if !exited || !status.reason.is_empty() {
        status.reason.clone()
    } else if status.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    }
}

/// The fake runtime; clones share one state.
#[derive(Clone, Default)]
pub struct FakeRuntime {
    state: Arc<Mutex<State>>,
}

/// Marks a delayed call that the client abandoned (its future is dropped mid-delay).
struct InFlight {
    fake: FakeRuntime,
    method: &'static str,
    done: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.done {
            self.fake.lock().cancelled.push(self.method);
        }
    }
}

impl FakeRuntime {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Logs the call, then applies the injected failure or delay for this method.
    async fn enter(
        &self,
        method: &'static str,
        subject: impl FnOnce(&State) -> String,
        timeout: Option<i64>,
    ) -> Result<(), Status> {
        let (fail, delay) = {
            let mut s = self.lock();
            let subject = subject(&s);
            s.calls.push(Call {
                method,
                subject,
                timeout,
            });
            (s.fail_next.remove(method), s.delays.get(method).copied())
        };
        if let Some(status) = fail {
            return Err(status);
        }
        if let Some(d) = delay {
            let mut guard = InFlight {
                fake: self.clone(),
                method,
                done: false,
            };
            tokio::time::sleep(d).await;
            guard.done = true;
        }
        Ok(())
    }

    // ---- test hooks ----

    /// Makes `image` present on the node; returns its id.
    pub fn add_image(&self, image: &str) -> String {
        let mut s = self.lock();
        let name = normalize_image(image);
        if let Some(existing) = s.images.iter().find(|i| i.repo_tags.contains(&name)) {
            return existing.id.clone();
        }
        let mut h = Md5::new();
        h.update(name.as_bytes());
        let d = hex::encode(h.finalize());
        let id = format!("sha256:{d}{d}");
        s.images.push(api::Image {
            id: id.clone(),
            repo_tags: vec![name.clone()],
            size: 1 << 20,
            spec: Some(api::ImageSpec {
                image: name,
                ..Default::default()
            }),
            ..Default::default()
        });
        id
    }

    /// Lets PullImage fetch `image` (the registry has it).
    pub fn add_remote_image(&self, image: &str) {
        self.lock().registry.insert(normalize_image(image));
    }

    pub fn has_image(&self, image: &str) -> bool {
        self.lock().image(image).is_some()
    }

    /// The container's process ends with `code`, as if it exited on its own. False when the
    /// container is unknown or not running.
    pub fn exit_container(&self, id: &str, code: i32) -> bool {
        let mut s = self.lock();
        match s.container_mut(id) {
            Some(c) if c.status.state == api::ContainerState::ContainerRunning as i32 => {
                State::exit(c, code);
                true
            }
            _ => false,
        }
    }

    /// Every container named `name` (metadata name) started from now on exits with `code`
    /// right after it starts: a process that ends at once.
    pub fn exit_on_start(&self, name: &str, code: i32) {
        self.lock().exit_on_start.insert(name.to_string(), code);
    }

    /// The next call of `method` (e.g. "PullImage") fails with `status` before the runtime
    /// does anything.
    pub fn fail_next(&self, method: &'static str, status: Status) {
        self.lock().fail_next.insert(method, status);
    }

    /// The next RunPodSandbox succeeds without creating anything and answers with no id, as a
    /// runtime that breaks the CRI contract would.
    pub fn omit_next_sandbox_id(&self) {
        self.lock().omit_sandbox_id = true;
    }

    /// Every call of `method` waits `d` before it is handled.
    pub fn delay(&self, method: &'static str, d: Duration) {
        self.lock().delays.insert(method, d);
    }

    pub fn clear_delay(&self, method: &'static str) {
        self.lock().delays.remove(method);
    }

    /// Method names of all calls so far, in order.
    /// The `traceparent` metadata of every request that carried one, in order.
    pub fn traceparents(&self) -> Vec<String> {
        self.lock().traceparents.clone()
    }

    /// A server interceptor keeping each request's `traceparent`.
    fn trace_capture(&self) -> impl tonic::service::Interceptor + Clone + use<> {
        let fake = self.clone();
        move |req: Request<()>| {
            if let Some(tp) = req
                .metadata()
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
            {
                fake.lock().traceparents.push(tp.to_string());
            }
            Ok(req)
        }
    }

    pub fn calls(&self) -> Vec<&'static str> {
        self.lock().calls.iter().map(|c| c.method).collect()
    }

    /// All calls so far, in order, with their subjects.
    pub fn call_log(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Calls of one method, in order.
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    pub fn count(&self, method: &str) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .count()
    }

    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// Methods of delayed calls the client gave up on before they were handled.
    pub fn cancelled(&self) -> Vec<&'static str> {
        self.lock().cancelled.clone()
    }

    pub fn sandboxes(&self) -> Vec<api::PodSandboxStatus> {
        self.lock()
            .sandboxes
            .iter()
            .map(|s| s.status.clone())
            .collect()
    }

    pub fn containers(&self) -> Vec<api::ContainerStatus> {
        self.lock()
            .containers
            .iter()
            .map(|c| {
                let mut st = c.status.clone();
                st.reason = exited_reason(&st);
                st
            })
            .collect()
    }

    /// The newest attempt of the container with this metadata name.
    pub fn container(&self, name: &str) -> Option<api::ContainerStatus> {
        self.containers()
            .into_iter()
            .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
            .max_by_key(|c| (c.metadata.as_ref().map(|m| m.attempt), c.created_at))
    }
}

#[tonic::async_trait]
impl RuntimeService for FakeRuntime {
    async fn version(
        &self,
        request: Request<api::VersionRequest>,
    ) -> Result<Response<api::VersionResponse>, Status> {
        self.enter("Version", |_| String::new(), None).await?;
        Ok(Response::new(api::VersionResponse {
            version: request.into_inner().version,
            runtime_name: "fake".into(),
            runtime_version: "0.1.0".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn status(
        &self,
        _request: Request<api::StatusRequest>,
    ) -> Result<Response<api::StatusResponse>, Status> {
        self.enter("Status", |_| String::new(), None).await?;
        let ready = |t: &str| api::RuntimeCondition {
            r#type: t.into(),
            status: true,
            ..Default::default()
        };
        Ok(Response::new(api::StatusResponse {
            status: Some(api::RuntimeStatus {
                conditions: vec![ready("RuntimeReady"), ready("NetworkReady")],
            }),
            ..Default::default()
        }))
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<api::RunPodSandboxRequest>,
    ) -> Result<Response<api::RunPodSandboxResponse>, Status> {
        let req = request.into_inner();
        let config = req.config.unwrap_or_default();
        let meta = config.metadata.clone();
        let subject = meta.as_ref().map(|m| m.name.clone()).unwrap_or_default();
        self.enter("RunPodSandbox", |_| subject, None).await?;
        if std::mem::take(&mut self.lock().omit_sandbox_id) {
            return Ok(Response::new(api::RunPodSandboxResponse::default()));
        }
        let meta =
            meta.ok_or_else(|| Status::invalid_argument("sandbox config must include metadata"))?;
        let mut s = self.lock();
        let id = s.new_id();
        let name = format!(
            "{}_{}_{}_{}",
            meta.name, meta.namespace, meta.uid, meta.attempt
        );
        s.reserve(&name, &id, "sandbox")?;
        let host_network = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|sc| sc.namespace_options.as_ref())
            .is_some_and(|ns| ns.network == api::NamespaceMode::Node as i32);
        let ip = if host_network {
            String::new()
        } else {
            s.next_ip += 1;
            format!("10.88.{}.{}", s.next_ip / 250, s.next_ip % 250 + 2)
        };
        s.sandboxes.push(Sandbox {
            status: api::PodSandboxStatus {
                id: id.clone(),
                metadata: Some(meta),
                state: api::PodSandboxState::SandboxReady as i32,
                created_at: now_nanos(),
                network: Some(api::PodSandboxNetworkStatus {
                    ip,
                    additional_ips: Vec::new(),
                }),
                labels: config.labels,
                annotations: config.annotations,
                runtime_handler: req.runtime_handler,
                ..Default::default()
            },
            name,
        });
        Ok(Response::new(api::RunPodSandboxResponse {
            pod_sandbox_id: id,
        }))
    }

    async fn stop_pod_sandbox(
        &self,
        request: Request<api::StopPodSandboxRequest>,
    ) -> Result<Response<api::StopPodSandboxResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        self.enter("StopPodSandbox", |s| s.subject_of_sandbox(&id), None)
            .await?;
        // Stopping what is already gone succeeds: the call is idempotent.
        self.lock().stop_sandbox(&id);
        Ok(Response::new(api::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        request: Request<api::RemovePodSandboxRequest>,
    ) -> Result<Response<api::RemovePodSandboxResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        self.enter("RemovePodSandbox", |s| s.subject_of_sandbox(&id), None)
            .await?;
        let mut s = self.lock();
        if s.sandbox(&id).is_none() {
            return Ok(Response::new(api::RemovePodSandboxResponse {}));
        }
        s.stop_sandbox(&id);
        let inside: Vec<String> = s
            .containers
            .iter()
            .filter(|c| c.sandbox_id == id)
            .map(|c| c.status.id.clone())
            .collect();
        for c in inside {
            s.remove_container(&c);
        }
        if let Some(pos) = s.sandboxes.iter().position(|sb| sb.status.id == id) {
            let sb = s.sandboxes.remove(pos);
            s.names.remove(&sb.name);
        }
        Ok(Response::new(api::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<api::PodSandboxStatusRequest>,
    ) -> Result<Response<api::PodSandboxStatusResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        self.enter("PodSandboxStatus", |s| s.subject_of_sandbox(&id), None)
            .await?;
        let s = self.lock();
        let sb = s
            .sandbox(&id)
            .ok_or_else(|| Status::not_found(format!("sandbox {id:?} not found")))?;
        Ok(Response::new(api::PodSandboxStatusResponse {
            status: Some(sb.status.clone()),
            ..Default::default()
        }))
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<api::ListPodSandboxRequest>,
    ) -> Result<Response<api::ListPodSandboxResponse>, Status> {
        self.enter("ListPodSandbox", |_| String::new(), None)
            .await?;
        let filter = request.into_inner().filter.unwrap_or_default();
        let s = self.lock();
        let items = s
            .sandboxes
            .iter()
            .map(|sb| &sb.status)
            .filter(|st| filter.id.is_empty() || st.id == filter.id)
            .filter(|st| filter.state.as_ref().is_none_or(|v| v.state == st.state))
            .filter(|st| labels_match(&filter.label_selector, &st.labels))
            .map(|st| api::PodSandbox {
                id: st.id.clone(),
                metadata: st.metadata.clone(),
                state: st.state,
                created_at: st.created_at,
                labels: st.labels.clone(),
                annotations: st.annotations.clone(),
                runtime_handler: st.runtime_handler.clone(),
            })
            .collect();
        Ok(Response::new(api::ListPodSandboxResponse { items }))
    }

    async fn create_container(
        &self,
        request: Request<api::CreateContainerRequest>,
    ) -> Result<Response<api::CreateContainerResponse>, Status> {
        let req = request.into_inner();
        let config = req.config.unwrap_or_default();
        let meta = config.metadata.clone();
        let subject = meta.as_ref().map(|m| m.name.clone()).unwrap_or_default();
        self.enter("CreateContainer", |_| subject, None).await?;
        let meta =
            meta.ok_or_else(|| Status::invalid_argument("container config must include metadata"))?;
        let sandbox_config = req.sandbox_config.unwrap_or_default();
        let sb_meta = sandbox_config
            .metadata
            .ok_or_else(|| Status::invalid_argument("pod sandbox config must include metadata"))?;
        let mut s = self.lock();
        if s.sandbox(&req.pod_sandbox_id).is_none() {
            return Err(Status::not_found(format!(
                "failed to find sandbox id {:?}",
                req.pod_sandbox_id
            )));
        }
        let wanted = config.image.as_ref().map(|i| i.image.clone());
        let image = s
            .image(wanted.as_deref().unwrap_or_default())
            .cloned()
            .ok_or_else(|| Status::not_found(format!("failed to resolve image {:?}", wanted)))?;
        let id = s.new_id();
        let name = format!(
            "{}_{}_{}_{}_{}",
            meta.name, sb_meta.name, sb_meta.namespace, sb_meta.uid, meta.attempt
        );
        s.reserve(&name, &id, "container")?;
        let log_path = if sandbox_config.log_directory.is_empty() || config.log_path.is_empty() {
            String::new()
        } else {
            PathBuf::from(&sandbox_config.log_directory)
                .join(&config.log_path)
                .to_string_lossy()
                .into_owned()
        };
        s.containers.push(Ctr {
            status: api::ContainerStatus {
                id: id.clone(),
                metadata: Some(meta),
                state: api::ContainerState::ContainerCreated as i32,
                created_at: now_nanos(),
                image: Some(api::ImageSpec {
                    image: image.repo_tags.first().cloned().unwrap_or_default(),
                    ..Default::default()
                }),
                image_ref: image.id.clone(),
                image_id: image.id,
                labels: config.labels,
                annotations: config.annotations,
                log_path,
                ..Default::default()
            },
            sandbox_id: req.pod_sandbox_id,
            name,
        });
        Ok(Response::new(api::CreateContainerResponse {
            container_id: id,
        }))
    }

    async fn start_container(
        &self,
        request: Request<api::StartContainerRequest>,
    ) -> Result<Response<api::StartContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        self.enter("StartContainer", |s| s.subject_of_container(&id), None)
            .await?;
        let log_path = {
            let mut s = self.lock();
            let exit_on_start = s.exit_on_start.clone();
            let sandbox_ready = |s: &State, sb: &str| {
                s.sandbox(sb)
                    .is_some_and(|x| x.status.state == api::PodSandboxState::SandboxReady as i32)
            };
            let Some(sandbox_id) = s
                .containers
                .iter()
                .find(|c| c.status.id == id)
                .map(|c| c.sandbox_id.clone())
            else {
                return Err(Status::not_found(format!("container {id:?} not found")));
            };
            let ready = sandbox_ready(&s, &sandbox_id);
            let Some(c) = s.container_mut(&id) else {
                return Err(Status::not_found(format!("container {id:?} not found")));
            };
            if c.status.state != api::ContainerState::ContainerCreated as i32 {
                let state = api::ContainerState::try_from(c.status.state)
                    .map(|st| st.as_str_name())
                    .unwrap_or("CONTAINER_UNKNOWN");
                return Err(Status::unknown(format!("container is in {state} state")));
            }
            if !ready {
                // containerd marks a container whose start failed as exited.
                c.status.state = api::ContainerState::ContainerExited as i32;
                c.status.finished_at = now_nanos();
                c.status.exit_code = START_ERROR_CODE;
                c.status.reason = "StartError".into();
                return Err(Status::unknown(format!(
                    "sandbox container {sandbox_id:?} is not running"
                )));
            }
            c.status.state = api::ContainerState::ContainerRunning as i32;
            c.status.started_at = now_nanos();
            let name = c.status.metadata.as_ref().map(|m| m.name.clone());
            if let Some(code) = name.and_then(|n| exit_on_start.get(&n).copied()) {
                State::exit(c, code);
            }
            c.status.log_path.clone()
        };
        open_log(&log_path)?;
        Ok(Response::new(api::StartContainerResponse {}))
    }

    async fn reopen_container_log(
        &self,
        request: Request<api::ReopenContainerLogRequest>,
    ) -> Result<Response<api::ReopenContainerLogResponse>, Status> {
        let id = request.into_inner().container_id;
        self.enter("ReopenContainerLog", |s| s.subject_of_container(&id), None)
            .await?;
        let log_path = {
            let s = self.lock();
            let c = s
                .containers
                .iter()
                .find(|c| c.status.id == id)
                .ok_or_else(|| Status::not_found(format!("container {id:?} not found")))?;
            if c.status.state != api::ContainerState::ContainerRunning as i32 {
                return Err(Status::unknown("container is not running"));
            }
            c.status.log_path.clone()
        };
        open_log(&log_path)?;
        Ok(Response::new(api::ReopenContainerLogResponse {}))
    }

    async fn stop_container(
        &self,
        request: Request<api::StopContainerRequest>,
    ) -> Result<Response<api::StopContainerResponse>, Status> {
        let req = request.into_inner();
        let id = req.container_id;
        self.enter(
            "StopContainer",
            |s| s.subject_of_container(&id),
            Some(req.timeout),
        )
        .await?;
        let mut s = self.lock();
        let default = if req.timeout > 0 {
            EXIT_SIGTERM
        } else {
            EXIT_SIGKILL
        };
        let code = s.stop_exit_code.unwrap_or(default);
        // Unknown or not running: nothing to do, and no error.
        if let Some(c) = s.container_mut(&id) {
            State::exit(c, code);
        }
        Ok(Response::new(api::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        request: Request<api::RemoveContainerRequest>,
    ) -> Result<Response<api::RemoveContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        self.enter("RemoveContainer", |s| s.subject_of_container(&id), None)
            .await?;
        let mut s = self.lock();
        if let Some(c) = s.container_mut(&id) {
            State::exit(c, EXIT_SIGKILL);
        }
        s.remove_container(&id);
        Ok(Response::new(api::RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        request: Request<api::ListContainersRequest>,
    ) -> Result<Response<api::ListContainersResponse>, Status> {
        self.enter("ListContainers", |_| String::new(), None)
            .await?;
        let filter = request.into_inner().filter.unwrap_or_default();
        let s = self.lock();
        let containers = s
            .containers
            .iter()
            .filter(|c| filter.id.is_empty() || c.status.id == filter.id)
            .filter(|c| filter.pod_sandbox_id.is_empty() || c.sandbox_id == filter.pod_sandbox_id)
            .filter(|c| {
                filter
                    .state
                    .as_ref()
                    .is_none_or(|v| v.state == c.status.state)
            })
            .filter(|c| labels_match(&filter.label_selector, &c.status.labels))
            .map(|c| api::Container {
                id: c.status.id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.status.metadata.clone(),
                image: c.status.image.clone(),
                image_ref: c.status.image_ref.clone(),
                state: c.status.state,
                created_at: c.status.created_at,
                labels: c.status.labels.clone(),
                annotations: c.status.annotations.clone(),
                image_id: c.status.image_id.clone(),
            })
            .collect();
        Ok(Response::new(api::ListContainersResponse { containers }))
    }

    async fn exec_sync(
        &self,
        request: Request<api::ExecSyncRequest>,
    ) -> Result<Response<api::ExecSyncResponse>, Status> {
        let id = request.into_inner().container_id;
        self.enter("ExecSync", |s| s.subject_of_container(&id), None)
            .await?;
        let state = self
            .lock()
            .containers
            .iter()
            .find(|c| c.status.id == id)
            .map(|c| c.status.state)
            .ok_or_else(|| Status::not_found(format!("container {id:?} not found")))?;
        if state != api::ContainerState::ContainerRunning as i32 {
            // containerd refuses with a plain (UNKNOWN) error naming the state.
            let name = api::ContainerState::try_from(state)
                .map(|st| st.as_str_name())
                .unwrap_or("CONTAINER_UNKNOWN");
            return Err(Status::unknown(format!("container is in {name} state")));
        }
        Ok(Response::new(api::ExecSyncResponse::default()))
    }

    async fn container_status(
        &self,
        request: Request<api::ContainerStatusRequest>,
    ) -> Result<Response<api::ContainerStatusResponse>, Status> {
        let id = request.into_inner().container_id;
        self.enter("ContainerStatus", |s| s.subject_of_container(&id), None)
            .await?;
        let s = self.lock();
        let c = s
            .containers
            .iter()
            .find(|c| c.status.id == id)
            .ok_or_else(|| Status::not_found(format!("container {id:?} not found")))?;
        let mut status = c.status.clone();
        status.reason = exited_reason(&status);
        Ok(Response::new(api::ContainerStatusResponse {
            status: Some(status),
            ..Default::default()
        }))
    }
}

#[tonic::async_trait]
impl ImageService for FakeRuntime {
    async fn list_images(
        &self,
        request: Request<api::ListImagesRequest>,
    ) -> Result<Response<api::ListImagesResponse>, Status> {
        self.enter("ListImages", |_| String::new(), None).await?;
        let wanted = request
            .into_inner()
            .filter
            .and_then(|f| f.image)
            .map(|i| i.image)
            .filter(|i| !i.is_empty());
        let s = self.lock();
        let images = match wanted {
            Some(w) => s.image(&w).cloned().into_iter().collect(),
            None => s.images.clone(),
        };
        Ok(Response::new(api::ListImagesResponse { images }))
    }

    async fn image_status(
        &self,
        request: Request<api::ImageStatusRequest>,
    ) -> Result<Response<api::ImageStatusResponse>, Status> {
        let image = request
            .into_inner()
            .image
            .map(|i| i.image)
            .unwrap_or_default();
        self.enter("ImageStatus", |_| image.clone(), None).await?;
        // An absent image is an empty answer, not an error.
        let found = self.lock().image(&image).cloned();
        Ok(Response::new(api::ImageStatusResponse {
            image: found,
            ..Default::default()
        }))
    }

    async fn pull_image(
        &self,
        request: Request<api::PullImageRequest>,
    ) -> Result<Response<api::PullImageResponse>, Status> {
        let image = request
            .into_inner()
            .image
            .map(|i| i.image)
            .unwrap_or_default();
        self.enter("PullImage", |_| image.clone(), None).await?;
        let name = normalize_image(&image);
        let pullable = self.lock().registry.contains(&name);
        if !pullable {
            return Err(Status::not_found(format!(
                "failed to pull and unpack image {name:?}: failed to resolve reference {name:?}: {name}: not found"
            )));
        }
        let image_ref = self.add_image(&name);
        Ok(Response::new(api::PullImageResponse { image_ref }))
    }

    async fn remove_image(
        &self,
        request: Request<api::RemoveImageRequest>,
    ) -> Result<Response<api::RemoveImageResponse>, Status> {
        let image = request
            .into_inner()
            .image
            .map(|i| i.image)
            .unwrap_or_default();
        self.enter("RemoveImage", |_| image.clone(), None).await?;
        let mut s = self.lock();
        let id = s.image(&image).map(|i| i.id.clone());
        if let Some(id) = id {
            s.images.retain(|i| i.id != id);
        }
        Ok(Response::new(api::RemoveImageResponse {}))
    }
}

/// Creates the container's log file as containerd does when it starts the container or
/// reopens its log (nothing for a container without a log path).
fn open_log(log_path: &str) -> Result<(), Status> {
    if log_path.is_empty() {
        return Ok(());
    }
    let path = PathBuf::from(log_path);
    path.parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map(drop)
        })
        .map_err(|e| {
            Status::unknown(format!(
                "failed to create and open log file {log_path:?}: {e}"
            ))
        })
}

/// A [`FakeRuntime`] served on a unix socket in its own temporary directory, with a
/// connected client. Dropping it stops the server.
pub struct FakeCri {
    pub runtime: FakeRuntime,
    pub client: RuntimeClient,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl FakeCri {
    /// Serves a fresh fake; `timeout` is the client's per-call deadline.
    pub async fn start(timeout: Duration) -> FakeCri {
        let dir = tempfile::tempdir().expect("tempdir for the fake CRI socket");
        let sock = dir.path().join("cri.sock");
        let listener = UnixListener::bind(&sock).expect("bind the fake CRI socket");
        let runtime = FakeRuntime::default();
        let stop = CancellationToken::new();
        let server = tonic::transport::Server::builder()
            .add_service(RuntimeServiceServer::with_interceptor(
                runtime.clone(),
                runtime.trace_capture(),
            ))
            .add_service(ImageServiceServer::with_interceptor(
                runtime.clone(),
                runtime.trace_capture(),
            ))
            .serve_with_incoming_shutdown(
                UnixListenerStream::new(listener),
                stop.clone().cancelled_owned(),
            );
        tokio::spawn(async move {
            if let Err(e) = server.await {
                tracing::warn!(err = %e, "fake CRI server failed");
            }
        });
        let endpoint = format!("unix://{}", sock.display());
        let client = RuntimeClient::connect(&endpoint, "", timeout)
            .await
            .expect("connect to the fake CRI");
        FakeCri {
            runtime,
            client,
            stop,
            _dir: dir,
        }
    }
}

impl Drop for FakeCri {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox_config(uid: &str, attempt: u32) -> api::PodSandboxConfig {
        api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: "p".into(),
                uid: uid.into(),
                namespace: "default".into(),
                attempt,
            }),
            labels: HashMap::from([("pod".to_string(), uid.to_string())]),
            ..Default::default()
        }
    }

    fn container_config(name: &str, image: &str, attempt: u32) -> api::ContainerConfig {
        api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: name.into(),
                attempt,
            }),
            image: Some(api::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            labels: HashMap::from([("ctr".to_string(), name.to_string())]),
            ..Default::default()
        }
    }

    #[test]
    fn image_names_normalise_like_docker() {
        assert_eq!(
            normalize_image("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(normalize_image("me/app:1"), "docker.io/me/app:1");
        assert_eq!(
            normalize_image("localhost:5000/app"),
            "localhost:5000/app:latest"
        );
        assert_eq!(
            normalize_image("registry.test/a/b@sha256:ab"),
            "registry.test/a/b@sha256:ab"
        );
        assert_eq!(normalize_image("sha256:ab"), "sha256:ab");
    }

    #[tokio::test]
    async fn sandbox_and_container_lifecycle() {
        let cri = FakeCri::start(Duration::from_secs(5)).await;
        let (fake, c) = (&cri.runtime, &cri.client);
        let image_id = fake.add_image("busybox:1");
        assert_eq!(c.version().await.expect("version").runtime_name, "fake");

        let sb = c
            .run_pod_sandbox(sandbox_config("u1", 0), "")
            .await
            .expect("run sandbox");
        let status = c.pod_sandbox_status(&sb).await.expect("sandbox status");
        assert_eq!(status.state(), api::PodSandboxState::SandboxReady);
        let ip = status.network.map(|n| n.ip).unwrap_or_default();
        assert!(ip.starts_with("10.88."), "{ip}");
        // The same name and attempt again is refused while the first one exists.
        let dup = c.run_pod_sandbox(sandbox_config("u1", 0), "").await;
        assert!(dup.is_err(), "duplicate sandbox name accepted");

        // The image is resolved by its name or by its id.
        let id = c
            .create_container(
                &sb,
                container_config("a", "busybox:1", 0),
                sandbox_config("u1", 0),
            )
            .await
            .expect("create");
        let missing = c
            .create_container(
                &sb,
                container_config("b", "absent:1", 0),
                sandbox_config("u1", 0),
            )
            .await
            .expect_err("image absent");
        assert!(missing.is_not_found(), "{missing}");
        let st = c.container_status(&id).await.expect("status");
        assert_eq!(st.state(), api::ContainerState::ContainerCreated);
        assert_eq!(st.image_ref, image_id);

        c.start_container(&id).await.expect("start");
        let started = c.container_status(&id).await.expect("status");
        assert_eq!(started.state(), api::ContainerState::ContainerRunning);
        assert!(started.started_at > 0);
        assert!(c.start_container(&id).await.is_err(), "started twice");

        assert!(fake.exit_container(&id, 3));
        let exited = c.container_status(&id).await.expect("status");
        assert_eq!(exited.state(), api::ContainerState::ContainerExited);
        assert_eq!((exited.exit_code, exited.reason.as_str()), (3, "Error"));
        assert!(exited.finished_at >= exited.started_at);

        // Filters: label selector, state, sandbox id.
        let by_label = c
            .list_containers(Some(api::ContainerFilter {
                label_selector: HashMap::from([("ctr".to_string(), "a".to_string())]),
                ..Default::default()
            }))
            .await
            .expect("list");
        assert_eq!(by_label.len(), 1);
        let running = c
            .list_containers(Some(api::ContainerFilter {
                state: Some(api::ContainerStateValue {
                    state: api::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }))
            .await
            .expect("list");
        assert!(running.is_empty());
        let other_pod = c
            .list_pod_sandbox(Some(api::PodSandboxFilter {
                label_selector: HashMap::from([("pod".to_string(), "u2".to_string())]),
                ..Default::default()
            }))
            .await
            .expect("list");
        assert!(other_pod.is_empty());

        // Stop and remove are idempotent; status of a removed object is NOT_FOUND.
        c.stop_pod_sandbox(&sb).await.expect("stop sandbox");
        let stopped = c.pod_sandbox_status(&sb).await.expect("sandbox status");
        assert_eq!(stopped.state(), api::PodSandboxState::SandboxNotready);
        c.remove_pod_sandbox(&sb).await.expect("remove sandbox");
        c.remove_pod_sandbox(&sb).await.expect("remove again");
        c.stop_pod_sandbox(&sb).await.expect("stop removed");
        c.stop_container(&id, 1)
            .await
            .expect("stop removed container");
        let gone = c
            .container_status(&id)
            .await
            .expect_err("removed with sandbox");
        assert!(gone.is_not_found(), "{gone}");
        assert!(
            c.pod_sandbox_status(&sb)
                .await
                .expect_err("gone")
                .is_not_found()
        );
        // Its name is free again.
        c.run_pod_sandbox(sandbox_config("u1", 0), "")
            .await
            .expect("name released");
    }

    #[tokio::test]
    async fn stop_kills_and_start_needs_ready_sandbox() {
        let cri = FakeCri::start(Duration::from_secs(5)).await;
        let (fake, c) = (&cri.runtime, &cri.client);
        fake.add_image("busybox:1");
        let sb = c
            .run_pod_sandbox(sandbox_config("u1", 0), "")
            .await
            .expect("run sandbox");
        let a = c
            .create_container(
                &sb,
                container_config("a", "busybox:1", 0),
                sandbox_config("u1", 0),
            )
            .await
            .expect("create a");
        let b = c
            .create_container(
                &sb,
                container_config("b", "busybox:1", 0),
                sandbox_config("u1", 0),
            )
            .await
            .expect("create b");
        c.start_container(&a).await.expect("start a");
        c.stop_container(&a, 5).await.expect("stop a");
        let st = c.container_status(&a).await.expect("status");
        assert_eq!(st.exit_code, EXIT_SIGTERM);
        c.stop_pod_sandbox(&sb).await.expect("stop sandbox");
        let err = c.start_container(&b).await.expect_err("sandbox not ready");
        assert_eq!(err.code(), Some(tonic::Code::Unknown));
        let st = c.container_status(&b).await.expect("status");
        assert_eq!((st.exit_code, st.reason.as_str()), (128, "StartError"));
        let log = fake.calls_of("StopContainer");
        assert_eq!(log.len(), 1);
        assert_eq!((log[0].subject.as_str(), log[0].timeout), ("a", Some(5)));
    }

    #[tokio::test]
    async fn images_pull_from_the_registry_only() {
        let cri = FakeCri::start(Duration::from_secs(5)).await;
        let (fake, c) = (&cri.runtime, &cri.client);
        assert!(c.image_status("app:1").await.expect("status").is_none());
        let err = c
            .pull_image("app:1", None, None, Duration::from_secs(5))
            .await
            .expect_err("not in the registry");
        assert!(err.is_not_found(), "{err}");
        fake.add_remote_image("docker.io/library/app:1");
        let image_ref = c
            .pull_image("app:1", None, None, Duration::from_secs(5))
            .await
            .expect("pull");
        let found = c.image_status("app:1").await.expect("status");
        assert_eq!(found.map(|i| i.id), Some(image_ref));
        assert_eq!(c.list_images().await.expect("list").len(), 1);
        c.remove_image("app:1").await.expect("remove");
        assert!(!fake.has_image("app:1"));
    }

    #[tokio::test]
    async fn hooks_fail_delay_and_log() {
        let cri = FakeCri::start(Duration::from_millis(300)).await;
        let (fake, c) = (&cri.runtime, &cri.client);
        fake.fail_next("Version", Status::unavailable("injected"));
        let err = c.version().await.expect_err("injected failure");
        assert_eq!(err.code(), Some(tonic::Code::Unavailable));
        c.version().await.expect("only the next call fails");

        fake.delay("Status", Duration::from_secs(30));
        let started = std::time::Instant::now();
        let err = c.status(false).await.expect_err("deadline");
        assert!(matches!(err, crate::cri::CriError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // The abandoned call is dropped on the server side too.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while fake.cancelled().is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(fake.cancelled(), vec!["Status"]);
        fake.clear_delay("Status");
        c.status(false).await.expect("status");
        assert_eq!(fake.calls(), vec!["Version", "Version", "Status", "Status"]);
    }
}
