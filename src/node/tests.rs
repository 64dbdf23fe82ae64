//! The node's settings from the command line, and the loops against the in-memory fake CRI:
//! what `gather` collects, that `run` stops when cancelled even with no API server, and
//! (ignored, needs a control plane) a real registration of node "h-node-test".

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::DeleteParams;
use tokio_util::sync::CancellationToken;

use super::gather::{RuntimeTracker, gather};
use super::{NodeContext, NodeSettings, heartbeat_timeout, run, test_settings};
use crate::config::Settings;
use crate::cri::fake::FakeCri;
use crate::pleg::PlegHealth;

fn tmp() -> tempfile::TempDir {
    match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    }
}

/// A client for a loopback port nothing listens on.
fn dead_client() -> kube::Client {
    let port = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(a) => a.port(),
        Err(e) => panic!("bind: {e}"),
    };
    let url = match format!("http://127.0.0.1:{port}").parse() {
        Ok(u) => u,
        Err(e) => panic!("url: {e}"),
    };
    match kube::Client::try_from(kube::Config::new(url)) {
        Ok(c) => c,
        Err(e) => panic!("client: {e}"),
    }
}

fn context(client: kube::Client, cri: &FakeCri, settings: NodeSettings) -> NodeContext {
    NodeContext {
        devices: None,
        client,
        node_name: settings.hostname.clone(),
        settings,
        cri: cri.client.clone(),
        pleg: Arc::new(PlegHealth::default()),
        events: Default::default(),
        shutting_down: tokio::sync::watch::channel(false).1,
        pressure: tokio::sync::watch::channel(Default::default()).1,
        addresses: Arc::new(tokio::sync::watch::channel(Vec::new()).0),
    }
}

#[tokio::test]
async fn gather_reads_machine_and_runtime() {
    let fake = FakeCri::start(Duration::from_secs(5)).await;
    fake.runtime.add_image("registry.k8s.io/pause:3.10");
    let root = tmp();
    let mut settings = test_settings();
    settings.root_dir = root.path().to_path_buf();
    let ctx = context(dead_client(), &fake, settings);
    let mut tracker = RuntimeTracker::default();
    let inputs = match gather(&ctx, &mut tracker, &CancellationToken::new()).await {
        Ok(i) => i,
        Err(e) => panic!("gather: {e}"),
    };
    assert_eq!(inputs.container_runtime_version, "fake://0.1.0");
    assert_eq!(inputs.images.len(), 1);
    assert!(
        inputs.images[0]
            .names
            .iter()
            .flatten()
            .any(|n| n.contains("pause")),
        "{:?}",
        inputs.images
    );
    assert_eq!(
        inputs.ready_errors,
        vec!["PLEG is not healthy: pleg has yet to be successful".to_string()],
        "the fake runtime is ready; only the never-run PLEG is not"
    );
    assert_eq!(inputs.runtime_handlers, Some(Vec::new()));
    assert!(inputs.machine.memory_bytes.is_some());
    assert!(inputs.machine.root_fs_bytes.is_some());

    // A runtime that stops answering keeps its last version name and image list.
    fake.runtime
        .fail_next("Version", tonic::Status::unavailable("down"));
    fake.runtime
        .fail_next("ListImages", tonic::Status::unavailable("down"));
    let inputs = match gather(&ctx, &mut tracker, &CancellationToken::new()).await {
        Ok(i) => i,
        Err(e) => panic!("gather: {e}"),
    };
    assert_eq!(inputs.container_runtime_version, "fake://Unknown");
    assert_eq!(inputs.images.len(), 1);
}

#[tokio::test]
async fn run_stops_on_cancel_without_an_api_server() {
    let fake = FakeCri::start(Duration::from_secs(5)).await;
    let root = tmp();
    let mut settings = test_settings();
    settings.root_dir = root.path().to_path_buf();
    settings.api_timeout = Duration::from_secs(2);
    let ctx = context(dead_client(), &fake, settings);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(run(ctx, cancel.clone()));
    // Let registration fail a few times.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!task.is_finished(), "registration keeps retrying");
    let asked = Instant::now();
    cancel.cancel();
    match tokio::time::timeout(Duration::from_secs(2), task).await {
        Ok(Ok(())) => {}
        other => panic!("run did not stop: {other:?}"),
    }
    assert!(asked.elapsed() < Duration::from_secs(2));
    assert!(
        fake.runtime.count("Status") >= 2,
        "each attempt gathers a fresh status"
    );
}

const LIVE_NODE: &str = "h-node-test";

async fn poll<T, F, Fut>(what: &str, within: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn ready_of(node: &Node) -> Option<(String, String, String)> {
    let c = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((
        c.status.clone(),
        c.last_transition_time.as_ref()?.0.to_string(),
        c.last_heartbeat_time.as_ref()?.0.to_string(),
    ))
}

async fn cleanup(nodes: &Api<Node>, leases: &Api<Lease>) {
    let _ = nodes.delete(LIVE_NODE, &DeleteParams::default()).await;
    let _ = leases.delete(LIVE_NODE, &DeleteParams::default()).await;
}

/// Registers "h-node-test" against the control plane in $KUBECONFIG (loopback only), checks
/// the Node, its status and lease, deletes the Node to see it registered again, and cleans
/// up. Run with `KUBECONFIG=... cargo test --lib node::tests::live -- --ignored`.
#[tokio::test]
#[ignore = "needs a control plane (hack/cluster/up.sh) and KUBECONFIG"]
async fn live_registration_status_and_lease() {
    let Some(path) = std::env::var_os("KUBECONFIG") else {
        panic!("set KUBECONFIG to an admin kubeconfig");
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = match crate::apiclient::connect(
        std::path::Path::new(&path),
        Duration::from_secs(5),
    )
    .await
    {
        Ok(c) => c,
        Err(e) => panic!("connect: {e}"),
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), super::lease::LEASE_NAMESPACE);
    cleanup(&nodes, &leases).await;

    let fake = FakeCri::start(Duration::from_secs(5)).await;
    fake.runtime.add_image("registry.k8s.io/pause:3.10");
    let root = tmp();
    let mut settings = test_settings();
    settings.hostname = LIVE_NODE.into();
    settings.node_ips = vec!["127.0.0.1".into()];
    settings.root_dir = root.path().to_path_buf();
    settings.node_labels = [("kubelet-rs/test".to_string(), "h-node".to_string())].into();
    settings.status_update_frequency = Duration::from_secs(1);
    settings.status_report_frequency = Duration::from_secs(4);
    settings.lease_duration_seconds = 4;
    settings.api_timeout = Duration::from_secs(5);
    let mut ctx = context(client, &fake, settings);

    // A PLEG relisting the fake runtime keeps the node healthy.
    let health = Arc::new(PlegHealth::default());
    ctx.pleg = health.clone();
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let (pleg, _pods) =
        crate::pleg::Pleg::new(fake.client.clone(), Duration::from_millis(500), tx, health);
    let cancel = CancellationToken::new();
    let pleg_task = tokio::spawn(pleg.run(cancel.clone()));
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let task = tokio::spawn(run(ctx, cancel.clone()));

    let node = poll("a Ready node", Duration::from_secs(20), || async {
        let n = nodes.get_opt(LIVE_NODE).await.ok().flatten()?;
        (ready_of(&n)?.0 == "True").then_some(n)
    })
    .await;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["kubernetes.io/hostname"], LIVE_NODE);
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["kubelet-rs/test"], "h-node");
    let status = node.status.clone().unwrap_or_default();
    let info = status.node_info.clone().unwrap_or_default();
    assert_eq!(info.container_runtime_version, "fake://0.1.0");
    assert_eq!(info.kubelet_version, crate::config::KUBELET_VERSION);
    assert!(
        status
            .capacity
            .as_ref()
            .is_some_and(|c| c.contains_key("ephemeral-storage"))
    );
    assert_eq!(status.images.as_ref().map(Vec::len), Some(1));
    let uid = node.metadata.uid.clone().unwrap_or_default();

    let lease = poll(
        "a lease owned by the node",
        Duration::from_secs(10),
        || async {
            let l = leases.get_opt(LIVE_NODE).await.ok().flatten()?;
            let owned = l
                .metadata
                .owner_references
                .as_ref()?
                .iter()
                .any(|o| o.kind == "Node" && o.uid == uid);
            owned.then_some(l)
        },
    )
    .await;
    let spec = lease.spec.clone().unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some(LIVE_NODE));
    assert_eq!(spec.lease_duration_seconds, Some(4));
    let first_renew = spec.renew_time.clone();
    poll("a renewed lease", Duration::from_secs(5), || async {
        let l = leases.get_opt(LIVE_NODE).await.ok().flatten()?;
        (l.spec?.renew_time != first_renew).then_some(())
    })
    .await;

    // With nothing changing, heartbeats move on the report period and the transition stays.
    let (_, transition, beat) = ready_of(&node).unwrap_or_default();
    poll("a heartbeat", Duration::from_secs(10), || async {
        let n = nodes.get_opt(LIVE_NODE).await.ok().flatten()?;
        let (_, t, b) = ready_of(&n)?;
        assert_eq!(t, transition, "transition time kept");
        (b != beat).then_some(())
    })
    .await;

    // A deleted Node is registered again.
    if let Err(e) = nodes.delete(LIVE_NODE, &DeleteParams::default()).await {
        panic!("delete node: {e}");
    }
    poll(
        "the node registered again",
        Duration::from_secs(20),
        || async {
            let n = nodes.get_opt(LIVE_NODE).await.ok().flatten()?;
            (n.metadata.uid.as_deref() != Some(uid.as_str())).then_some(())
        },
    )
    .await;

    cancel.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), task).await;
    let _ = pleg_task.await;
    drain.abort();
    cleanup(&nodes, &leases).await;
    assert!(matches!(stopped, Ok(Ok(()))), "run stops on cancel");
}

fn parse(args: &[&str]) -> Settings {
    let mut v = vec!["kubelet".to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    match crate::cli::parse(v) {
        Ok(s) => s,
        Err(e) => panic!("parse: {e}"),
    }
}

#[test]
fn settings_copy_the_config() {
    let s = parse(&[
        "--hostname-override=Node-A",
        "--node-labels=team=x",
        "--max-pods=42",
        "--cloud-provider=external",
    ]);
    let n = NodeSettings::from_settings(&s, "10.1.2.3");
    assert_eq!(n.hostname, "node-a");
    assert_eq!(n.node_ips, vec!["10.1.2.3".to_string()]);
    assert!(!n.node_ip_given);
    assert!(n.external_cloud_provider);
    assert_eq!(n.node_labels.get("team").map(String::as_str), Some("x"));
    assert_eq!(n.allocatable.max_pods, 42);
    assert_eq!(n.status_update_frequency, Duration::from_secs(10));
    assert_eq!(n.status_report_frequency, Duration::from_secs(300));
    assert_eq!(n.lease_duration_seconds, 40);
    assert_eq!(n.api_timeout, Duration::from_secs(10));
    assert_eq!(n.kubelet_version, crate::config::KUBELET_VERSION);
}

#[test]
fn node_ip_flag_and_ip_hostnames_win_over_detection() {
    let s = parse(&["--hostname-override=n", "--node-ip=192.168.0.9"]);
    let n = NodeSettings::from_settings(&s, "10.1.2.3");
    assert_eq!(n.node_ips, vec!["192.168.0.9".to_string()]);
    assert!(n.node_ip_given);
    let s = parse(&["--hostname-override=172.16.0.4"]);
    let n = NodeSettings::from_settings(&s, "10.1.2.3");
    assert_eq!(n.node_ips, vec!["172.16.0.4".to_string()]);
}

#[test]
fn heartbeat_timeout_is_bounded_by_the_lease() {
    let s = Duration::from_secs;
    assert_eq!(heartbeat_timeout(s(10), s(40)), s(10));
    assert_eq!(heartbeat_timeout(s(60), s(40)), s(40));
    assert_eq!(heartbeat_timeout(Duration::ZERO, s(40)), s(40));
}
