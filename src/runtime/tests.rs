//! The runtime manager against the in-memory CRI fake: what it asks the runtime to do, in
//! which order, and what it reports.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use super::SyncOutcome;
use super::backoff::Backoff;
use super::testing::*;
use crate::cri::api;
use crate::cri::fake::FakeRuntime;
use crate::pod::paths;
use crate::status::{PodStatusInput, generate_pod_status};

// Turning the runtime's state into API status belongs to status/, above the runtime: the
// runtime's own tests reach it here rather than through the shared harness.
impl Harness {
    /// The API status the worker would publish right now, with `outcome`'s waiting reasons.
    pub async fn status(&self, pod: &Pod, outcome: &SyncOutcome) -> PodStatus {
        let observed = self.runtime.pod_status(uid(pod)).await.expect("pod status");
        generate_pod_status(&PodStatusInput {
            failure: None,
            probes: &Default::default(),
            resize: Default::default(),
            pod,
            observed: &observed,
            waiting: &outcome.waiting,
            start_time: SystemTime::now(),
            node_ip: "192.0.2.10",
            runtime_name: "fake",
            now: SystemTime::now(),
        })
    }
}

/// The calls that change the pod, as (method, subject).
fn mutations(fake: &FakeRuntime) -> Vec<(&'static str, String)> {
    fake.call_log()
        .into_iter()
        .filter(|c| {
            matches!(
                c.method,
                "RunPodSandbox"
                    | "StopPodSandbox"
                    | "RemovePodSandbox"
                    | "CreateContainer"
                    | "StartContainer"
                    | "StopContainer"
                    | "RemoveContainer"
            )
        })
        .map(|c| (c.method, c.subject))
        .collect()
}

fn call(method: &'static str, subject: &str) -> (&'static str, String) {
    (method, subject.to_string())
}

fn container_status<'a>(
    status: &'a PodStatus,
    name: &str,
) -> &'a k8s_openapi::api::core::v1::ContainerStatus {
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no status for container {name}"))
}

fn waiting_reason(status: &PodStatus, name: &str) -> Option<String> {
    container_status(status, name)
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone())
}

#[tokio::test]
async fn new_pod_starts_sandbox_then_inits_one_by_one_then_containers() {
    let h = Harness::new().await;
    let p = pod(
        "u-order",
        "Always",
        &["init1", "init2"],
        &["app", "sidecar"],
    );
    let mut backoff = Backoff::default();

    let out = h.sync(&p, &mut backoff).await;
    assert!(out.waiting.is_empty(), "{:?}", out.waiting);
    // While init1 runs nothing else starts.
    h.sync(&p, &mut backoff).await;
    assert_eq!(h.fake().count("CreateContainer"), 1);
    assert!(h.fake().exit_container(&h.container_id("init1"), 0));
    h.sync(&p, &mut backoff).await;
    h.sync(&p, &mut backoff).await;
    assert_eq!(h.fake().count("CreateContainer"), 2);
    assert!(h.fake().exit_container(&h.container_id("init2"), 0));
    h.sync(&p, &mut backoff).await;

    assert_eq!(
        mutations(h.fake()),
        vec![
            call("RunPodSandbox", "web-u-order"),
            call("CreateContainer", "init1"),
            call("StartContainer", "init1"),
            call("CreateContainer", "init2"),
            call("StartContainer", "init2"),
            call("CreateContainer", "app"),
            call("StartContainer", "app"),
            call("CreateContainer", "sidecar"),
            call("StartContainer", "sidecar"),
        ]
    );
    // The pod's cgroup and log directory exist before its sandbox does; containers log there.
    assert!(h.pod_cgroup("u-order").is_dir());
    assert!(h.pod_log_dir(&p).join("app/0.log").is_file());
    let status = h.status(&p, &SyncOutcome::default()).await;
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(
        status.pod_ip.as_deref().map(|ip| ip.starts_with("10.88.")),
        Some(true)
    );
    // A converged pod causes no further changes.
    h.fake().clear_calls();
    let out = h.sync(&p, &mut backoff).await;
    assert!(mutations(h.fake()).is_empty(), "{:?}", h.fake().call_log());
    assert_eq!(out.requeue_after, None);
}

#[tokio::test]
async fn crashing_container_restarts_once_then_backs_off() {
    let h = Harness::new().await;
    let p = pod("u-crash", "Always", &[], &["app"]);
    let mut backoff = Backoff::new(Duration::from_millis(300), Duration::from_secs(5));

    h.sync(&p, &mut backoff).await;
    assert!(h.fake().exit_container(&h.container_id("app"), 1));
    // First crash: restarted at once, as attempt 1.
    let out = h.sync(&p, &mut backoff).await;
    assert!(out.waiting.is_empty(), "{:?}", out.waiting);
    let app = h.fake().container("app").expect("app");
    assert_eq!(app.metadata.as_ref().map(|m| m.attempt), Some(1));
    assert_eq!(app.state(), api::ContainerState::ContainerRunning);

    // Second crash: CrashLoopBackOff for the initial delay, nothing created.
    assert!(h.fake().exit_container(&app.id, 1));
    let creates = h.fake().count("CreateContainer");
    let out = h.sync(&p, &mut backoff).await;
    assert_eq!(h.fake().count("CreateContainer"), creates);
    let waiting = out.waiting.get("app").expect("app waits");
    assert_eq!(waiting.reason, "CrashLoopBackOff");
    assert!(
        waiting
            .message
            .contains("back-off 300ms restarting failed container=app"),
        "{}",
        waiting.message
    );
    let requeue = out.requeue_after.expect("requeue at backoff expiry");
    assert!(
        requeue > Duration::ZERO && requeue <= Duration::from_millis(300),
        "{requeue:?}"
    );
    let status = h.status(&p, &out).await;
    assert_eq!(
        waiting_reason(&status, "app").as_deref(),
        Some("CrashLoopBackOff")
    );
    let cs = container_status(&status, "app");
    assert_eq!(cs.restart_count, 1);
    let last = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    assert_eq!(last.map(|t| t.exit_code), Some(1));
    assert_eq!(status.phase.as_deref(), Some("Running"));

    // After the delay it restarts, and the next crash waits twice as long.
    tokio::time::sleep(requeue + Duration::from_millis(20)).await;
    let out = h.sync(&p, &mut backoff).await;
    assert!(out.waiting.is_empty(), "{:?}", out.waiting);
    let app = h.fake().container("app").expect("app");
    assert_eq!(app.metadata.as_ref().map(|m| m.attempt), Some(2));
    assert!(h.fake().exit_container(&app.id, 1));
    let out = h.sync(&p, &mut backoff).await;
    let requeue = out.requeue_after.expect("requeue");
    assert!(
        requeue > Duration::from_millis(300) && requeue <= Duration::from_millis(600),
        "{requeue:?}"
    );
    assert!(out.waiting["app"].message.contains("back-off 600ms"));
    // Syncing removes no dead attempt: the container garbage collector keeps one of them.
    let attempts: Vec<u32> = h
        .fake()
        .containers()
        .iter()
        .filter_map(|c| c.metadata.as_ref().map(|m| m.attempt))
        .collect();
    assert_eq!(attempts, [0, 1, 2]);
}

/// The kernel's record decides, not the exit code: containerd says `Error` when the pod
/// cgroup ran out rather than the container's own, and a SIGKILL from elsewhere is no OOM.
#[tokio::test]
async fn a_container_the_oom_killer_hit_reports_oom_killed() {
    let h = Harness::new().await;
    let p = pod("u-oom", "Never", &[], &["hog", "other"]);
    let mut backoff = Backoff::default();
    h.sync(&p, &mut backoff).await;
    let (hog, other) = (h.container_id("hog"), h.container_id("other"));
    // The kernel logs the kill before the process is gone.
    h.oom_kills.record(&hog);
    assert!(h.fake().exit_container(&hog, 137));
    assert!(h.fake().exit_container(&other, 137));
    let out = h.sync(&p, &mut backoff).await;
    let status = h.status(&p, &out).await;
    let terminated = |name| {
        let t = container_status(&status, name)
            .state
            .as_ref()
            .and_then(|s| s.terminated.clone())
            .expect("terminated");
        (t.exit_code, t.reason)
    };
    assert_eq!(terminated("hog"), (137, Some("OOMKilled".into())));
    assert_eq!(terminated("other"), (137, Some("Error".into())));
}

#[tokio::test]
async fn never_pod_is_not_restarted_and_fails() {
    let h = Harness::new().await;
    let p = pod("u-never", "Never", &[], &["app"]);
    let mut backoff = Backoff::default();

    h.sync(&p, &mut backoff).await;
    assert!(h.fake().exit_container(&h.container_id("app"), 1));
    let out = h.sync(&p, &mut backoff).await;
    assert!(out.finished);
    assert_eq!(h.fake().count("CreateContainer"), 1);
    let sandboxes = h.fake().sandboxes();
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(sandboxes[0].state(), api::PodSandboxState::SandboxNotready);
    // The dead container stays for its status and logs.
    assert_eq!(h.fake().containers().len(), 1);

    let status = h.status(&p, &out).await;
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let term = container_status(&status, "app")
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!((term.exit_code, term.reason.as_deref()), (1, Some("Error")));

    // Later syncs (sandbox now not ready) neither recreate the sandbox nor restart anything.
    let out = h.sync(&p, &mut backoff).await;
    assert!(out.finished);
    assert_eq!(h.fake().count("RunPodSandbox"), 1);
    assert_eq!(h.fake().count("CreateContainer"), 1);
    assert_eq!(h.status(&p, &out).await.phase.as_deref(), Some("Failed"));
}

#[tokio::test]
async fn failed_init_container_with_never_fails_the_pod() {
    let h = Harness::new().await;
    let p = pod("u-init-fail", "Never", &["setup"], &["app"]);
    let mut backoff = Backoff::default();
    h.sync(&p, &mut backoff).await;
    assert!(h.fake().exit_container(&h.container_id("setup"), 2));
    let out = h.sync(&p, &mut backoff).await;
    assert!(out.finished);
    assert!(
        h.fake().container("app").is_none(),
        "app started after a failed init"
    );
    assert_eq!(h.status(&p, &out).await.phase.as_deref(), Some("Failed"));
}

/// Upstream never creates a sandbox for a pod whose init containers are done and whose
/// containers all succeeded under OnFailure; the pod has Succeeded and stays so.
#[tokio::test]
async fn succeeded_on_failure_pod_with_init_is_not_restarted() {
    let h = Harness::new().await;
    let p = pod("u-done", "OnFailure", &["setup"], &["app"]);
    let mut backoff = Backoff::default();
    h.sync(&p, &mut backoff).await;
    assert!(h.fake().exit_container(&h.container_id("setup"), 0));
    h.sync(&p, &mut backoff).await;
    assert!(h.fake().exit_container(&h.container_id("app"), 0));
    let out = h.sync(&p, &mut backoff).await;
    assert!(out.finished, "all containers succeeded");
    assert_eq!(h.status(&p, &out).await.phase.as_deref(), Some("Succeeded"));

    // The sandbox is stopped now; the next syncs must leave the pod alone.
    for _ in 0..2 {
        let out = h.sync(&p, &mut backoff).await;
        assert_eq!(h.fake().count("RunPodSandbox"), 1, "{:?}", h.fake().calls());
        assert_eq!(h.fake().count("CreateContainer"), 2);
        assert!(out.finished);
    }
}

#[tokio::test]
async fn kill_pod_stops_containers_with_grace_then_sandbox_and_remove_pod_leaves_them_to_gc() {
    let h = Harness::new().await;
    let p = pod("u-term", "Always", &[], &["app", "sidecar"]);
    let mut backoff = Backoff::default();
    h.sync(&p, &mut backoff).await;
    let pod_dir = paths::pod_dir(&h.dir.path().join("root"), "u-term");
    std::fs::create_dir_all(pod_dir.join("volumes")).expect("pod dir");
    assert!(h.pod_cgroup("u-term").is_dir());
    assert!(h.pod_log_dir(&p).join("sidecar/0.log").is_file());
    h.fake().clear_calls();

    let observed = h.runtime.pod_status("u-term").await.expect("pod status");
    h.runtime
        .kill_pod(&p, &observed, crate::runtime::Grace::Pod(7))
        .await
        .expect("kill pod");
    let log = mutations(h.fake());
    assert_eq!(log.len(), 3, "{log:?}");
    let mut stopped: Vec<&str> = log[..2]
        .iter()
        .map(|(m, s)| {
            assert_eq!(*m, "StopContainer");
            s.as_str()
        })
        .collect();
    stopped.sort_unstable();
    assert_eq!(stopped, ["app", "sidecar"]);
    assert_eq!(log[2], call("StopPodSandbox", "web-u-term"));
    let graces: Vec<Option<i64>> = h
        .fake()
        .calls_of("StopContainer")
        .iter()
        .map(|c| c.timeout)
        .collect();
    assert_eq!(graces, [Some(7), Some(7)]);
    assert!(
        h.fake()
            .containers()
            .iter()
            .all(|c| c.state() == api::ContainerState::ContainerExited)
    );

    h.runtime.remove_pod("u-term").await.expect("remove pod");
    assert!(!h.pod_cgroup("u-term").exists());
    // The stopped containers, sandbox and logs are the container garbage collector's.
    assert_eq!(h.fake().count("RemoveContainer"), 0);
    assert_eq!(h.fake().count("RemovePodSandbox"), 0);
    assert_eq!(h.fake().containers().len(), 2);
    assert!(h.pod_log_dir(&p).join("sidecar/0.log").is_file());
    assert!(pod_dir.exists(), "the pod folder is the volume manager's");
    h.volumes.teardown("u-term").await.expect("volume teardown");
    assert!(!pod_dir.exists());
    // Removing again (a retried termination) still succeeds.
    h.runtime.remove_pod("u-term").await.expect("remove again");
}

#[tokio::test]
async fn image_pull_failure_reports_err_image_pull_then_backoff() {
    let h = Harness::new().await;
    let mut p = pod("u-pull", "Always", &[], &["app"]);
    let spec = p.spec.as_mut().expect("spec");
    spec.containers[0].image = Some("registry.test/missing:1".into());
    spec.containers[0].image_pull_policy = Some("IfNotPresent".into());
    let mut backoff = Backoff::new(Duration::from_millis(300), Duration::from_secs(5));

    let out = h.sync(&p, &mut backoff).await;
    assert_eq!(h.fake().count("PullImage"), 1);
    let w = out.waiting.get("app").expect("app waits");
    assert_eq!(w.reason, "ErrImagePull");
    assert!(
        w.message.contains("registry.test/missing:1"),
        "{}",
        w.message
    );
    assert_eq!(out.requeue_after, Some(Duration::from_millis(300)));
    let status = h.status(&p, &out).await;
    assert_eq!(
        waiting_reason(&status, "app").as_deref(),
        Some("ErrImagePull")
    );
    assert_eq!(status.phase.as_deref(), Some("Pending"));

    // Within the backoff no pull is attempted.
    let out = h.sync(&p, &mut backoff).await;
    assert_eq!(h.fake().count("PullImage"), 1);
    assert_eq!(out.waiting["app"].reason, "ImagePullBackOff");
    let requeue = out.requeue_after.expect("requeue");
    assert!(requeue <= Duration::from_millis(300), "{requeue:?}");
    let status = h.status(&p, &out).await;
    assert_eq!(
        waiting_reason(&status, "app").as_deref(),
        Some("ImagePullBackOff")
    );

    // Once the registry has it and the backoff expired, the pull and the start go through.
    h.fake().add_remote_image("registry.test/missing:1");
    tokio::time::sleep(requeue + Duration::from_millis(20)).await;
    let out = h.sync(&p, &mut backoff).await;
    assert!(out.waiting.is_empty(), "{:?}", out.waiting);
    assert_eq!(h.fake().count("PullImage"), 2);
    let app = h.fake().container("app").expect("app");
    assert_eq!(app.state(), api::ContainerState::ContainerRunning);
    assert_eq!(
        app.image.map(|i| i.image).as_deref(),
        Some("registry.test/missing:1")
    );
}

#[tokio::test]
async fn sandbox_and_start_failures_are_retried() {
    let h = Harness::new().await;
    let p = pod("u-retry", "Always", &[], &["app"]);
    let mut backoff = Backoff::default();

    h.fake().fail_next(
        "RunPodSandbox",
        tonic::Status::unknown("cni plugin not initialized"),
    );
    let observed = h.runtime.pod_status("u-retry").await.expect("pod status");
    let err = h
        .step(&p, &observed, &mut backoff, &Default::default())
        .await
        .expect_err("sandbox creation fails");
    assert!(err.to_string().contains("RunPodSandbox"), "{err}");
    assert!(h.fake().sandboxes().is_empty());

    h.fake()
        .fail_next("StartContainer", tonic::Status::unknown("runc failed"));
    let out = h.sync(&p, &mut backoff).await;
    assert_eq!(out.waiting["app"].reason, "RunContainerError");
    let sandboxes = h.fake().sandboxes();
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(sandboxes[0].metadata.as_ref().map(|m| m.attempt), Some(0));

    // The container that never started is replaced by a new attempt (its name stays taken).
    let out = h.sync(&p, &mut backoff).await;
    assert!(out.waiting.is_empty(), "{:?}", out.waiting);
    let app = h.fake().container("app").expect("app");
    assert_eq!(app.metadata.as_ref().map(|m| m.attempt), Some(1));
    assert_eq!(app.state(), api::ContainerState::ContainerRunning);
}

#[tokio::test]
async fn dead_sandbox_is_replaced_and_containers_restart_in_it() {
    let h = Harness::new().await;
    let p = pod("u-sbdead", "Always", &["setup"], &["app"]);
    let mut backoff = Backoff::default();
    h.sync(&p, &mut backoff).await;
    assert!(h.fake().exit_container(&h.container_id("setup"), 0));
    h.sync(&p, &mut backoff).await;
    let old = h.fake().sandboxes()[0].id.clone();
    // The sandbox dies under the pod (e.g. its pause process was killed).
    h.cri.client.stop_pod_sandbox(&old).await.expect("stop");
    h.sync(&p, &mut backoff).await;

    let sandboxes = h.fake().sandboxes();
    let new = sandboxes
        .iter()
        .find(|s| s.state() == api::PodSandboxState::SandboxReady)
        .expect("a ready sandbox");
    assert_ne!(new.id, old);
    assert_eq!(new.metadata.as_ref().map(|m| m.attempt), Some(1));
    // Init containers run again first, as a new attempt.
    let setup = h.fake().container("setup").expect("setup");
    assert_eq!(setup.metadata.as_ref().map(|m| m.attempt), Some(1));
    assert_eq!(setup.state(), api::ContainerState::ContainerRunning);
    assert!(h.fake().exit_container(&setup.id, 0));
    h.sync(&p, &mut backoff).await;
    let app = h.fake().container("app").expect("app");
    assert_eq!(app.metadata.as_ref().map(|m| m.attempt), Some(1));
    assert_eq!(app.state(), api::ContainerState::ContainerRunning);
    let in_new: Vec<_> = h
        .cri
        .client
        .list_containers(Some(api::ContainerFilter {
            pod_sandbox_id: new.id.clone(),
            ..Default::default()
        }))
        .await
        .expect("list");
    assert_eq!(in_new.len(), 2);
}

/// The labels are how this kubelet (or upstream's, after a switch) finds its pods again.
#[tokio::test]
async fn runtime_objects_carry_pod_identity_labels() {
    let h = Harness::new().await;
    let p = pod("u-labels", "Always", &[], &["app"]);
    h.sync(&p, &mut Backoff::default()).await;
    let sb = &h.fake().sandboxes()[0];
    let want: BTreeMap<&str, &str> = BTreeMap::from([
        (super::labels::POD_UID, "u-labels"),
        (super::labels::POD_NAME, "web-u-labels"),
        (super::labels::POD_NAMESPACE, "default"),
    ]);
    for (k, v) in &want {
        assert_eq!(sb.labels.get(*k).map(String::as_str), Some(*v), "{k}");
    }
    let app = h.fake().container("app").expect("app");
    assert_eq!(
        app.labels
            .get(super::labels::CONTAINER_NAME)
            .map(String::as_str),
        Some("app")
    );
    assert_eq!(
        app.log_path,
        h.pod_log_dir(&p).join("app/0.log").to_string_lossy()
    );
}

/// Upstream reports a failed ImageStatus as ImageInspectError and, having pulled nothing,
/// does not back off: the next sync simply looks again.
#[tokio::test]
async fn image_inspect_failure_is_not_a_pull_failure() {
    let h = Harness::new().await;
    let p = pod("u-inspect", "Always", &[], &["app"]);
    let mut backoff = Backoff::default();
    h.fake().fail_next(
        "ImageStatus",
        tonic::Status::unavailable("snapshotter busy"),
    );
    let out = h.sync(&p, &mut backoff).await;
    let w = out.waiting.get("app").expect("app waits");
    assert_eq!(w.reason, "ImageInspectError");
    assert!(w.message.contains("snapshotter busy"), "{}", w.message);
    assert_eq!(h.fake().count("PullImage"), 0);

    let out = h.sync(&p, &mut backoff).await;
    assert!(out.waiting.is_empty(), "{:?}", out.waiting);
    assert!(running_in_fake(&h, "app"));
}

fn running_in_fake(h: &Harness, name: &str) -> bool {
    h.fake()
        .container(name)
        .is_some_and(|c| c.state() == api::ContainerState::ContainerRunning)
}

/// The executor against the CRI fake with sidecars: start order, status, completion and stop
/// order.
mod sidecars {
    use crate::runtime::backoff::Backoff;
    use crate::runtime::testing::{Harness, pod};

    fn with_sidecars(uid: &str, policy: &str) -> k8s_openapi::api::core::v1::Pod {
        let mut p = pod(uid, policy, &["s1", "s2"], &["app"]);
        for c in p.spec.as_mut().unwrap().init_containers.as_mut().unwrap() {
            c.restart_policy = Some("Always".into());
        }
        p
    }

    fn stop_calls(h: &Harness) -> Vec<String> {
        h.fake()
            .calls_of("StopContainer")
            .into_iter()
            .map(|c| c.subject)
            .collect()
    }

    #[tokio::test]
    async fn sidecars_start_first_run_beside_the_app_and_stop_after_it_in_reverse() {
        let h = Harness::new().await;
        let p = with_sidecars("u-sc", "Always");
        let mut backoff = Backoff::default();
        for _ in 0..4 {
            h.sync(&p, &mut backoff).await;
        }
        let created: Vec<String> = h
            .fake()
            .calls_of("CreateContainer")
            .into_iter()
            .map(|c| c.subject)
            .collect();
        assert_eq!(created, ["s1", "s2", "app"]);
        let status = h.status(&p, &Default::default()).await;
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let inits = status.init_container_statuses.clone().unwrap();
        assert!(inits.iter().all(|s| s.ready
            && s.started == Some(true)
            && s.state.as_ref().unwrap().running.is_some()));
        let cond = |t: &str| {
            status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == t)
                .unwrap()
                .status
                .clone()
        };
        assert_eq!(
            (cond("Initialized"), cond("Ready")),
            ("True".into(), "True".into())
        );

        // An exited sidecar is restarted at once the first time; being the newest container
        // now, it would also be the first stopped without the ordering.
        assert!(h.fake().exit_container(&h.container_id("s1"), 1));
        h.sync(&p, &mut backoff).await;
        let status = h.status(&p, &Default::default()).await;
        let s1 = &status.init_container_statuses.as_ref().unwrap()[0];
        assert_eq!(s1.restart_count, 1);
        assert!(s1.state.as_ref().unwrap().running.is_some());
        assert_eq!(status.phase.as_deref(), Some("Running"));

        let observed = h.runtime.pod_status("u-sc").await.unwrap();
        h.runtime
            .kill_pod(&p, &observed, crate::runtime::Grace::Pod(7))
            .await
            .unwrap();
        assert_eq!(stop_calls(&h), ["app", "s2", "s1"]);
    }

    #[tokio::test]
    async fn a_never_pod_completes_when_its_app_exits_and_its_sidecars_are_stopped() {
        let h = Harness::new().await;
        let p = with_sidecars("u-done", "Never");
        let mut backoff = Backoff::default();
        for _ in 0..4 {
            h.sync(&p, &mut backoff).await;
        }
        assert!(h.fake().exit_container(&h.container_id("app"), 0));
        let out = h.sync(&p, &mut backoff).await;
        assert!(out.finished);
        assert_eq!(stop_calls(&h), ["s2", "s1"]);
        assert_eq!(h.fake().count("StopPodSandbox"), 1);
        let status = h.status(&p, &out).await;
        // Stopped sidecars (killed by a signal) do not fail the pod.
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
        let out = h.sync(&p, &mut backoff).await;
        assert!(out.finished);
        assert_eq!(h.fake().count("CreateContainer"), 3, "nothing restarts");
    }
}
