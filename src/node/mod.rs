//! The node's presence in the API: registering the Node object, keeping its status current,
//! and renewing its lease in kube-node-lease (upstream's kubelet_node_status.go and the
//! nodelease controller).
//!
//! [`run`] registers (when `registerNode` is set), then runs the status loop and the lease
//! loop until cancelled. How the status is computed lives in [`build`] as plain functions of
//! fixed inputs, so it can be tested without an API server.

pub mod build;
pub mod gather;
pub mod labels;
pub mod lease;
pub mod register;
pub mod status;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;
use tokio_util::sync::CancellationToken;

use crate::cm::allocatable::AllocatableSettings;
use crate::config::Settings;
use crate::cri::{CriError, RuntimeClient};
use crate::pleg::PlegHealth;

/// The configuration the node loops use, copied out of the kubelet settings.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSettings {
    /// The `kubernetes.io/hostname` label and the Hostname address.
    pub hostname: String,
    /// InternalIP addresses, primary first (at most two: one per family).
    pub node_ips: Vec<String>,
    /// Whether `--node-ip` was given (only then is the IP announced to an external cloud
    /// provider).
    pub node_ip_given: bool,
    pub external_cloud_provider: bool,
    pub node_labels: BTreeMap<String, String>,
    pub register_node: bool,
    pub register_with_taints: Vec<Taint>,
    pub provider_id: String,
    pub enable_controller_attach_detach: bool,
    /// Capacity, reservations and what is left for pods.
    pub allocatable: AllocatableSettings,
    pub port: i32,
    pub status_update_frequency: Duration,
    pub status_report_frequency: Duration,
    pub lease_duration_seconds: i32,
    /// Cap on images in the status; -1 means no cap.
    pub max_images: i32,
    /// The kubelet root directory; its filesystem's size is the ephemeral-storage capacity.
    pub root_dir: PathBuf,
    pub kubelet_version: String,
    /// Bound on every API call made by these loops.
    pub api_timeout: Duration,
}

impl NodeSettings {
    /// `detected_ip` is the address to report when `--node-ip` was not given.
    pub fn from_settings(settings: &Settings, detected_ip: &str) -> Self {
        let flags = &settings.flags;
        let cfg = &settings.config;
        let hostname = settings.node_name();
        let node_ip_given = !flags.node_ip.is_empty();
        let node_ips = if node_ip_given {
            flags.node_ip.iter().map(|ip| ip.to_string()).collect()
        } else if let Ok(ip) = hostname.parse::<std::net::IpAddr>() {
            // Upstream reports a hostname override that is an IP as the node's address.
            vec![ip.to_string()]
        } else {
            vec![detected_ip.to_string()]
        };
        let update = cfg.node_status_update_frequency.as_duration();
        let lease =
            Duration::from_secs(u64::try_from(cfg.node_lease_duration_seconds).unwrap_or(40));
        Self {
            hostname,
            node_ips,
            node_ip_given,
            external_cloud_provider: flags.cloud_provider == "external",
            node_labels: flags.node_labels.clone(),
            register_node: cfg.register_node,
            register_with_taints: cfg.register_with_taints.clone(),
            provider_id: cfg.provider_id.clone(),
            enable_controller_attach_detach: cfg.enable_controller_attach_detach,
            allocatable: AllocatableSettings::from(settings),
            port: cfg.port,
            status_update_frequency: update,
            status_report_frequency: cfg.node_status_report_frequency.as_duration(),
            lease_duration_seconds: cfg.node_lease_duration_seconds,
            max_images: cfg.node_status_max_images,
            root_dir: flags.root_dir.clone(),
            kubelet_version: crate::config::KUBELET_VERSION.to_string(),
            api_timeout: heartbeat_timeout(update, lease),
        }
    }
}

/// Upstream bounds heartbeat requests by the status update period, and never by more than
/// the lease duration, so one slow request cannot outlive the lease it is renewing.
fn heartbeat_timeout(update: Duration, lease: Duration) -> Duration {
    let t = if update.is_zero() {
        lease
    } else {
        update.min(lease)
    };
    t.max(Duration::from_secs(1))
}

/// Everything the node loops need.
#[derive(Clone)]
pub struct NodeContext {
    pub client: kube::Client,
    pub node_name: String,
    pub settings: NodeSettings,
    pub cri: RuntimeClient,
    pub pleg: Arc<PlegHealth>,
    pub events: crate::events::EventRecorder,
    /// True while the node shutdown manager handles a shutdown (the node is then NotReady).
    pub shutting_down: tokio::sync::watch::Receiver<bool>,
    /// The pressure conditions the eviction manager reports.
    pub pressure: tokio::sync::watch::Receiver<crate::eviction::Pressure>,
    /// The node's addresses as the API server last accepted them (upstream's
    /// lastObservedNodeAddresses), for the serving certificate's names.
    pub addresses: Arc<tokio::sync::watch::Sender<Vec<k8s_openapi::api::core::v1::NodeAddress>>>,
    /// Device plugins' resources for capacity and allocatable; None in tests without one.
    pub devices: Option<Arc<crate::cm::devicemanager::DeviceManager>>,
}

impl NodeContext {
    /// A Node event in upstream's "Node <name> status is now: <reason>" form.
    pub fn status_event(&self, kind: crate::events::EventType, reason: &str) {
        let message = format!("Node {} status is now: {reason}", self.node_name);
        self.events
            .node(&self.node_name, None, kind, reason, &message);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cancelled")]
    Cancelled,
    #[error("{what} timed out after {timeout:?}")]
    Timeout {
        what: &'static str,
        timeout: Duration,
    },
    #[error("{what}")]
    Api {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("{what}")]
    Cri {
        what: &'static str,
        #[source]
        source: CriError,
    },
    #[error("{0}")]
    Other(String),
}

impl NodeError {
    fn api_status(&self) -> Option<&kube::core::Status> {
        match self {
            NodeError::Api {
                source: kube::Error::Api(status),
                ..
            } => Some(status),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.api_status().is_some_and(|s| s.is_not_found())
    }

    pub fn is_conflict(&self) -> bool {
        self.api_status().is_some_and(|s| s.is_conflict())
    }

    pub fn is_already_exists(&self) -> bool {
        self.api_status().is_some_and(|s| s.is_already_exists())
    }

    pub fn is_forbidden(&self) -> bool {
        self.api_status().is_some_and(|s| s.is_forbidden())
    }
}

/// One API call, bounded by `timeout` and abandoned on cancellation.
async fn api_call<T>(
    cancel: &CancellationToken,
    timeout: Duration,
    what: &'static str,
    fut: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, NodeError> {
    tokio::select! {
        _ = cancel.cancelled() => Err(NodeError::Cancelled),
        r = tokio::time::timeout(timeout, fut) => match r {
            Err(_) => Err(NodeError::Timeout { what, timeout }),
            Ok(Err(source)) => Err(NodeError::Api { what, source }),
            Ok(Ok(v)) => Ok(v),
        },
    }
}

/// One CRI call (the client bounds it by its own deadline), abandoned on cancellation.
async fn cri_call<T>(
    cancel: &CancellationToken,
    what: &'static str,
    fut: impl Future<Output = Result<T, CriError>>,
) -> Result<T, NodeError> {
    tokio::select! {
        _ = cancel.cancelled() => Err(NodeError::Cancelled),
        r = fut => r.map_err(|source| NodeError::Cri { what, source }),
    }
}

/// Sleeps unless cancelled first; false when cancelled.
async fn sleep_or_cancel(cancel: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// The node's presence in the API server, in `tasks`. Returns the node's addresses as each
/// status update leaves them.
pub fn spawn(
    ctx: NodeContext,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> tokio::sync::watch::Receiver<Vec<k8s_openapi::api::core::v1::NodeAddress>> {
    let observed = ctx.addresses.subscribe();
    tasks.critical("node status and lease", run(ctx, cancel.child_token()));
    observed
}

/// Registers the node (when configured to), then keeps its status and lease current until
/// `cancel` fires.
pub async fn run(ctx: NodeContext, cancel: CancellationToken) {
    ctx.events.node(
        &ctx.node_name,
        None,
        crate::events::EventType::Normal,
        "Starting",
        "Starting kubelet.",
    );
    let mut tracker = gather::RuntimeTracker::default();
    if ctx.settings.register_node
        && register::register(&ctx, &mut tracker, &cancel)
            .await
            .is_err()
    {
        return;
    }
    tokio::join!(
        status::run_status_loop(&ctx, tracker, &cancel),
        lease::run_lease_loop(&ctx, &cancel),
    );
}

/// Defaults as a kubelet with no flags would have them, for node "node-a" at 10.0.0.5.
#[cfg(test)]
pub(crate) fn test_settings() -> NodeSettings {
    NodeSettings {
        hostname: "node-a".into(),
        node_ips: vec!["10.0.0.5".into()],
        node_ip_given: false,
        external_cloud_provider: false,
        node_labels: BTreeMap::new(),
        register_node: true,
        register_with_taints: Vec::new(),
        provider_id: String::new(),
        enable_controller_attach_detach: true,
        allocatable: AllocatableSettings {
            max_pods: 110,
            local_storage_capacity_isolation: true,
            enforce_node_allocatable: vec!["pods".into()],
            ..Default::default()
        },
        port: 10250,
        status_update_frequency: Duration::from_secs(10),
        status_report_frequency: Duration::from_secs(300),
        lease_duration_seconds: 40,
        max_images: 50,
        root_dir: PathBuf::from("/var/lib/kubelet"),
        kubelet_version: crate::config::KUBELET_VERSION.to_string(),
        api_timeout: Duration::from_secs(10),
    }
}

#[cfg(test)]
mod tests;
