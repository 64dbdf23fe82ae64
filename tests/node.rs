//! The kubelet running static pods on the test bed's real containerd.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn running(pod: &Value, container: &str) -> bool {
    !container_status(pod, container)["state"]["running"].is_null()
}

#[test]
fn pod_runs_and_its_output_lands_in_its_log_file() {
    let _g = serial();
    let mut k = Kubelet::new("logs");
    k.write_manifest(
        "hello.yaml",
        &pod_yaml("hello", "Always", 2, "echo hello-from-krs; exec sleep 3600"),
    );
    k.start();
    let pod = k.wait_pod("hello", "running", Duration::from_secs(60), |p| {
        phase(p) == "Running" && running(p, "main")
    });
    assert_eq!(pod["metadata"]["namespace"], "default");
    assert_eq!(
        pod["metadata"]["annotations"]["kubernetes.io/config.source"],
        "file"
    );
    assert_eq!(pod["status"]["hostIP"], "127.0.0.1");
    assert!(
        pod["status"]["podIP"]
            .as_str()
            .is_some_and(|ip| !ip.is_empty()),
        "pod IP: {pod}"
    );
    let cs = container_status(&pod, "main");
    assert_eq!(cs["restartCount"], 0);
    assert!(
        cs["containerID"]
            .as_str()
            .unwrap()
            .starts_with("containerd://")
    );

    let log = k.pod_log_dir(&pod).join("main/0.log");
    let line = wait_for(Duration::from_secs(10), "log line", || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|t| t.contains("hello-from-krs"))
    });
    // CRI log format: <RFC3339Nano> <stream> <P|F> <content>
    let first = line.lines().next().unwrap();
    let parts: Vec<&str> = first.splitn(4, ' ').collect();
    assert_eq!(parts[1], "stdout", "{first}");
    assert_eq!(parts[2], "F");
    assert_eq!(parts[3], "hello-from-krs");

    // The pod's cgroup sits under our cgroup root (best-effort QoS).
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let v1 = format!(
        "/sys/fs/cgroup/memory{}/kubepods/besteffort/pod{uid}",
        k.cgroup_root
    );
    let v2 = format!(
        "/sys/fs/cgroup{}/kubepods/besteffort/pod{uid}",
        k.cgroup_root
    );
    assert!(
        std::path::Path::new(&v1).exists() || std::path::Path::new(&v2).exists(),
        "no pod cgroup at {v1} or {v2}"
    );

    // The pod-resources socket lists the pod and its container.
    let socket = k.root_dir.join("pod-resources/kubelet.sock");
    let listed = tokio::runtime::Runtime::new().unwrap().block_on(async {
        use kubelet_rs::testing::podresources::{
            ListPodResourcesRequest, pod_resources_lister_client::PodResourcesListerClient,
        };
        let channel = kubelet_rs::testing::connect_channel(
            &socket.display().to_string(),
            Duration::from_secs(5),
        )
        .await
        .expect("pod-resources socket");
        PodResourcesListerClient::new(channel)
            .list(ListPodResourcesRequest {})
            .await
            .expect("List")
            .into_inner()
    });
    let entry = listed
        .pod_resources
        .iter()
        .find(|p| p.name == pod["metadata"]["name"])
        .unwrap_or_else(|| panic!("pod missing from pod-resources: {listed:?}"));
    assert_eq!(entry.namespace, "default");
    assert_eq!(entry.containers.len(), 1);
    assert_eq!(entry.containers[0].name, "main");

    // Node allocatable: nothing is reserved here, so the pods' cgroup may use the whole
    // machine's memory and gets a cpu share for every core.
    let mem_total: i64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        .unwrap()
        * 1024;
    let cgroup_file = |v1: &str, v2: &str| {
        std::fs::read_to_string(format!("/sys/fs/cgroup/{v1}"))
            .or_else(|_| std::fs::read_to_string(format!("/sys/fs/cgroup/{v2}")))
            .map(|t| t.trim().to_string())
            .unwrap_or_else(|e| panic!("{v1} / {v2}: {e}"))
    };
    let root = &k.cgroup_root;
    let limit: i64 = cgroup_file(
        &format!("memory{root}/kubepods/memory.limit_in_bytes"),
        &format!("{}/kubepods/memory.max", root.trim_start_matches('/')),
    )
    .parse()
    .unwrap();
    assert!(
        (mem_total - limit).abs() < 4096,
        "kubepods memory limit {limit}, MemTotal {mem_total}"
    );
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    let shares = cgroup_file(
        &format!("cpu{root}/kubepods/cpu.shares"),
        &format!("{}/kubepods/cpu.weight", root.trim_start_matches('/')),
    );
    let expected_v1 = (cores * 1024).to_string();
    let expected_v2 = (1 + ((cores * 1024 - 2) * 9999) / 262142).to_string();
    assert!(
        shares == expected_v1 || shares == expected_v2,
        "kubepods cpu share {shares} for {cores} cores"
    );

    let (code, body) = http_get(k.healthz_port, "/healthz?verbose").unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("[+]syncloop ok"), "{body}");
    k.cleanup();
    assert!(!k.pod_log_dir(&pod).exists(), "pod log dir left behind");
    assert!(
        !std::path::Path::new(&v1).exists() && !std::path::Path::new(&v2).exists(),
        "pod cgroup left behind"
    );
}

#[test]
fn host_network_pod_runs_in_the_node_network() {
    let _g = serial();
    let mut k = Kubelet::new("hostnet");
    let manifest = pod_yaml("hostnet", "Always", 1, "exec sleep 3600")
        .replace("  restartPolicy", "  hostNetwork: true\n  restartPolicy");
    k.write_manifest("hostnet.yaml", &manifest);
    k.start();
    let pod = k.wait_pod("hostnet", "running", Duration::from_secs(60), |p| {
        running(p, "main")
    });
    assert_eq!(pod["status"]["podIP"], pod["status"]["hostIP"], "{pod}");
    k.cleanup();
}

#[test]
fn missing_image_is_reported_and_pulls_back_off() {
    let _g = serial();
    let mut k = Kubelet::new("pull");
    // The test bed points every registry at a closed local port, so this pull fails at once.
    let manifest = pod_yaml("nopull", "Always", 1, "true")
        .replace(BUSYBOX, "docker.io/library/krs-no-such-image:1");
    k.write_manifest("nopull.yaml", &manifest);
    k.start();
    let reason = |p: &Value| {
        container_status(p, "main")["state"]["waiting"]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let pod = k.wait_pod("nopull", "ErrImagePull", Duration::from_secs(30), |p| {
        reason(p) == "ErrImagePull"
    });
    assert_eq!(phase(&pod), "Pending");
    let msg = container_status(&pod, "main")["state"]["waiting"]["message"].clone();
    assert!(
        msg.as_str()
            .unwrap_or_default()
            .contains("krs-no-such-image"),
        "{msg}"
    );
    k.wait_pod("nopull", "ImagePullBackOff", Duration::from_secs(30), |p| {
        reason(p) == "ImagePullBackOff"
    });
    k.cleanup();
}

#[test]
fn volumes_and_termination_message() {
    let _g = serial();
    let mut k = Kubelet::new("volumes");
    let host_dir = k.dir.path().join("hostdata");
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: vols
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  volumes:
  - name: shared
    emptyDir: {{}}
  - name: host
    hostPath:
      path: {host}
      type: DirectoryOrCreate
  initContainers:
  - name: writer
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo from-init > /shared/note"]
    volumeMounts:
    - name: shared
      mountPath: /shared
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "cat /shared/note > /host/out/copied; echo bye > /dev/termination-log"]
    volumeMounts:
    - name: shared
      mountPath: /shared
      readOnly: true
    - name: host
      mountPath: /host/out
"#,
        host = host_dir.display()
    );
    k.write_manifest("vols.yaml", &manifest);
    k.start();
    let pod = k.wait_pod("vols", "Succeeded", Duration::from_secs(60), |p| {
        phase(p) == "Succeeded"
    });
    let t = &container_status(&pod, "main")["state"]["terminated"];
    assert_eq!(t["exitCode"], 0, "{pod}");
    assert_eq!(t["message"], "bye\n", "{pod}");
    let copied = std::fs::read_to_string(host_dir.join("copied")).expect("hostPath file");
    assert_eq!(copied, "from-init\n");
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let pod_dir = k.root_dir.join("pods").join(&uid);
    assert!(pod_dir.exists());
    k.cleanup();
    assert!(!pod_dir.exists(), "pod folder left behind");
    assert!(
        host_dir.join("copied").exists(),
        "hostPath data must survive the pod"
    );
}

#[test]
fn security_context_and_downward_env_are_applied() {
    let _g = serial();
    let mut k = Kubelet::new("secctx");
    let pod = |name: &str, user: &str| {
        static_pod(
            name,
            &format!(
                r#"  terminationGracePeriodSeconds: 1
  securityContext:
    runAsNonRoot: true{user}
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo uid=$(id -u) mem=$MEM; exec sleep 3600"]
    resources:
      limits:
        memory: 64Mi
    env:
    - name: MEM
      valueFrom:
        resourceFieldRef:
          resource: limits.memory
          divisor: 1Mi
"#
            ),
        )
    };
    k.write_manifest("rootimage.yaml", &pod("rootimage", ""));
    k.write_manifest("nobody.yaml", &pod("nobody", "\n    runAsUser: 65534"));
    k.start();
    let refused = k.wait_pod("rootimage", "refused", Duration::from_secs(30), |p| {
        container_status(p, "main")["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    });
    let msg = container_status(&refused, "main")["state"]["waiting"]["message"].clone();
    assert!(
        msg.as_str().unwrap_or_default().contains("runAsNonRoot"),
        "{msg}"
    );
    let ok = k.wait_pod("nobody", "running", Duration::from_secs(30), |p| {
        running(p, "main")
    });
    let log = k.pod_log_dir(&ok).join("main/0.log");
    wait_for(Duration::from_secs(10), "uid and env in the log", || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|t| t.contains("uid=65534 mem=64"))
    });
    k.cleanup();
}

#[test]
fn kubelet_manages_etc_hosts_with_host_aliases() {
    let _g = serial();
    let mut k = Kubelet::new("hosts");
    let manifest = pod_yaml("hosts", "Always", 1, "cat /etc/hosts; exec sleep 3600").replace(
        "  restartPolicy",
        "  hostAliases:\n  - ip: 1.2.3.4\n    hostnames: [foo.local, bar.local]\n  restartPolicy",
    );
    k.write_manifest("hosts.yaml", &manifest);
    k.start();
    let pod = k.wait_pod("hosts", "running", Duration::from_secs(60), |p| {
        running(p, "main")
    });
    let ip = pod["status"]["podIP"].as_str().unwrap().to_string();
    let log = k.pod_log_dir(&pod).join("main/0.log");
    let text = wait_for(Duration::from_secs(10), "hosts file in the log", || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|t| t.contains("HostAliases"))
    });
    assert!(text.contains("Kubernetes-managed hosts file."), "{text}");
    assert!(text.contains(&format!("{ip}\thosts-{NODE}")), "{text}");
    assert!(text.contains("1.2.3.4\tfoo.local\tbar.local"), "{text}");
    k.cleanup();
}

#[test]
fn crashing_container_restarts_with_growing_backoff() {
    let _g = serial();
    let mut k = Kubelet::new("crash");
    k.write_manifest(
        "crash.yaml",
        &pod_yaml("crash", "Always", 1, "echo boom; exit 2"),
    );
    k.start();
    // Record when each restartCount is first seen.
    let mut seen: Vec<(i64, Instant)> = Vec::new();
    let mut saw_backoff = false;
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline && seen.last().map(|s| s.0) < Some(3) {
        if let Some(p) = k.pod("crash") {
            let cs = container_status(&p, "main");
            if let Some(n) = cs["restartCount"].as_i64()
                && seen.last().map(|s| s.0) != Some(n)
            {
                seen.push((n, Instant::now()));
            }
            if cs["state"]["waiting"]["reason"] == "CrashLoopBackOff" {
                saw_backoff = true;
                assert_eq!(cs["lastState"]["terminated"]["exitCode"], 2, "{cs}");
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let at = |n: i64| {
        seen.iter()
            .find(|s| s.0 == n)
            .map(|s| s.1)
            .unwrap_or_else(|| {
                panic!(
                    "restartCount {n} never seen: {seen:?}\n{}",
                    tail(&k.log(), 40)
                )
            })
    };
    let gap1 = at(2) - at(1);
    let gap2 = at(3) - at(2);
    assert!(saw_backoff, "never reported CrashLoopBackOff");
    assert!(
        gap1 >= Duration::from_secs(8),
        "first backoff too short: {gap1:?}"
    );
    assert!(
        gap2 >= gap1 + Duration::from_secs(5),
        "backoff did not grow: {gap1:?} then {gap2:?}"
    );
    k.cleanup();
}

#[test]
fn restart_policy_never_leaves_container_exited_with_its_code() {
    let _g = serial();
    let mut k = Kubelet::new("never");
    k.write_manifest("never.yaml", &pod_yaml("never", "Never", 1, "exit 3"));
    k.start();
    let pod = k.wait_pod("never", "Failed", Duration::from_secs(60), |p| {
        phase(p) == "Failed"
    });
    let t = &container_status(&pod, "main")["state"]["terminated"];
    assert_eq!(t["exitCode"], 3, "{pod}");
    assert_eq!(t["reason"], "Error");
    std::thread::sleep(Duration::from_secs(3));
    let pod = k.pod("never").unwrap();
    assert_eq!(container_status(&pod, "main")["restartCount"], 0);
    assert_eq!(phase(&pod), "Failed");
    k.cleanup();
}

#[test]
fn init_containers_run_in_order_before_the_app() {
    let _g = serial();
    let mut k = Kubelet::new("init");
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: init
spec:
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: first
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "sleep 1; echo first"]
  - name: second
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo second"]
  containers:
  - name: app
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exec sleep 3600"]
"#
    );
    k.write_manifest("init.json.yaml", &manifest);
    k.start();
    let pod = k.wait_pod("init", "app running", Duration::from_secs(60), |p| {
        running(p, "app")
    });
    let time = |v: &Value| {
        jiff::Timestamp::from_str_ts(
            v.as_str()
                .unwrap_or_else(|| panic!("missing time in {pod}")),
        )
    };
    let first = &init_status(&pod, "first")["state"]["terminated"];
    let second = &init_status(&pod, "second")["state"]["terminated"];
    assert_eq!(first["exitCode"], 0);
    assert_eq!(second["exitCode"], 0);
    assert!(
        time(&first["finishedAt"]) <= time(&second["startedAt"]),
        "{pod}"
    );
    let app_started = time(&container_status(&pod, "app")["state"]["running"]["startedAt"]);
    assert!(time(&second["finishedAt"]) <= app_started, "{pod}");
    let initialized = pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Initialized")
        .unwrap()
        .clone();
    assert_eq!(initialized["status"], "True");
    k.cleanup();
}

trait FromStrTs {
    fn from_str_ts(s: &str) -> jiff::Timestamp;
}
impl FromStrTs for jiff::Timestamp {
    fn from_str_ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap_or_else(|e| panic!("bad time {s}: {e}"))
    }
}

#[test]
fn removed_manifest_stops_the_pod_within_its_grace_period() {
    let _g = serial();
    let mut k = Kubelet::new("remove");
    // sh as PID 1 ignores SIGTERM, so only the grace period's SIGKILL ends it.
    k.write_manifest(
        "stubborn.yaml",
        &pod_yaml(
            "stubborn",
            "Always",
            3,
            "trap '' TERM; while true; do sleep 1; done",
        ),
    );
    k.start();
    k.wait_pod("stubborn", "running", Duration::from_secs(60), |p| {
        running(p, "main")
    });
    let before = running_tasks().len();
    assert!(
        before >= 2,
        "expected sandbox and container tasks, saw {before}"
    );
    let t0 = Instant::now();
    k.remove_manifest("stubborn.yaml");
    wait_for(Duration::from_secs(20), "pod gone from the runtime", || {
        (runtime_pod_count() == 0).then_some(())
    });
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(2),
        "grace period not honoured: gone after {took:?}"
    );
    // Grace (3 s) + the file watcher's delay + teardown.
    assert!(took <= Duration::from_secs(3 + 5), "teardown took {took:?}");
    wait_for(Duration::from_secs(5), "pod gone from /pods", || {
        k.pod("stubborn").is_none().then_some(())
    });
    k.cleanup();
}

#[test]
fn edited_manifest_replaces_the_pod_only_after_the_old_one_is_gone() {
    let _g = serial();
    let mut k = Kubelet::new("edit");
    let script = "trap '' TERM; while true; do sleep 1; done";
    k.write_manifest("edit.yaml", &pod_yaml("edit", "Always", 3, script));
    k.start();
    let old = k.wait_pod("edit", "running", Duration::from_secs(60), |p| {
        running(p, "main")
    });
    let old_uid = old["metadata"]["uid"].clone();
    k.write_manifest(
        "edit.yaml",
        &pod_yaml("edit", "Always", 3, &format!("echo v2; {script}")),
    );
    let full = format!("edit-{NODE}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut replaced = None;
    while Instant::now() < deadline {
        let same_name: Vec<Value> = k
            .pods()
            .into_iter()
            .filter(|p| p["metadata"]["name"] == full.as_str())
            .collect();
        assert!(
            same_name.len() <= 1,
            "old and new pod ran side by side: {same_name:?}"
        );
        if let Some(p) = same_name.first()
            && p["metadata"]["uid"] != old_uid
            && running(p, "main")
        {
            replaced = Some(p.clone());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let new = replaced.unwrap_or_else(|| panic!("pod never replaced\n{}", tail(&k.log(), 40)));
    assert_eq!(container_status(&new, "main")["restartCount"], 0);
    k.cleanup();
}

#[test]
fn kubelet_restart_leaves_running_containers_untouched() {
    let _g = serial();
    let mut k = Kubelet::new("restart");
    k.write_manifest(
        "steady.yaml",
        &pod_yaml("steady", "Always", 1, "exec sleep 3600"),
    );
    k.start();
    let pod = k.wait_pod("steady", "running", Duration::from_secs(60), |p| {
        running(p, "main")
    });
    let id = container_status(&pod, "main")["containerID"].clone();
    let started = container_status(&pod, "main")["state"]["running"]["startedAt"].clone();
    let tasks_before = running_tasks();
    k.stop();
    assert_eq!(
        running_tasks(),
        tasks_before,
        "stopping the kubelet touched containers"
    );
    k.start();
    let pod = k.wait_pod(
        "steady",
        "running after restart",
        Duration::from_secs(30),
        |p| running(p, "main"),
    );
    std::thread::sleep(Duration::from_secs(3));
    let pod2 = k.pod("steady").unwrap_or(pod);
    let cs = container_status(&pod2, "main");
    // This failed once in CI (a new container ID) and never since; the log says why next time.
    let log = || tail(&k.log(), 120);
    assert_eq!(
        cs["containerID"],
        id,
        "status now: {cs}\nkubelet log tail:\n{}",
        log()
    );
    assert_eq!(cs["state"]["running"]["startedAt"], started);
    assert_eq!(cs["restartCount"], 0);
    assert_eq!(running_tasks(), tasks_before, "{}", log());
    k.cleanup();
}

#[test]
fn malformed_manifest_is_reported_and_other_pods_keep_running() {
    let _g = serial();
    let mut k = Kubelet::new("malformed");
    k.write_manifest(
        "good.yaml",
        &pod_yaml("good", "Always", 1, "exec sleep 3600"),
    );
    k.write_manifest(
        "broken.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: broken\nspec:\n  containers:\n  - name: c\n",
    );
    k.write_manifest("garbage.yaml", "this: [is not: a pod");
    k.start();
    k.wait_pod("good", "running", Duration::from_secs(60), |p| {
        running(p, "main")
    });
    let error_about = |file: &str| {
        k.log()
            .lines()
            .find(|l| l.starts_with('E') && l.contains(file))
            .map(str::to_string)
    };
    wait_for(Duration::from_secs(10), "errors naming the files", || {
        error_about("garbage.yaml")?;
        error_about("broken.yaml")
    });
    let broken_line = error_about("broken.yaml").unwrap();
    assert!(
        broken_line.contains("image"),
        "error does not name the field: {broken_line}"
    );
    assert!(k.pod("broken").is_none());
    // A later good manifest is still picked up.
    k.write_manifest(
        "late.yaml",
        &pod_yaml("late", "Always", 1, "exec sleep 3600"),
    );
    k.wait_pod("late", "running", Duration::from_secs(60), |p| {
        running(p, "main")
    });
    assert!(running(&k.pod("good").unwrap(), "main"));
    k.cleanup();
}
