//! The kubelet's CRI client: one typed method per RPC the kubelet uses, each
//! bounded by a deadline and traced.

use std::future::Future;
use std::time::{Duration, Instant};

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tracing::Instrument;
use tracing::field::Empty;

use crate::grpc_uds::DialError;
use crate::telemetry::trace::{TARGET, propagate};

use super::api;
use super::api::image_service_client::ImageServiceClient;
use super::api::runtime_service_client::RuntimeServiceClient;
use super::{CriError, parse_endpoint};

/// Largest gRPC message accepted or sent, matching the upstream kubelet
/// (big ListContainers / ExecSync answers exceed tonic's 4 MiB default).
pub const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// Sends the caller's trace context with every request, so the runtime's spans join the
/// kubelet's trace (nothing is added while tracing is off).
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceContext;

impl tonic::service::Interceptor for TraceContext {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        propagate::inject_current(req.metadata_mut());
        Ok(req)
    }
}

type Traced = InterceptedService<Channel, TraceContext>;

/// Client for the runtime's RuntimeService and ImageService. Cheap to clone;
/// clones share the underlying connections.
#[derive(Clone)]
pub struct RuntimeClient {
    runtime: RuntimeServiceClient<Traced>,
    image: ImageServiceClient<Traced>,
    timeout: Duration,
}

impl std::fmt::Debug for RuntimeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeClient")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Opens a gRPC channel to a unix socket, waiting at most `timeout` for the
/// connection (socket connect plus HTTP/2 handshake).
pub async fn connect_channel(endpoint: &str, timeout: Duration) -> Result<Channel, CriError> {
    let path = parse_endpoint(endpoint)?;
    crate::grpc_uds::dial(&path, timeout)
        .await
        .map_err(|e| match e {
            DialError::Connect(source) => CriError::Connect {
                endpoint: endpoint.to_string(),
                source,
            },
            DialError::Timeout(after) => CriError::Timeout {
                op: "Connect",
                after,
            },
        })
}

/// The ImageService's methods; every other op belongs to the RuntimeService.
const IMAGE_OPS: &[&str] = &[
    "ListImages",
    "ImageStatus",
    "PullImage",
    "RemoveImage",
    "ImageFsInfo",
];

fn service_of(op: &str) -> &'static str {
    if IMAGE_OPS.contains(&op) {
        "runtime.v1.ImageService"
    } else {
        "runtime.v1.RuntimeService"
    }
}

/// Runs one unary call under `deadline`, inside a client span named like upstream's gRPC
/// instrumentation names it (`runtime.v1.RuntimeService/RunPodSandbox`).
///
/// The deadline is enforced here rather than with a `grpc-timeout` header so
/// that expiry always surfaces as [`CriError::Timeout`]; dropping the call
/// future resets the HTTP/2 stream, which cancels the work on the runtime side.
async fn call<T, F>(op: &'static str, deadline: Duration, fut: F) -> Result<T, CriError>
where
    F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let service = service_of(op);
    let span = tracing::info_span!(
        target: TARGET,
        "cri",
        otel.name = %format_args!("{service}/{op}"),
        otel.kind = "client",
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = op,
        rpc.grpc.status_code = Empty,
    );
    let traced = span.clone();
    async move {
        let started = Instant::now();
        let result = match tokio::time::timeout(deadline, fut).await {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(CriError::Status { op, status }),
            Err(_) => Err(CriError::Timeout {
                op,
                after: deadline,
            }),
        };
        let elapsed = started.elapsed();
        super::metrics::record_runtime_operation(op, elapsed, result.is_err());
        let code = match &result {
            Ok(_) => tonic::Code::Ok,
            Err(CriError::Status { status, .. }) => status.code(),
            Err(_) => tonic::Code::DeadlineExceeded,
        };
        traced.record("rpc.grpc.status_code", code as i64);
        match &result {
            Ok(_) => tracing::debug!(op, ?elapsed, "CRI call succeeded"),
            Err(err) => {
                crate::telemetry::trace::record_error(&traced, err);
                tracing::debug!(op, ?elapsed, error = %err, "CRI call failed");
            }
        }
        result
    }
    .instrument(span)
    .await
}

fn invalid(op: &'static str, reason: impl Into<String>) -> CriError {
    CriError::InvalidResponse {
        op,
        reason: reason.into(),
    }
}

/// Whole seconds for a CRI `timeout` field; a sub-second remainder rounds up
/// so that a short non-zero timeout never turns into 0 ("no timeout").
fn whole_secs(d: Duration) -> i64 {
    let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// A streaming call's answer is useless without a URL; the CRI requires one.
fn streaming_url(op: &'static str, url: String) -> Result<String, CriError> {
    if url.is_empty() {
        return Err(invalid(op, "URL is not set"));
    }
    Ok(url)
}

fn image_spec(image: &str) -> Option<api::ImageSpec> {
    Some(api::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

impl RuntimeClient {
    /// Connects to the runtime (and image) service. Endpoints look like
    /// `unix:///run/containerd/containerd.sock` or are a bare socket path; an
    /// empty `image_endpoint` means the runtime endpoint serves images too.
    /// `timeout` bounds connecting and, later, every ordinary call.
    pub async fn connect(
        runtime_endpoint: &str,
        image_endpoint: &str,
        timeout: Duration,
    ) -> Result<Self, CriError> {
        let runtime_channel = connect_channel(runtime_endpoint, timeout).await?;
        let image_endpoint = image_endpoint.trim();
        let image_channel =
            if image_endpoint.is_empty() || image_endpoint == runtime_endpoint.trim() {
                runtime_channel.clone()
            } else {
                connect_channel(image_endpoint, timeout).await?
            };
        tracing::info!(
            runtime_endpoint,
            image_endpoint,
            ?timeout,
            "connected to CRI runtime"
        );
        Ok(Self::from_channels(runtime_channel, image_channel, timeout))
    }

    /// A client whose runtime is never there, for handler tests that must fail (or answer)
    /// before reaching the runtime.
    #[cfg(test)]
    pub fn unreachable() -> Self {
        let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:1").connect_lazy();
        Self::from_channels(channel.clone(), channel, Duration::from_secs(1))
    }

    /// Builds a client on already established channels (tests, custom
    /// transports).
    pub fn from_channels(runtime: Channel, image: Channel, timeout: Duration) -> Self {
        Self {
            runtime: RuntimeServiceClient::with_interceptor(runtime, TraceContext)
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
            image: ImageServiceClient::with_interceptor(image, TraceContext)
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
            timeout,
        }
    }

    /// The per-call deadline (the kubelet's runtimeRequestTimeout).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub async fn version(&self) -> Result<api::VersionResponse, CriError> {
        let mut c = self.runtime.clone();
        // The kubelet announces the API version it speaks.
        let req = api::VersionRequest {
            version: "v1".to_string(),
        };
        call("Version", self.timeout, c.version(req)).await
    }

    /// The runtime's own settings the kubelet must follow (its cgroup driver). Unimplemented by
    /// runtimes older than the call (containerd 1.6, CRI-O before 1.28).
    pub async fn runtime_config(&self) -> Result<api::RuntimeConfigResponse, CriError> {
        let mut c = self.runtime.clone();
        call(
            "RuntimeConfig",
            self.timeout,
            c.runtime_config(api::RuntimeConfigRequest {}),
        )
        .await
    }

    pub async fn status(&self, verbose: bool) -> Result<api::StatusResponse, CriError> {
        const OP: &str = "Status";
        let mut c = self.runtime.clone();
        let resp = call(OP, self.timeout, c.status(api::StatusRequest { verbose })).await?;
        if resp.status.is_none() {
            return Err(invalid(OP, "runtime status is missing"));
        }
        Ok(resp)
    }

    /// Returns the new sandbox's id.
    pub async fn run_pod_sandbox(
        &self,
        config: api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String, CriError> {
        const OP: &str = "RunPodSandbox";
        let mut c = self.runtime.clone();
        let req = api::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.to_string(),
        };
        let resp = call(OP, self.timeout, c.run_pod_sandbox(req)).await?;
        if resp.pod_sandbox_id.is_empty() {
            return Err(invalid(OP, "empty pod sandbox id"));
        }
        Ok(resp.pod_sandbox_id)
    }

    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let req = api::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        call("StopPodSandbox", self.timeout, c.stop_pod_sandbox(req)).await?;
        Ok(())
    }

    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let req = api::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        call("RemovePodSandbox", self.timeout, c.remove_pod_sandbox(req)).await?;
        Ok(())
    }

    pub async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus, CriError> {
        const OP: &str = "PodSandboxStatus";
        let mut c = self.runtime.clone();
        let req = api::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: false,
        };
        let resp = call(OP, self.timeout, c.pod_sandbox_status(req)).await?;
        let status = resp
            .status
            .ok_or_else(|| invalid(OP, "sandbox status is missing"))?;
        if status.id.is_empty() {
            return Err(invalid(OP, "sandbox id is not set"));
        }
        if status.metadata.is_none() {
            return Err(invalid(OP, "sandbox metadata is not set"));
        }
        Ok(status)
    }

    pub async fn list_pod_sandbox(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>, CriError> {
        let mut c = self.runtime.clone();
        let req = api::ListPodSandboxRequest { filter };
        Ok(
            call("ListPodSandbox", self.timeout, c.list_pod_sandbox(req))
                .await?
                .items,
        )
    }

    /// Returns the new container's id.
    pub async fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError> {
        const OP: &str = "CreateContainer";
        let mut c = self.runtime.clone();
        let req = api::CreateContainerRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let resp = call(OP, self.timeout, c.create_container(req)).await?;
        if resp.container_id.is_empty() {
            return Err(invalid(OP, "empty container id"));
        }
        Ok(resp.container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let req = api::StartContainerRequest {
            container_id: id.to_string(),
        };
        call("StartContainer", self.timeout, c.start_container(req)).await?;
        Ok(())
    }

    /// `grace_secs` is passed to the runtime; the call's own deadline is the
    /// grace period plus the client timeout, so the runtime has time to kill.
    pub async fn stop_container(&self, id: &str, grace_secs: i64) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let grace = Duration::from_secs(u64::try_from(grace_secs).unwrap_or(0));
        let req = api::StopContainerRequest {
            container_id: id.to_string(),
            timeout: grace_secs,
        };
        call(
            "StopContainer",
            self.timeout.saturating_add(grace),
            c.stop_container(req),
        )
        .await?;
        Ok(())
    }

    pub async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let req = api::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        call("RemoveContainer", self.timeout, c.remove_container(req)).await?;
        Ok(())
    }

    pub async fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>, CriError> {
        let mut c = self.runtime.clone();
        let req = api::ListContainersRequest { filter };
        Ok(call("ListContainers", self.timeout, c.list_containers(req))
            .await?
            .containers)
    }

    /// Subscribes to the runtime's container events (containerd 1.7+, CRI-O 1.26+; older
    /// runtimes answer Unimplemented at once). No deadline: containerd answers a subscription
    /// only with its first event, so an idle node's call stays open; the caller bounds its
    /// wait and cancels by dropping the future (pleg::events).
    pub async fn get_container_events(
        &self,
    ) -> Result<tonic::Streaming<api::ContainerEventResponse>, CriError> {
        let mut c = self.runtime.clone();
        c.get_container_events(api::GetEventsRequest {})
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| CriError::Status {
                op: "GetContainerEvents",
                status,
            })
    }

    pub async fn container_status(&self, id: &str) -> Result<api::ContainerStatus, CriError> {
        const OP: &str = "ContainerStatus";
        let mut c = self.runtime.clone();
        let req = api::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        let resp = call(OP, self.timeout, c.container_status(req)).await?;
        let status = resp
            .status
            .ok_or_else(|| invalid(OP, "container status is missing"))?;
        if status.id.is_empty() {
            return Err(invalid(OP, "container id is not set"));
        }
        if status.metadata.is_none() {
            return Err(invalid(OP, "container metadata is not set"));
        }
        Ok(status)
    }

    /// Asks the runtime to open the container's log path anew (after the kubelet renamed the
    /// file away for rotation); the runtime refuses for a container that is not running.
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let req = api::ReopenContainerLogRequest {
            container_id: id.to_string(),
        };
        call(
            "ReopenContainerLog",
            self.timeout,
            c.reopen_container_log(req),
        )
        .await?;
        Ok(())
    }

    /// Changes a running container's cgroup settings in place (in-place pod resize).
    pub async fn update_container_resources(
        &self,
        id: &str,
        linux: api::LinuxContainerResources,
    ) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let req = api::UpdateContainerResourcesRequest {
            container_id: id.to_string(),
            linux: Some(linux),
            ..Default::default()
        };
        call(
            "UpdateContainerResources",
            self.timeout,
            c.update_container_resources(req),
        )
        .await?;
        Ok(())
    }

    /// Runs `cmd` in the container. `timeout` goes to the runtime (rounded up
    /// to whole seconds); the call's deadline is `timeout` plus the client
    /// timeout. A zero `timeout` asks the runtime for no limit, but the call is
    /// still bounded by the client timeout.
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<api::ExecSyncResponse, CriError> {
        let mut c = self.runtime.clone();
        let req = api::ExecSyncRequest {
            container_id: id.to_string(),
            cmd,
            timeout: whole_secs(timeout),
        };
        call(
            "ExecSync",
            self.timeout.saturating_add(timeout),
            c.exec_sync(req),
        )
        .await
    }

    /// Asks the runtime to prepare a streaming exec and returns the URL its
    /// streaming server will serve it on. The call only registers the request;
    /// the command starts when a client connects to the URL.
    pub async fn exec(&self, req: api::ExecRequest) -> Result<String, CriError> {
        const OP: &str = "Exec";
        let mut c = self.runtime.clone();
        let resp = call(OP, self.timeout, c.exec(req)).await?;
        streaming_url(OP, resp.url)
    }

    /// Like [`Self::exec`], for attaching to the container's main process.
    pub async fn attach(&self, req: api::AttachRequest) -> Result<String, CriError> {
        const OP: &str = "Attach";
        let mut c = self.runtime.clone();
        let resp = call(OP, self.timeout, c.attach(req)).await?;
        streaming_url(OP, resp.url)
    }

    /// Like [`Self::exec`], for forwarding `ports` into the sandbox's network
    /// namespace. An empty `ports` lets the client name ports per stream (SPDY).
    pub async fn port_forward(
        &self,
        pod_sandbox_id: &str,
        ports: Vec<i32>,
    ) -> Result<String, CriError> {
        const OP: &str = "PortForward";
        let mut c = self.runtime.clone();
        let req = api::PortForwardRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            port: ports,
        };
        let resp = call(OP, self.timeout, c.port_forward(req)).await?;
        streaming_url(OP, resp.url)
    }

    pub async fn list_container_stats(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> Result<Vec<api::ContainerStats>, CriError> {
        let mut c = self.runtime.clone();
        let req = api::ListContainerStatsRequest { filter };
        Ok(call(
            "ListContainerStats",
            self.timeout,
            c.list_container_stats(req),
        )
        .await?
        .stats)
    }

    /// Unimplemented by runtimes that predate it; callers fall back to cgroups.
    pub async fn list_pod_sandbox_stats(
        &self,
        filter: Option<api::PodSandboxStatsFilter>,
    ) -> Result<Vec<api::PodSandboxStats>, CriError> {
        let mut c = self.runtime.clone();
        let req = api::ListPodSandboxStatsRequest { filter };
        Ok(call(
            "ListPodSandboxStats",
            self.timeout,
            c.list_pod_sandbox_stats(req),
        )
        .await?
        .stats)
    }

    /// The runtime's verbose sandbox information (containerd: `info` holds JSON with the
    /// sandbox's pid and runtime spec).
    pub async fn pod_sandbox_info(
        &self,
        id: &str,
    ) -> Result<std::collections::HashMap<String, String>, CriError> {
        let mut c = self.runtime.clone();
        let req = api::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        };
        Ok(
            call("PodSandboxStatus", self.timeout, c.pod_sandbox_status(req))
                .await?
                .info,
        )
    }

    pub async fn list_images(&self) -> Result<Vec<api::Image>, CriError> {
        let mut c = self.image.clone();
        let req = api::ListImagesRequest { filter: None };
        Ok(call("ListImages", self.timeout, c.list_images(req))
            .await?
            .images)
    }

    /// `None` when the runtime does not have the image.
    pub async fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        const OP: &str = "ImageStatus";
        let mut c = self.image.clone();
        let req = api::ImageStatusRequest {
            image: image_spec(image),
            verbose: false,
        };
        let resp = call(OP, self.timeout, c.image_status(req)).await?;
        match resp.image {
            Some(img) if img.id.is_empty() => {
                Err(invalid(OP, format!("id of image {image:?} is not set")))
            }
            other => Ok(other),
        }
    }

    /// Pulls `image` and returns the runtime's reference to it. Pulls have
    /// their own `deadline` because large images legitimately take minutes.
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        sandbox_config: Option<api::PodSandboxConfig>,
        deadline: Duration,
    ) -> Result<String, CriError> {
        const OP: &str = "PullImage";
        let mut c = self.image.clone();
        let req = api::PullImageRequest {
            image: image_spec(image),
            auth,
            sandbox_config,
        };
        let resp = call(OP, deadline, c.pull_image(req)).await?;
        if resp.image_ref.is_empty() {
            return Err(invalid(OP, format!("image ref of {image:?} is not set")));
        }
        Ok(resp.image_ref)
    }

    pub async fn remove_image(&self, image: &str) -> Result<(), CriError> {
        let mut c = self.image.clone();
        let req = api::RemoveImageRequest {
            image: image_spec(image),
        };
        call("RemoveImage", self.timeout, c.remove_image(req)).await?;
        Ok(())
    }

    pub async fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse, CriError> {
        let mut c = self.image.clone();
        call(
            "ImageFsInfo",
            self.timeout,
            c.image_fs_info(api::ImageFsInfoRequest {}),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_secs_rounds_up_fractions() {
        assert_eq!(whole_secs(Duration::ZERO), 0);
        assert_eq!(whole_secs(Duration::from_millis(1)), 1);
        assert_eq!(whole_secs(Duration::from_secs(5)), 5);
        assert_eq!(whole_secs(Duration::from_millis(5_500)), 6);
        assert_eq!(whole_secs(Duration::MAX), i64::MAX);
    }
}
