//! The collectors' decisions on hand-made listings, and whole passes against the CRI fake.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::images::{self, Candidate, ImagePolicy, Record};
use super::known::{KnownPods, PodStates};
use super::select::{self, ContainerPolicy};
use super::{ContainerGc, ImageGc};
use crate::cri::api;
use crate::cri::fake::FakeCri;
use crate::events::EventRecorder;
use crate::runtime::labels;

const SEC: i64 = 1_000_000_000;

fn ctr(
    id: &str,
    uid: &str,
    name: &str,
    created_s: i64,
    state: api::ContainerState,
) -> api::Container {
    api::Container {
        id: id.into(),
        pod_sandbox_id: format!("sb-{uid}"),
        metadata: Some(api::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        state: state as i32,
        created_at: created_s * SEC,
        labels: HashMap::from([(labels::POD_UID.to_string(), uid.to_string())]),
        ..Default::default()
    }
}

fn exited(id: &str, uid: &str, name: &str, created_s: i64) -> api::Container {
    ctr(
        id,
        uid,
        name,
        created_s,
        api::ContainerState::ContainerExited,
    )
}

fn states(synced: bool, known: &[&str]) -> PodStates {
    PodStates {
        synced,
        known: known.iter().map(|s| s.to_string()).collect(),
        finished: HashSet::new(),
    }
}

fn ids(dead: &[select::Dead]) -> Vec<&str> {
    dead.iter().map(|d| d.id.as_str()).collect()
}

const NOW: i64 = 1_000 * SEC;

#[test]
fn each_container_keeps_its_newest_dead_attempt() {
    let list = [
        exited("a1", "p", "app", 10),
        exited("a3", "p", "app", 30),
        exited("a2", "p", "app", 20),
        ctr("a4", "p", "app", 40, api::ContainerState::ContainerRunning),
        exited("s1", "p", "sidecar", 15),
    ];
    let doomed = select::containers_to_remove(
        &list,
        &states(true, &["p"]),
        &ContainerPolicy::default(),
        NOW,
        false,
    );
    // Oldest first; the running one is never considered.
    assert_eq!(ids(&doomed), ["a1", "a2"]);
}

#[test]
fn young_containers_and_foreign_ones_stay() {
    let mut foreign = exited("f1", "x", "app", 1);
    foreign.labels.clear();
    let list = [
        exited("old", "p", "app", 10),
        exited("young", "p", "app", 995),
        exited("older", "p", "app", 5),
        foreign,
    ];
    let policy = ContainerPolicy {
        min_age: Duration::from_secs(60),
        ..Default::default()
    };
    let doomed = select::containers_to_remove(&list, &states(true, &["p"]), &policy, NOW, false);
    // "young" is too young to count; of the two others the newest stays.
    assert_eq!(ids(&doomed), ["older"]);
}

#[test]
fn a_gone_pod_loses_every_dead_container_once_sources_are_synced() {
    let list = [
        exited("g1", "gone", "app", 10),
        exited("g2", "gone", "app", 20),
    ];
    let policy = ContainerPolicy::default();
    let before = select::containers_to_remove(&list, &states(false, &[]), &policy, NOW, false);
    assert_eq!(ids(&before), ["g1"], "before sync only the policy applies");
    let after = select::containers_to_remove(&list, &states(true, &[]), &policy, NOW, false);
    assert_eq!(ids(&after), ["g1", "g2"]);
}

#[test]
fn finished_pods_lose_their_containers_only_on_demand() {
    let list = [exited("d1", "done", "app", 10)];
    let mut s = states(true, &["done"]);
    s.finished.insert("done".into());
    let policy = ContainerPolicy::default();
    assert!(select::containers_to_remove(&list, &s, &policy, NOW, false).is_empty());
    let all = select::containers_to_remove(&list, &s, &policy, NOW, true);
    assert_eq!(ids(&all), ["d1"]);
}

#[test]
fn the_node_wide_limit_spreads_over_units_then_takes_the_oldest() {
    let list = [
        exited("a1", "p", "a", 1),
        exited("a2", "p", "a", 2),
        exited("a3", "p", "a", 3),
        exited("b1", "p", "b", 4),
        exited("b2", "p", "b", 5),
        exited("c1", "q", "c", 6),
    ];
    let policy = ContainerPolicy {
        max_per_pod_container: -1,
        max_containers: 2,
        ..Default::default()
    };
    let doomed =
        select::containers_to_remove(&list, &states(true, &["p", "q"]), &policy, NOW, false);
    // One per unit (2 / 3 units rounds up to 1), then the oldest of what is left.
    let mut gone = ids(&doomed);
    gone.sort_unstable();
    assert_eq!(gone, ["a1", "a2", "a3", "b1"]);
}

fn sandbox(id: &str, uid: &str, created_s: i64, ready: bool) -> api::PodSandbox {
    api::PodSandbox {
        id: id.into(),
        metadata: Some(api::PodSandboxMetadata {
            name: "web".into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        state: if ready {
            api::PodSandboxState::SandboxReady
        } else {
            api::PodSandboxState::SandboxNotready
        } as i32,
        created_at: created_s * SEC,
        labels: HashMap::from([(labels::POD_UID.to_string(), uid.to_string())]),
        ..Default::default()
    }
}

#[test]
fn sandboxes_go_when_nothing_needs_them() {
    let sandboxes = [
        sandbox("p-old", "p", 1, false),
        sandbox("p-mid", "p", 2, false),
        sandbox("p-new", "p", 3, false),
        sandbox("g-1", "gone", 1, false),
        sandbox("g-2", "gone", 2, true),
        sandbox("h-1", "holder", 1, false),
        sandbox("h-2", "holder", 2, false),
    ];
    let mut holding = exited("hc", "holder", "app", 1);
    holding.pod_sandbox_id = "h-1".into();
    let mut doomed = select::sandboxes_to_remove(
        &sandboxes,
        &[holding],
        &states(true, &["p", "holder"]),
        false,
    );
    doomed.sort_unstable();
    // p keeps its newest; the gone pod's ready sandbox stays until it is stopped; a sandbox
    // that still holds a container stays.
    assert_eq!(doomed, ["g-1", "p-mid", "p-old"]);
}

#[test]
fn log_folders_outlive_the_containers_of_gone_pods() {
    let names = vec![
        "default_web_live".to_string(),
        "default_old_gone".to_string(),
        "default_busy_gone2".to_string(),
    ];
    let left = [exited("c", "gone2", "app", 1)];
    let s = states(true, &["live"]);
    assert_eq!(
        select::log_dirs_to_remove(&names, &left, &s),
        ["default_old_gone"]
    );
    assert!(select::log_dirs_to_remove(&names, &left, &states(false, &[])).is_empty());
}

fn image(id: &str, size: u64, pinned: bool) -> api::Image {
    api::Image {
        id: id.into(),
        size,
        pinned,
        ..Default::default()
    }
}

#[test]
fn images_are_tried_least_recently_used_first_and_pinned_ones_never() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
    let t1 = t0 + Duration::from_secs(60);
    let mut records = HashMap::new();
    let list = [
        image("used", 1, false),
        image("idle", 2, false),
        image("pin", 3, true),
    ];
    images::refresh(
        &mut records,
        &list,
        &HashSet::from(["used".to_string()]),
        t0,
    );
    // Later, "used" is no longer used and a new image appears.
    let list2 = [
        image("used", 1, false),
        image("idle", 2, false),
        image("pin", 3, true),
        image("new", 4, false),
    ];
    images::refresh(&mut records, &list2, &HashSet::new(), t1);
    let order: Vec<String> = images::eviction_order(&records, &HashSet::new())
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(order, ["idle", "new", "used"]);
    // Vanished images are forgotten.
    images::refresh(&mut records, &list2[..1], &HashSet::new(), t1);
    assert_eq!(records.len(), 1);
}

#[test]
fn image_ages_and_thresholds_as_upstream() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
    let c = Candidate {
        id: "i".into(),
        record: Record {
            first_detected: t0,
            last_used: None,
            size: 10,
            pinned: false,
        },
    };
    let min = Duration::from_secs(120);
    assert!(!images::eligible_for_space(
        &c,
        t0 + Duration::from_secs(60),
        min
    ));
    assert!(images::eligible_for_space(&c, t0 + min, min));
    assert!(images::too_old(&c, t0, Duration::from_secs(1)));
    let used = Candidate {
        record: Record {
            last_used: Some(t0),
            ..c.record
        },
        ..c
    };
    assert!(!images::too_old(
        &used,
        t0 + Duration::from_secs(5),
        Duration::from_secs(10)
    ));
    assert!(images::too_old(
        &used,
        t0 + Duration::from_secs(11),
        Duration::from_secs(10)
    ));
    assert!(!images::eligible_for_space(&used, t0, Duration::ZERO));

    let policy = ImagePolicy {
        high_threshold_percent: 85,
        low_threshold_percent: 80,
        min_age: min,
        max_age: Duration::ZERO,
    };
    assert_eq!(images::amount_to_free(1000, 200, &policy), None);
    // 90% used: down to 80% means 200 available, 100 more.
    assert_eq!(images::amount_to_free(1000, 100, &policy), Some(100));
    assert_eq!(images::amount_to_free(0, 0, &policy), None);
    assert!(policy.periodic());
    let off = ImagePolicy {
        high_threshold_percent: 100,
        ..policy
    };
    assert!(!off.periodic());
}

/// A sandbox and one container of pod `uid` in the fake, logging under `logs`.
async fn pod_with_container(cri: &FakeCri, uid: &str, image: &str, logs: &Path) -> String {
    let identity = HashMap::from([
        (labels::POD_UID.to_string(), uid.to_string()),
        (labels::POD_NAME.to_string(), "web".to_string()),
        (labels::POD_NAMESPACE.to_string(), "default".to_string()),
    ]);
    let config = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: "web".into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        labels: identity.clone(),
        log_directory: logs
            .join(format!("default_web_{uid}"))
            .to_string_lossy()
            .into_owned(),
        ..Default::default()
    };
    let c = &cri.client;
    let sb = c
        .run_pod_sandbox(config.clone(), "")
        .await
        .expect("sandbox");
    std::fs::create_dir_all(logs.join(format!("default_web_{uid}/app"))).expect("log dir");
    let id = c
        .create_container(
            &sb,
            api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: "app".into(),
                    attempt: 0,
                }),
                image: Some(api::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                labels: identity,
                log_path: "app/0.log".into(),
                ..Default::default()
            },
            config,
        )
        .await
        .expect("create");
    c.start_container(&id).await.expect("start");
    id
}

#[tokio::test]
async fn delete_unused_takes_unused_images_old_enough_and_counts_them() {
    let cri = FakeCri::start(Duration::from_secs(5)).await;
    let used = cri.runtime.add_image("registry.test/used:1");
    let unused = cri.runtime.add_image("registry.test/unused:1");
    let young = cri.runtime.add_image("registry.test/young:1");
    let pause = cri.runtime.add_image("registry.test/pause:1");
    let logs = tempfile::tempdir().expect("tempdir");
    pod_with_container(&cri, "u1", "registry.test/used:1", logs.path()).await;
    let gc = ImageGc::new(
        cri.client.clone(),
        ImagePolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(60),
            max_age: Duration::ZERO,
        },
        "registry.test/pause:1".into(),
        EventRecorder::default(),
        "node".into(),
    );
    // The first look records every image as just detected: nothing is old enough yet.
    assert_eq!(gc.delete_unused().await.expect("first pass"), 0);
    let long_ago = SystemTime::now() - Duration::from_secs(600);
    for id in [&used, &unused, &pause] {
        gc.set_first_detected(id, long_ago);
    }
    let space = || {
        crate::metrics::kubelet()
            .image_garbage_collected
            .get(&[images::REASON_SPACE])
            .unwrap_or(0.0)
    };
    let counted = space();
    let freed = gc.delete_unused().await.expect("second pass");
    assert_eq!(freed, 1 << 20);
    assert!(!cri.runtime.has_image("registry.test/unused:1"));
    assert!(cri.runtime.has_image("registry.test/used:1"));
    assert!(cri.runtime.has_image("registry.test/young:1"));
    assert!(
        cri.runtime.has_image("registry.test/pause:1"),
        "the sandbox image stays"
    );
    assert!(gc.record(&unused).is_none());
    assert!(gc.record(&used).is_some_and(|r| r.last_used.is_some()));
    assert!(gc.record(&young).is_some());
    assert!(space() >= counted + 1.0);
}

fn container_gc(cri: &FakeCri, known: Arc<KnownPods>, logs: &Path) -> ContainerGc {
    ContainerGc::new(
        cri.client.clone(),
        ContainerPolicy::default(),
        known,
        None,
        logs.to_path_buf(),
        EventRecorder::default(),
        "node".into(),
    )
}

#[tokio::test]
async fn a_gone_pod_loses_containers_then_sandbox_then_logs() {
    let cri = FakeCri::start(Duration::from_secs(5)).await;
    cri.runtime.add_image("registry.test/app:1");
    let logs = tempfile::tempdir().expect("tempdir");
    let gone = pod_with_container(&cri, "gone", "registry.test/app:1", logs.path()).await;
    pod_with_container(&cri, "live", "registry.test/app:1", logs.path()).await;
    let gone_dir = logs.path().join("default_web_gone");
    let log = gone_dir.join("app/0.log");
    std::fs::write(&log, "x").expect("log");
    std::fs::write(gone_dir.join("app/0.log.20260101-000000"), "y").expect("rotated");
    assert!(cri.runtime.exit_container(&gone, 0));
    for sb in cri.runtime.sandboxes() {
        if sb.metadata.as_ref().is_some_and(|m| m.uid == "gone") {
            cri.client.stop_pod_sandbox(&sb.id).await.expect("stop");
        }
    }
    let known = Arc::new(KnownPods::default());
    known.insert("live");
    let gc = container_gc(&cri, known.clone(), logs.path());

    // Before every source has spoken the pod may just not have been read: all stays.
    gc.garbage_collect(false).await.expect("pass");
    assert_eq!(cri.runtime.containers().len(), 2);
    assert!(log.is_file());

    known.mark_synced();
    gc.garbage_collect(false).await.expect("pass");
    let left: Vec<String> = cri
        .runtime
        .containers()
        .into_iter()
        .filter_map(|c| c.labels.get(labels::POD_UID).cloned())
        .collect();
    assert_eq!(left, ["live"]);
    assert_eq!(cri.runtime.sandboxes().len(), 1);
    assert!(!gone_dir.exists());
    assert!(logs.path().join("default_web_live").is_dir());
    let log_order: Vec<&str> = cri
        .runtime
        .calls()
        .into_iter()
        .filter(|m| matches!(*m, "RemoveContainer" | "RemovePodSandbox"))
        .collect();
    assert_eq!(log_order, ["RemoveContainer", "RemovePodSandbox"]);
}

#[tokio::test]
async fn logs_stay_while_a_container_of_the_gone_pod_cannot_be_removed() {
    let cri = FakeCri::start(Duration::from_secs(5)).await;
    cri.runtime.add_image("registry.test/app:1");
    let logs = tempfile::tempdir().expect("tempdir");
    let id = pod_with_container(&cri, "gone", "registry.test/app:1", logs.path()).await;
    assert!(cri.runtime.exit_container(&id, 1));
    let known = Arc::new(KnownPods::default());
    known.mark_synced();
    let gc = container_gc(&cri, known, logs.path());
    cri.runtime
        .fail_next("RemoveContainer", tonic::Status::unavailable("busy"));
    gc.garbage_collect(false).await.expect("pass");
    assert_eq!(cri.runtime.containers().len(), 1);
    assert!(logs.path().join("default_web_gone").is_dir());
    gc.garbage_collect(false).await.expect("pass");
    assert!(cri.runtime.containers().is_empty());
    assert!(!logs.path().join("default_web_gone").exists());
}

#[tokio::test]
async fn orphaned_pod_folders_and_cgroups_go_once_sources_are_synced() {
    let root = tempfile::tempdir().expect("tempdir");
    let pods_dir = root.path().join("pods");
    for uid in ["orphan", "known", "running"] {
        std::fs::create_dir_all(pods_dir.join(uid).join("volumes")).expect("pod dir");
    }
    // A cgroupfs v2 tree of our own with a pod cgroup per pod.
    let cgroup_fs = root.path().join("cgroupfs");
    let base = cgroup_fs.join("sys/fs/cgroup");
    std::fs::create_dir_all(&base).expect("cgroup tree");
    std::fs::write(base.join("cgroup.controllers"), "cpu memory pids\n").expect("controllers");
    let pod_cgroup = |uid: &str| base.join(format!("kubepods/besteffort/pod{uid}"));
    for uid in ["0a0a0a0a-orphan", "known", "running"] {
        std::fs::create_dir_all(pod_cgroup(uid)).expect("pod cgroup");
    }
    let cgroups = Arc::new(
        crate::cm::CgroupManager::with_fs_root(&cgroup_fs, "", true).expect("cgroup manager"),
    );
    let known = Arc::new(KnownPods::default());
    known.insert("known");
    let running = crate::pleg::RuntimePod {
        uid: "running".into(),
        name: "web".into(),
        namespace: "default".into(),
        running_containers: 1,
        ready_sandboxes: 1,
    };
    let (_tx, runtime_pods) =
        tokio::sync::watch::channel(Arc::new(HashMap::from([("running".to_string(), running)])));
    let volumes = Arc::new(crate::volume::VolumeManager::new(
        root.path().to_path_buf(),
        Arc::default(),
        crate::fieldpath::NodeAllocatable::default(),
        EventRecorder::default(),
    ));
    let sweeper = super::pod_dirs::OrphanDirs {
        pods_dir: pods_dir.clone(),
        known: known.clone(),
        volumes,
        cgroups,
        runtime_pods,
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(sweeper.run(cancel.child_token()));
    // Not before every source has spoken.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(pods_dir.join("orphan").exists());
    assert!(pod_cgroup("0a0a0a0a-orphan").exists());
    known.mark_synced();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while pods_dir.join("orphan").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "orphan folder still there"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(pods_dir.join("known").exists());
    assert!(
        pods_dir.join("running").exists(),
        "a pod that still runs keeps its folder"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while pod_cgroup("0a0a0a0a-orphan").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "orphan cgroup still there"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(pod_cgroup("known").exists());
    assert!(pod_cgroup("running").exists());
    cancel.cancel();
}
