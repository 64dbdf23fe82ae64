//! The CRI RuntimeService as the fake answers it: sandboxes and containers, with containerd's
//! behaviour where the kubelet can tell the difference.

use std::collections::HashMap;
use std::path::PathBuf;

use tonic::{Request, Response, Status};

use super::{
    Ctr, EXIT_SIGKILL, EXIT_SIGTERM, FakeRuntime, START_ERROR_CODE, Sandbox, State, exited_reason,
    labels_match, now_nanos,
};
use crate::cri::api;
use crate::cri::api::runtime_service_server::RuntimeService;

/// What the generated trait's streaming methods answer with (its own alias is private).
type EventStream<T> =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl RuntimeService for FakeRuntime {
    async fn get_container_events(
        &self,
        _request: Request<api::GetEventsRequest>,
    ) -> Result<Response<EventStream<api::ContainerEventResponse>>, Status> {
        self.enter("GetContainerEvents", |_| String::new(), None)
            .await?;
        let mut rx = {
            let mut s = self.lock();
            if !s.events_offered {
                return Err(Status::unimplemented("unknown method GetContainerEvents"));
            }
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            s.event_subscribers.push(tx);
            rx
        };
        // containerd sends its headers with the first event: the answer waits for it.
        let Some(first) = rx.recv().await else {
            return Err(Status::unavailable("the fake runtime stopped"));
        };
        let rest = tokio_stream::wrappers::ReceiverStream::new(rx);
        let all = tokio_stream::StreamExt::map(
            tokio_stream::StreamExt::chain(tokio_stream::iter([first]), rest),
            Ok,
        );
        Ok(Response::new(Box::pin(all)))
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeCri;
    use std::time::Duration;

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
}
