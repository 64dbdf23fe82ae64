//! One registered plugin as the kubelet reaches it: the channel to its socket, the options it
//! gave, and the calls the kubelet makes, each with its own deadline.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::api;
use super::api::device_plugin_client::DevicePluginClient;

/// Dialling a plugin and asking its options (upstream dials for at most 10 s).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// GetPreferredAllocation and Allocate: a plugin that hangs fails the one container, not the
/// pod's worker forever (upstream waits without a bound). Short in unit tests, which wait for
/// it with real sockets.
pub const ALLOCATE_TIMEOUT: Duration = if cfg!(test) {
    Duration::from_secs(1)
} else {
    Duration::from_secs(30)
};
/// Upstream's KubeletPreStartContainerRPCTimeoutInSecs.
pub const PRE_START_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("failed to dial device plugin: {0}")]
    Dial(#[from] crate::grpc_uds::DialError),
    #[error("{call} of device plugin {resource}: {status}")]
    Call {
        call: &'static str,
        resource: String,
        status: Box<tonic::Status>,
    },
    #[error("{call} of device plugin {resource} timed out after {timeout:?}")]
    Timeout {
        call: &'static str,
        resource: String,
        timeout: Duration,
    },
    #[error("device plugin {resource} answered Allocate for {got} containers, not 1")]
    Answers { resource: String, got: usize },
}

#[derive(Clone, Debug)]
pub struct Endpoint {
    pub resource: String,
    pub socket: PathBuf,
    pub options: api::DevicePluginOptions,
    client: DevicePluginClient<Channel>,
    /// Ends this endpoint's ListAndWatch when another registration replaces it.
    pub stop: CancellationToken,
}

async fn bounded<T>(
    call: &'static str,
    resource: &str,
    timeout: Duration,
    fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, EndpointError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(status)) => Err(EndpointError::Call {
            call,
            resource: resource.to_string(),
            status: Box::new(status),
        }),
        Err(_) => Err(EndpointError::Timeout {
            call,
            resource: resource.to_string(),
            timeout,
        }),
    }
}

impl Endpoint {
    /// Dials the plugin on `socket` and asks its options, as upstream does once it registers.
    pub async fn connect(
        resource: &str,
        socket: &Path,
        stop: CancellationToken,
    ) -> Result<Self, EndpointError> {
        let channel = crate::grpc_uds::dial(socket, CONNECT_TIMEOUT).await?;
        let mut client = DevicePluginClient::new(channel);
        let options = bounded(
            "GetDevicePluginOptions",
            resource,
            CONNECT_TIMEOUT,
            client.get_device_plugin_options(api::Empty {}),
        )
        .await?;
        Ok(Endpoint {
            resource: resource.to_string(),
            socket: socket.to_path_buf(),
            options,
            client,
            stop,
        })
    }

    pub async fn list_and_watch(
        &self,
    ) -> Result<tonic::Streaming<api::ListAndWatchResponse>, EndpointError> {
        bounded(
            "ListAndWatch",
            &self.resource,
            CONNECT_TIMEOUT,
            self.client.clone().list_and_watch(api::Empty {}),
        )
        .await
    }

    /// The plugin's choice of `size` devices among `available`, keeping `must_include`.
    pub async fn preferred(
        &self,
        available: Vec<String>,
        must_include: Vec<String>,
        size: usize,
    ) -> Result<Vec<String>, EndpointError> {
        let req = api::PreferredAllocationRequest {
            container_requests: vec![api::ContainerPreferredAllocationRequest {
                available_device_i_ds: available,
                must_include_device_i_ds: must_include,
                allocation_size: i32::try_from(size).unwrap_or(i32::MAX),
            }],
        };
        let resp = bounded(
            "GetPreferredAllocation",
            &self.resource,
            ALLOCATE_TIMEOUT,
            self.client.clone().get_preferred_allocation(req),
        )
        .await?;
        Ok(resp
            .container_responses
            .into_iter()
            .next()
            .map(|r| r.device_i_ds)
            .unwrap_or_default())
    }

    pub async fn allocate(
        &self,
        ids: Vec<String>,
    ) -> Result<api::ContainerAllocateResponse, EndpointError> {
        let req = api::AllocateRequest {
            container_requests: vec![api::ContainerAllocateRequest { devices_ids: ids }],
        };
        let resp = bounded(
            "Allocate",
            &self.resource,
            ALLOCATE_TIMEOUT,
            self.client.clone().allocate(req),
        )
        .await?;
        let got = resp.container_responses.len();
        let mut answers = resp.container_responses.into_iter();
        match (answers.next(), got) {
            (Some(one), 1) => Ok(one),
            _ => Err(EndpointError::Answers {
                resource: self.resource.clone(),
                got,
            }),
        }
    }

    pub async fn pre_start(&self, ids: Vec<String>) -> Result<(), EndpointError> {
        let req = api::PreStartContainerRequest { devices_ids: ids };
        bounded(
            "PreStartContainer",
            &self.resource,
            PRE_START_TIMEOUT,
            self.client.clone().pre_start_container(req),
        )
        .await
        .map(|_| ())
    }
}
