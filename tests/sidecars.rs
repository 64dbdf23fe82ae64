//! Sidecar containers (init containers with `restartPolicy: Always`) on the real test bed,
//! through STATIC pods: the bed's v1.20.2 apiserver drops `restartPolicy` from init
//! containers, so only a manifest the kubelet reads itself keeps the field. The containers
//! log their starts and stops, with the host's uptime as clock, into a shared hostPath.
//!
//! A sidecar starts before the app container and keeps running beside it, is reported
//! Running/started in `initContainerStatuses` and gates the pod's readiness through its own
//! readiness probe, runs its postStart hook, is restarted (restartCount 1) when it exits, and
//! on removal of the manifest is stopped after the app container. A Never pod whose app
//! container exits 0 completes Succeeded with its sidecar stopped (its exit code after the
//! stop does not fail the pod).

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// `uptime` as the containers write it: the same clock in every container and on the host.
const NOW: &str = "$(cut -d\" \" -f1 /proc/uptime)";

fn manifest(name: &str, restart: &str, shared: &Path, sidecar: &str, app: &str) -> String {
    let shared = shared.display();
    static_pod(
        name,
        &format!(
            r#"  restartPolicy: {restart}
  terminationGracePeriodSeconds: 15
  volumes:
  - name: shared
    hostPath:
      path: {shared}
  initContainers:
  - name: proxy
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    restartPolicy: Always
    command: ["sh", "-c", {sidecar:?}]
    volumeMounts:
    - name: shared
      mountPath: /shared
    lifecycle:
      postStart:
        exec:
          command: ["sh", "-c", "echo proxy-poststart >> /shared/log"]
    readinessProbe:
      exec:
        command: ["test", "-f", "/shared/ready-go"]
      periodSeconds: 1
  containers:
  - name: app
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", {app:?}]
    volumeMounts:
    - name: shared
      mountPath: /shared
"#
        ),
    )
}

/// The time of the first `<event> <uptime>` line of the shared log.
fn logged(log: &str, event: &str) -> Option<f64> {
    log.lines().find_map(|l| {
        let (e, t) = l.split_once(' ')?;
        (e == event).then(|| t.trim().parse().ok())?
    })
}

fn condition(pod: &Value, type_: &str) -> String {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .map(|c| c["status"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

#[test]
fn sidecar_starts_first_restarts_and_stops_after_the_app() {
    let _serial = serial();
    let mut k = Kubelet::new("sidecars");
    k.start();
    let shared = k.dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let log_file = shared.join("log");
    let read_log = || std::fs::read_to_string(&log_file).unwrap_or_default();

    // The sidecar exits 1 once each time /shared/crash appears.
    let sidecar = format!(
        "trap 'echo proxy-term {NOW} >> /shared/log; exit 0' TERM; \
         echo proxy-start {NOW} >> /shared/log; \
         while true; do if [ -f /shared/crash ]; then rm /shared/crash; exit 1; fi; sleep 0.2; done"
    );
    // The app takes a second to stop: a sidecar stopped alongside would log first.
    let app = format!(
        "trap 'sleep 1; echo app-term {NOW} >> /shared/log; exit 0' TERM; \
         echo app-start {NOW} >> /shared/log; while true; do sleep 0.2; done"
    );
    k.write_manifest(
        "sc-web.yaml",
        &manifest("sc-web", "Always", &shared, &sidecar, &app),
    );
    let pod = k.wait_pod(
        "sc-web",
        "app and sidecar running",
        Duration::from_secs(90),
        |p| {
            !container_status(p, "app")["state"]["running"].is_null()
                && !init_status(p, "proxy")["state"]["running"].is_null()
        },
    );
    assert_eq!(phase(&pod), "Running", "{pod:#}");
    let log = read_log();
    let (side_start, app_start) = (logged(&log, "proxy-start"), logged(&log, "app-start"));
    assert!(
        side_start.is_some() && app_start.is_some() && side_start <= app_start,
        "sidecar must start first:\n{log}"
    );
    assert!(log.contains("proxy-poststart"), "postStart ran:\n{log}");
    let proxy = init_status(&pod, "proxy");
    let started_at = |s: &Value| {
        s["state"]["running"]["startedAt"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert!(started_at(proxy) <= started_at(container_status(&pod, "app")));
    assert_eq!(proxy["started"], true, "{pod:#}");
    assert_eq!(
        proxy["ready"], false,
        "readiness probe not passed yet: {pod:#}"
    );
    assert_eq!(condition(&pod, "Initialized"), "True", "{pod:#}");
    assert_eq!(condition(&pod, "Ready"), "False", "{pod:#}");

    // The sidecar's readiness probe passes: it and then the pod are ready.
    std::fs::write(shared.join("ready-go"), "").unwrap();
    let pod = k.wait_pod(
        "sc-web",
        "the sidecar and the pod ready",
        Duration::from_secs(30),
        |p| init_status(p, "proxy")["ready"] == true && condition(p, "Ready") == "True",
    );
    assert_eq!(condition(&pod, "ContainersReady"), "True");

    // The sidecar exits: restarted at once (a first restart has no backoff), the app untouched.
    std::fs::write(shared.join("crash"), "").unwrap();
    let pod = k.wait_pod(
        "sc-web",
        "the sidecar restarted",
        Duration::from_secs(60),
        |p| {
            let s = init_status(p, "proxy");
            s["restartCount"] == 1 && !s["state"]["running"].is_null()
        },
    );
    let proxy = init_status(&pod, "proxy");
    assert_eq!(proxy["lastState"]["terminated"]["exitCode"], 1, "{pod:#}");
    assert_eq!(container_status(&pod, "app")["restartCount"], 0);
    assert_eq!(phase(&pod), "Running");

    // Removal: the app container stops first, then the sidecar (which got SIGTERM, not a kill).
    k.remove_manifest("sc-web.yaml");
    wait_for(Duration::from_secs(60), "both containers to stop", || {
        let log = read_log();
        (logged(&log, "app-term").is_some() && logged(&log, "proxy-term").is_some()).then_some(())
    });
    let log = read_log();
    let (app_term, side_term) = (logged(&log, "app-term"), logged(&log, "proxy-term"));
    assert!(
        app_term < side_term,
        "the app stops before the sidecar:\n{log}"
    );
    k.cleanup();
}

#[test]
fn never_pod_with_a_running_sidecar_completes_when_its_app_exits() {
    let _serial = serial();
    let mut k = Kubelet::new("sidecars-done");
    k.start();
    let shared = k.dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("ready-go"), "").unwrap();

    // Exits 3 when told to stop: a sidecar's exit code after its stop does not fail the pod.
    let sidecar = format!(
        "trap 'echo proxy-term {NOW} >> /shared/log; exit 3' TERM; while true; do sleep 0.2; done"
    );
    let app = format!("sleep 3; echo app-done {NOW} >> /shared/log; exit 0");
    k.write_manifest(
        "sc-job.yaml",
        &manifest("sc-job", "Never", &shared, &sidecar, &app),
    );
    let pod = k.wait_pod(
        "sc-job",
        "the pod to complete",
        Duration::from_secs(90),
        |p| phase(p) == "Succeeded" || phase(p) == "Failed",
    );
    assert_eq!(phase(&pod), "Succeeded", "{pod:#}");
    let app = &container_status(&pod, "app")["state"]["terminated"];
    assert_eq!(app["exitCode"], 0, "{pod:#}");
    let proxy = &init_status(&pod, "proxy")["state"]["terminated"];
    assert_eq!(proxy["exitCode"], 3, "the sidecar was stopped: {pod:#}");
    let log = std::fs::read_to_string(shared.join("log")).unwrap_or_default();
    assert!(
        logged(&log, "app-done") < logged(&log, "proxy-term"),
        "stopped after the app finished:\n{log}"
    );
    assert_eq!(
        init_status(&pod, "proxy")["restartCount"],
        0,
        "not restarted"
    );
    k.cleanup();
}
