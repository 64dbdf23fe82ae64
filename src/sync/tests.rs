//! The sync loop, its pod workers and the PLEG together, against the in-memory CRI fake.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::{SyncLoop, SyncLoopHealth, SyncLoopInputs};
use crate::cri::api;
use crate::pleg::{Pleg, PlegHealth};
use crate::runtime::labels;
use crate::runtime::testing::{APP_IMAGE, Harness, pod};
use crate::sources::PodUpdate;
use crate::status::StatusStore;

const PLEG_PERIOD: Duration = Duration::from_millis(100);

/// A running sync loop and PLEG over a harness; both stop when this is dropped.
struct Node {
    h: Harness,
    status: Arc<StatusStore>,
    updates: mpsc::Sender<PodUpdate>,
    sources_ready: watch::Sender<bool>,
    evictions: mpsc::Sender<crate::eviction::Eviction>,
    cancel: CancellationToken,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Node {
    /// Starts the PLEG, waits until its first relist has seen `known_uid` (when given, so the
    /// sync loop's first housekeeping already knows the runtime's pods), then the sync loop.
    async fn start(h: Harness, sources_ready: bool, known_uid: Option<&str>) -> Node {
        Node::start_admitting(h, sources_ready, known_uid, None).await
    }

    /// [`Node::start`], with API-pod admission.
    async fn start_admitting(
        h: Harness,
        sources_ready: bool,
        known_uid: Option<&str>,
        admission: Option<super::Admission>,
    ) -> Node {
        let cancel = CancellationToken::new();
        let (pleg_tx, pleg_rx) = mpsc::channel(100);
        let (pleg, mut runtime_pods) = Pleg::new(
            h.cri.client.clone(),
            PLEG_PERIOD,
            pleg_tx,
            Arc::new(PlegHealth::default()),
        );
        tokio::spawn(pleg.run(cancel.child_token()));
        if let Some(uid) = known_uid {
            let seen = tokio::time::timeout(
                Duration::from_secs(3),
                runtime_pods.wait_for(|pods| pods.contains_key(uid)),
            )
            .await;
            assert!(matches!(seen, Ok(Ok(_))), "PLEG never saw pod {uid}");
        }
        let status = Arc::new(StatusStore::default());
        let (probes, probe_changes) = crate::prober::ProbeManager::new(
            h.cri.client.clone(),
            status.clone(),
            crate::events::EventRecorder::default(),
        );
        let (updates, updates_rx) = mpsc::channel(16);
        let (ready_tx, ready_rx) = watch::channel(sources_ready);
        let (evictions, evictions_rx) = mpsc::channel(4);
        // The container garbage collector takes what removed pods leave behind; it runs when
        // a pod is forgotten, so its period does not matter here.
        let known = Arc::new(crate::gc::KnownPods::default());
        let gc = crate::gc::ContainerGc::new(
            h.cri.client.clone(),
            crate::gc::ContainerPolicy::default(),
            known.clone(),
            Some(status.clone()),
            h.dir.path().join("logs"),
            crate::events::EventRecorder::default(),
            "node".into(),
        );
        tokio::spawn(gc.run(Duration::from_secs(600), cancel.child_token()));
        let sync_loop = SyncLoop::new(
            crate::sync::Managers {
                runtime: h.runtime.clone(),
                volumes: h.volumes.clone(),
                probes,
                status: status.clone(),
                inputs: Arc::default(),
            },
            Duration::from_secs(10),
            "fake".into(),
            16,
            Arc::new(SyncLoopHealth::default()),
            cancel.child_token(),
        )
        .with_known_pods(known);
        let sync_loop = match admission {
            Some(admission) => sync_loop.with_admission(admission),
            None => sync_loop,
        };
        tokio::spawn(sync_loop.run(SyncLoopInputs {
            pod_updates: updates_rx,
            pleg_events: pleg_rx,
            probe_changes,
            runtime_pods,
            sources_ready: ready_rx,
            evictions: evictions_rx,
        }));
        Node {
            h,
            status,
            updates,
            sources_ready: ready_tx,
            evictions,
            cancel,
        }
    }

    async fn send(&self, update: PodUpdate) {
        self.updates.send(update).await.expect("sync loop running");
    }
}

async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn status_of<'a>(status: &'a PodStatus, name: &str) -> Option<&'a ContainerStatus> {
    status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
}

fn is_running(status: &PodStatus, name: &str) -> bool {
    status_of(status, name)
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

fn waiting_reason(status: &PodStatus, name: &str) -> Option<String> {
    status_of(status, name)
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone())
}

fn running_in_fake(h: &Harness, name: &str) -> bool {
    h.fake()
        .container(name)
        .is_some_and(|c| c.state() == api::ContainerState::ContainerRunning)
}

/// Right after a start the node's labels are only the flags' until the API server's are read:
/// an API pod that selects a label someone added to the node must wait for them, not be
/// rejected (a running pod would be failed and killed after every restart).
#[tokio::test]
async fn api_pods_wait_for_the_node_labels_before_admission() {
    let h = Harness::new().await;
    let (labels_tx, node_labels) = watch::channel(std::collections::BTreeMap::new());
    let (synced_tx, labels_synced) = watch::channel(false);
    let admission = super::Admission {
        allocatable: super::admission::Allocatable {
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            pods: 110,
            ..Default::default()
        },
        node_labels,
        labels_synced,
        shutting_down: watch::channel(false).1,
        pressure: watch::channel(Default::default()).1,
        fresh_labels: None,
    };
    let node = Node::start_admitting(h, true, None, Some(admission)).await;
    let selecting = |uid: &str, value: &str| {
        let mut p = pod(uid, "Always", &[], &[&format!("app-{uid}")]);
        if let Some(spec) = p.spec.as_mut() {
            spec.node_selector = Some([("disk".to_string(), value.to_string())].into());
        }
        Arc::new(p)
    };
    node.send(PodUpdate::Add(vec![
        selecting("u-ssd", "ssd"),
        selecting("u-hdd", "hdd"),
    ]))
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        node.status.status("u-ssd").is_none(),
        "judged before the labels were read"
    );
    assert!(node.h.fake().sandboxes().is_empty());

    labels_tx.send_replace([("disk".to_string(), "ssd".to_string())].into());
    synced_tx.send_replace(true);
    let store = node.status.clone();
    wait_until("the selecting pod running", Duration::from_secs(5), || {
        store
            .status("u-ssd")
            .is_some_and(|s| is_running(&s, "app-u-ssd"))
    })
    .await;
    // The pod the labels do not match is rejected as before.
    wait_until("the other pod rejected", Duration::from_secs(5), || {
        store
            .status("u-hdd")
            .is_some_and(|s| s.phase.as_deref() == Some("Failed"))
    })
    .await;
}

/// The node's watch may lag a label the user added just before creating a pod that selects
/// it: such a pod is judged again against a fresh read of the node, not rejected at once.
#[tokio::test]
async fn a_pod_the_watched_labels_reject_is_judged_again_on_a_fresh_read() {
    let h = Harness::new().await;
    let (ask, mut asked) = watch::channel(0u64);
    let (read_tx, read) = watch::channel((0u64, None));
    let admission = super::Admission {
        allocatable: super::admission::Allocatable {
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            pods: 110,
            ..Default::default()
        },
        node_labels: watch::channel(std::collections::BTreeMap::new()).1,
        labels_synced: watch::channel(true).1,
        shutting_down: watch::channel(false).1,
        pressure: watch::channel(Default::default()).1,
        fresh_labels: Some(crate::node::labels::FreshLabels { ask, read }),
    };
    let node = Node::start_admitting(h, true, None, Some(admission)).await;
    let selecting = |uid: &str, value: &str| {
        let mut p = pod(uid, "Always", &[], &[&format!("app-{uid}")]);
        if let Some(spec) = p.spec.as_mut() {
            spec.node_selector = Some([("disk".to_string(), value.to_string())].into());
        }
        Arc::new(p)
    };
    node.send(PodUpdate::Add(vec![
        selecting("u-ssd", "ssd"),
        selecting("u-hdd", "hdd"),
    ]))
    .await;
    tokio::time::timeout(Duration::from_secs(5), asked.changed())
        .await
        .expect("no fresh read asked for")
        .unwrap();
    assert!(
        node.status.status("u-ssd").is_none(),
        "rejected before the fresh read"
    );
    let served = *asked.borrow_and_update();
    read_tx.send_replace((
        served,
        Some([("disk".to_string(), "ssd".to_string())].into()),
    ));

    let store = node.status.clone();
    wait_until("the selecting pod running", Duration::from_secs(5), || {
        store
            .status("u-ssd")
            .is_some_and(|s| is_running(&s, "app-u-ssd"))
    })
    .await;
    wait_until("the other pod rejected", Duration::from_secs(5), || {
        store
            .status("u-hdd")
            .is_some_and(|s| s.phase.as_deref() == Some("Failed"))
    })
    .await;
}

#[tokio::test]
async fn pod_runs_through_the_loop_and_its_removal_cleans_up() {
    let h = Harness::new().await;
    h.fake().exit_on_start("init1", 0);
    h.fake().exit_on_start("init2", 0);
    let node = Node::start(h, true, None).await;
    let p = Arc::new(pod("u-life", "Always", &["init1", "init2"], &["app"]));
    node.send(PodUpdate::Add(vec![p.clone()])).await;

    let store = node.status.clone();
    wait_until(
        "pod Running with app running",
        Duration::from_secs(5),
        || {
            store
                .status("u-life")
                .is_some_and(|s| s.phase.as_deref() == Some("Running") && is_running(&s, "app"))
        },
    )
    .await;
    let started: Vec<(&str, String)> = node
        .h
        .fake()
        .call_log()
        .into_iter()
        .filter(|c| matches!(c.method, "RunPodSandbox" | "StartContainer"))
        .map(|c| (c.method, c.subject))
        .collect();
    let want = [
        ("RunPodSandbox", "web-u-life"),
        ("StartContainer", "init1"),
        ("StartContainer", "init2"),
        ("StartContainer", "app"),
    ];
    assert_eq!(
        started,
        want.map(|(m, s)| (m, s.to_string())),
        "{:?}",
        node.h.fake().calls()
    );
    let log_dir = node.h.pod_log_dir(&p);
    assert!(log_dir.is_dir());
    assert!(node.h.pod_cgroup("u-life").is_dir());

    node.send(PodUpdate::Remove(vec![p.clone()])).await;
    let (fake, store) = (node.h.fake().clone(), node.status.clone());
    // The worker stops the pod; the garbage collector then removes its containers, its
    // sandbox and, last, its logs.
    wait_until("pod removed", Duration::from_secs(5), || {
        store.status("u-life").is_none() && fake.sandboxes().is_empty() && !log_dir.exists()
    })
    .await;
    assert!(fake.containers().is_empty());
    let stops = fake.calls_of("StopContainer");
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!(
        (stops[0].subject.as_str(), stops[0].timeout),
        ("app", Some(7))
    );
    assert!(!node.h.pod_cgroup("u-life").exists());
}

#[tokio::test]
async fn an_evicted_pod_fails_and_its_containers_stop_for_good() {
    let h = Harness::new().await;
    let node = Node::start(h, true, None).await;
    let p = Arc::new(pod("u-evict", "Always", &[], &["app"]));
    node.send(PodUpdate::Add(vec![p.clone()])).await;
    let (fake, store) = (node.h.fake().clone(), node.status.clone());
    wait_until("app running", Duration::from_secs(5), || {
        store
            .status("u-evict")
            .is_some_and(|s| is_running(&s, "app"))
    })
    .await;

    let eviction = crate::eviction::Eviction {
        uid: "u-evict".into(),
        failure: crate::status::PodFailure {
            reason: "Evicted".into(),
            message: "Usage of EmptyDir volume \"v\" exceeds the limit \"1Mi\". ".into(),
            disruption: false,
        },
        grace: 1,
    };
    node.evictions.send(eviction).await.expect("loop running");
    wait_until("the pod to fail", Duration::from_secs(5), || {
        store
            .status("u-evict")
            .is_some_and(|s| s.phase.as_deref() == Some("Failed") && !is_running(&s, "app"))
    })
    .await;
    let status = store.status("u-evict").expect("status");
    assert_eq!(status.reason.as_deref(), Some("Evicted"));
    assert!(
        status
            .message
            .unwrap_or_default()
            .starts_with("Usage of EmptyDir")
    );
    // Stopped with the eviction's grace as it is (upstream's override comes after the 2 s
    // minimum), not the pod's 7 s.
    let stops = fake.calls_of("StopContainer");
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!(stops[0].timeout, Some(1));
    // A failed pod is never restarted; the pod stays until its source removes it.
    node.send(PodUpdate::Update(vec![p])).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.count("StartContainer"), 1);
    assert!(store.status("u-evict").is_some());
}

#[tokio::test]
async fn crash_loop_shows_in_the_status_store() {
    let h = Harness::new().await;
    h.fake().exit_on_start("crasher", 1);
    let node = Node::start(h, true, None).await;
    let p = Arc::new(pod("u-loop", "Always", &[], &["crasher"]));
    node.send(PodUpdate::Add(vec![p])).await;

    let store = node.status.clone();
    wait_until("CrashLoopBackOff", Duration::from_secs(5), || {
        store
            .status("u-loop")
            .is_some_and(|s| waiting_reason(&s, "crasher").as_deref() == Some("CrashLoopBackOff"))
    })
    .await;
    let status = store.status("u-loop").expect("status");
    let crasher = status_of(&status, "crasher").expect("crasher status");
    // Restarted once at once; the second exit waits out the backoff (10 s).
    assert_eq!(crasher.restart_count, 1);
    let last = crasher
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref());
    assert_eq!(last.map(|t| t.exit_code), Some(1));
    let message = crasher
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.message.clone())
        .unwrap_or_default();
    assert!(message.contains("back-off 10s"), "{message}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(node.h.fake().count("CreateContainer"), 2);
}

#[tokio::test]
async fn termination_cancels_a_sync_stuck_in_a_slow_pull() {
    let h = Harness::new().await;
    h.fake().add_remote_image("registry.test/slow:1");
    let node = Node::start(h, true, None).await;
    let v1 = Arc::new(pod("u-slow", "Always", &[], &["app"]));
    node.send(PodUpdate::Add(vec![v1])).await;
    let (fake, store) = (node.h.fake().clone(), node.status.clone());
    wait_until("first sync", Duration::from_secs(5), || {
        store.status("u-slow").is_some() && running_in_fake(&node.h, "app")
    })
    .await;

    // A new image that takes "forever" to pull: the worker's next sync hangs in PullImage.
    fake.delay("PullImage", Duration::from_secs(30));
    let mut v2 = pod("u-slow", "Always", &[], &["app"]);
    v2.spec.as_mut().expect("spec").containers[0].image = Some("registry.test/slow:1".into());
    let v2 = Arc::new(v2);
    node.send(PodUpdate::Update(vec![v2.clone()])).await;
    wait_until("the pull to start", Duration::from_secs(5), || {
        fake.count("PullImage") > 0
    })
    .await;

    let asked = Instant::now();
    node.send(PodUpdate::Remove(vec![v2])).await;
    wait_until("the worker to finish", Duration::from_secs(5), || {
        store.status("u-slow").is_none() && fake.sandboxes().is_empty()
    })
    .await;
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "termination took {:?}",
        asked.elapsed()
    );
    assert!(fake.containers().is_empty());
    // The pull was abandoned, at the runtime too.
    wait_until("the pull to be cancelled", Duration::from_secs(2), || {
        fake.cancelled().contains(&"PullImage")
    })
    .await;
    assert!(!fake.has_image("registry.test/slow:1"));
}

/// A pod as an earlier kubelet left it in the runtime: its sandbox and a running `app`
/// container, its log and cgroup; returns the sandbox id and the log folder.
async fn run_bare_pod(h: &Harness, uid: &str, name: &str) -> (String, std::path::PathBuf) {
    let c = h.cri.client.clone();
    let identity = HashMap::from([
        (labels::POD_UID.to_string(), uid.to_string()),
        (labels::POD_NAME.to_string(), name.to_string()),
        (labels::POD_NAMESPACE.to_string(), "default".to_string()),
    ]);
    let log_dir = h.dir.path().join(format!("logs/default_{name}_{uid}"));
    let sandbox_config = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        labels: identity.clone(),
        log_directory: log_dir.to_string_lossy().into_owned(),
        ..Default::default()
    };
    let sb = c
        .run_pod_sandbox(sandbox_config.clone(), "")
        .await
        .expect("run sandbox");
    let mut container_labels = identity;
    container_labels.insert(labels::CONTAINER_NAME.into(), "app".into());
    let id = c
        .create_container(
            &sb,
            api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: "app".into(),
                    attempt: 0,
                }),
                image: Some(api::ImageSpec {
                    image: APP_IMAGE.into(),
                    ..Default::default()
                }),
                labels: container_labels,
                log_path: "app/0.log".into(),
                ..Default::default()
            },
            sandbox_config,
        )
        .await
        .expect("create");
    c.start_container(&id).await.expect("start");
    std::fs::create_dir_all(h.pod_cgroup(uid)).expect("pod cgroup");
    assert!(log_dir.join("app/0.log").is_file());
    (sb, log_dir)
}

#[tokio::test]
async fn pods_no_source_knows_are_removed_once_sources_are_ready() {
    let h = Harness::new().await;
    let (sb, log_dir) = run_bare_pod(&h, "u-orphan", "ghost").await;

    let node = Node::start(h, false, Some("u-orphan")).await;
    let keep = Arc::new(pod("u-keep", "Always", &[], &["app"]));
    node.send(PodUpdate::Add(vec![keep])).await;
    let fake = node.h.fake().clone();
    // Before every source has reported, an unknown pod may just not have been read yet.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(fake.count("StopPodSandbox"), 0, "{:?}", fake.calls());
    assert!(fake.sandboxes().iter().any(|s| s.id == sb));

    node.sources_ready.send_replace(true);
    let cgroup = node.h.pod_cgroup("u-orphan");
    // The worker stops it and removes its cgroup; the garbage collector then takes the
    // runtime objects and, last, the logs.
    wait_until("the orphan to be removed", Duration::from_secs(5), || {
        !fake.sandboxes().iter().any(|s| s.id == sb) && !cgroup.exists() && !log_dir.exists()
    })
    .await;
    let log = fake.call_log();
    let pos = |method: &str| {
        log.iter()
            .position(|c| c.method == method && c.subject != "web-u-keep")
            .unwrap_or_else(|| panic!("no {method} in {log:?}"))
    };
    assert!(pos("StopContainer") < pos("StopPodSandbox"));
    assert!(pos("StopPodSandbox") < pos("RemovePodSandbox"));
    let stop = &log[pos("StopContainer")];
    assert_eq!((stop.subject.as_str(), stop.timeout), ("app", Some(2)));
    assert!(!log_dir.exists());
    // The pod a source wants is left alone.
    let kept: Vec<_> = fake
        .sandboxes()
        .into_iter()
        .filter(|s| s.labels.get(labels::POD_UID).map(String::as_str) == Some("u-keep"))
        .collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].state(), api::PodSandboxState::SandboxReady);
    assert!(running_in_fake(&node.h, "app"));
}

/// A pod replaced while the kubelet was down (an edited static pod manifest: same name, new
/// UID) starts only once what the runtime still runs of the old one is stopped, and that
/// stop does not wait for every source (the API source may need the old pod: a static
/// apiserver).
#[tokio::test]
async fn a_pod_replaced_while_down_starts_after_its_predecessor_stops() {
    let h = Harness::new().await;
    h.fake().delay("StopContainer", Duration::from_millis(300));
    let (old_sb, _) = run_bare_pod(&h, "u-old", "web-u-new").await;
    let node = Node::start(h, false, Some("u-old")).await;
    let new = Arc::new(pod("u-new", "Always", &[], &["app"]));
    node.send(PodUpdate::Add(vec![new])).await;
    let fake = node.h.fake().clone();
    wait_until("the new pod running", Duration::from_secs(5), || {
        fake.sandboxes().iter().any(|s| {
            s.labels.get(labels::POD_UID).map(String::as_str) == Some("u-new")
                && s.state() == api::PodSandboxState::SandboxReady
        }) && running_in_fake(&node.h, "app")
    })
    .await;
    let old_ready = fake
        .sandboxes()
        .iter()
        .any(|s| s.id == old_sb && s.state() == api::PodSandboxState::SandboxReady);
    assert!(!old_ready, "{:?}", fake.sandboxes());
    let log = fake.call_log();
    let stop = log
        .iter()
        .position(|c| c.method == "StopPodSandbox")
        .unwrap_or_else(|| panic!("the old sandbox never stopped: {log:?}"));
    let run = log
        .iter()
        .rposition(|c| c.method == "RunPodSandbox")
        .expect("the new sandbox");
    assert!(stop < run, "the new pod ran beside the old one: {log:?}");
}

/// A manifest removed and put back (same UID) runs again once the old pod is torn down.
#[tokio::test]
async fn pod_added_back_during_teardown_starts_after_it() {
    let h = Harness::new().await;
    // Teardown is slow enough that the re-add lands while it is still going on.
    h.fake().delay("StopContainer", Duration::from_millis(300));
    let node = Node::start(h, true, None).await;
    let p = Arc::new(pod("u-back", "Always", &[], &["app"]));
    node.send(PodUpdate::Add(vec![p.clone()])).await;
    let fake = node.h.fake().clone();
    wait_until("app running", Duration::from_secs(5), || {
        running_in_fake(&node.h, "app")
    })
    .await;
    let first = fake.container("app").expect("app").id;

    node.send(PodUpdate::Remove(vec![p.clone()])).await;
    wait_until("teardown to begin", Duration::from_secs(5), || {
        fake.count("StopContainer") > 0
    })
    .await;
    node.send(PodUpdate::Add(vec![p])).await;
    wait_until("the pod to run again", Duration::from_secs(5), || {
        fake.container("app")
            .is_some_and(|c| c.id != first && c.state() == api::ContainerState::ContainerRunning)
    })
    .await;
    // The pod is the same (same UID), so what the old incarnation left stays under the
    // garbage collector's per-container policy, as upstream keeps it: its stopped sandbox and
    // one dead attempt beside the new sandbox and container.
    let sandboxes = fake.sandboxes();
    let ready: Vec<_> = sandboxes
        .iter()
        .filter(|s| s.state() == api::PodSandboxState::SandboxReady)
        .collect();
    assert_eq!(ready.len(), 1, "{sandboxes:?}");
    assert_eq!(ready[0].metadata.as_ref().map(|m| m.attempt), Some(1));
    let containers = fake.containers();
    assert!(containers.len() <= 2, "{containers:?}");
    let running = containers
        .iter()
        .filter(|c| c.state() == api::ContainerState::ContainerRunning)
        .count();
    assert_eq!(running, 1);
    let store = node.status.clone();
    wait_until("status of the new pod", Duration::from_secs(5), || {
        store
            .status("u-back")
            .is_some_and(|s| is_running(&s, "app"))
    })
    .await;
}

#[tokio::test]
async fn a_pod_parked_until_the_runtime_is_listed_is_known_to_the_collectors() {
    let h = Harness::new().await;
    let (probes, _changes) = crate::prober::ProbeManager::new(
        h.cri.client.clone(),
        Arc::new(StatusStore::default()),
        crate::events::EventRecorder::default(),
    );
    let known = Arc::new(crate::gc::KnownPods::default());
    let mut sync_loop = SyncLoop::new(
        crate::sync::Managers {
            runtime: h.runtime.clone(),
            volumes: h.volumes.clone(),
            probes,
            status: Arc::new(StatusStore::default()),
            inputs: Arc::default(),
        },
        Duration::from_secs(10),
        "fake".into(),
        16,
        Arc::new(SyncLoopHealth::default()),
        CancellationToken::new(),
    )
    .with_known_pods(known.clone());
    // Running, but the runtime has not been listed yet: the pod is parked, not started.
    let (_tx, runtime_pods) = watch::channel(crate::pleg::RuntimePods::default());
    sync_loop.runtime_pods = Some(runtime_pods);
    known.mark_synced();
    let p = Arc::new(pod("u-parked", "Always", &[], &["app"]));
    sync_loop.handle_update(PodUpdate::Add(vec![p.clone()]));
    assert!(sync_loop.workers.is_empty());
    assert!(!known.snapshot(None).content_removable("u-parked"));
    sync_loop.handle_update(PodUpdate::Remove(vec![p]));
    assert!(known.snapshot(None).content_removable("u-parked"));
}
