//! Harness for integration tests: the real kubelet binary against the test bed's containerd.
//!
//! Kubelets sharing one containerd kill each other's pods, so tests in a binary run one at a
//! time (`serial()`), and each test removes its pods before it ends.

#![allow(dead_code)]

pub mod cgroup;
pub mod storage;
pub mod systemd_node;
pub mod upstream;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BUSYBOX: &str = "docker.io/library/busybox:1.36";
pub const NODE: &str = "krs-it-node";

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether this host mounts cgroup v2 alone at /sys/fs/cgroup (the VM bed), not v1 (this
/// machine: hybrid, v1 with a cgroup2 mount beside it).
pub fn cgroup_v2_host() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains(" /sys/fs/cgroup ") && l.contains(" - cgroup2 "))
}

/// Starts (or finds) the test bed's containerd once per test binary and returns its socket.
pub fn containerd_socket() -> String {
    static SOCK: OnceLock<String> = OnceLock::new();
    SOCK.get_or_init(|| {
        if let Ok(sock) = std::env::var("KRS_CONTAINERD_SOCK")
            && Path::new(&sock).exists()
        {
            return sock;
        }
        for script in ["containerd.sh start", "images.sh"] {
            let mut words = script.split(' ');
            let file = repo_root().join("hack/testbed").join(words.next().unwrap());
            let status = Command::new("bash")
                .arg(&file)
                .args(words)
                .status()
                .unwrap_or_else(|e| panic!("running {}: {e}", file.display()));
            assert!(status.success(), "{} failed: {status}", file.display());
        }
        let out = Command::new("bash")
            .arg(repo_root().join("hack/testbed/containerd.sh"))
            .arg("env")
            .output()
            .expect("containerd.sh env");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| {
                l.trim_start_matches("export ")
                    .strip_prefix("KRS_CONTAINERD_SOCK=")
                    .map(|v| v.trim_matches(['"', '\'']).to_string())
            })
            .expect("containerd.sh env printed no KRS_CONTAINERD_SOCK")
    })
    .clone()
}

pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A port free now, taken below the kernel's ephemeral range: a port the kernel handed out
/// was once taken by an outgoing connection before the kubelet could bind it ("Address already
/// in use" at start, in CI).
pub fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let ephemeral_low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    const LOW: u32 = 12000;
    let span = ephemeral_low.saturating_sub(LOW).max(1);
    // Spread over the range by process, so test binaries run one after another differ.
    let start = std::process::id().wrapping_mul(7919);
    for _ in 0..span {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Ok(port) = u16::try_from(LOW + start.wrapping_add(n) % span) else {
            continue;
        };
        if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below {ephemeral_low}")
}

/// A kubelet process with its own folders; killed when dropped.
pub struct Kubelet {
    pub dir: tempfile::TempDir,
    pub manifests: PathBuf,
    pub root_dir: PathBuf,
    pub cgroup_root: String,
    pub healthz_port: u16,
    pub ro_port: u16,
    /// The authenticated API port (upstream's 10250).
    pub port: u16,
    pub log_path: PathBuf,
    /// `podLogsDir` of this kubelet. Its own, because the container garbage collector
    /// removes the log folders of pods it does not know (another test's, another run's).
    pub pod_logs_dir: PathBuf,
    /// `--config-dir`: drop-ins here apply over any `--config` a test gives; the harness's
    /// own is `00-test-bed.conf`, later names win.
    pub drop_ins: PathBuf,
    /// A command the kubelet runs under (e.g. entering a systemd node's namespaces).
    pub wrapper: Vec<String>,
    /// The CRI socket, when not the test bed's shared containerd.
    pub runtime_sock: Option<String>,
    /// Extra environment for the kubelet process.
    pub envs: Vec<(String, String)>,
    child: Option<Child>,
    runs: u32,
}

impl Kubelet {
    pub fn new(test: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("krs-it-{test}-"))
            .tempdir()
            .expect("tempdir");
        let manifests = dir.path().join("manifests");
        let root_dir = dir.path().join("root");
        std::fs::create_dir_all(&manifests).unwrap();
        let pod_logs_dir = dir.path().join("pod-logs");
        let drop_ins = dir.path().join("config.d");
        std::fs::create_dir_all(&drop_ins).unwrap();
        // The image collector is off (as upstream's at 100%) and the disk thresholds are the
        // test bed's (e2e/run.sh's): this machine's disk is often fuller than the default 85%,
        // so a collecting kubelet would remove the bed's images (busybox) whenever no pod of
        // the moment uses them, and `nodefs.available<10%` would put every node under disk
        // pressure. tests/gc.rs turns the collector on; tests/eviction.rs sets its thresholds
        // with flags, which win over drop-ins.
        std::fs::write(
            drop_ins.join("00-test-bed.conf"),
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 podLogsDir: {}\nimageGCHighThresholdPercent: 100\n\
                 evictionHard:\n  memory.available: 100Mi\n  nodefs.available: \"1%\"\n  \
                 imagefs.available: \"1%\"\n",
                pod_logs_dir.display()
            ),
        )
        .unwrap();
        Kubelet {
            log_path: dir.path().join("kubelet.log"),
            pod_logs_dir,
            drop_ins,
            manifests,
            root_dir,
            // Two test runs on one machine need separate cgroup roots (each kubelet removes pod
            // cgroups it does not know), as they need separate containerds.
            cgroup_root: std::env::var("KRS_IT_CGROUP_ROOT").unwrap_or_else(|_| "/krs-it".into()),
            healthz_port: free_port(),
            ro_port: free_port(),
            port: free_port(),
            dir,
            wrapper: Vec::new(),
            runtime_sock: None,
            envs: Vec::new(),
            child: None,
            runs: 0,
        }
    }

    pub fn start(&mut self) {
        self.start_with(&[]);
    }

    pub fn start_with(&mut self, extra: &[&str]) {
        self.spawn_with(extra);
        wait_for(Duration::from_secs(30), "kubelet healthz", || {
            self.assert_alive();
            http_get(self.healthz_port, "/healthz")
                .filter(|(code, body)| *code == 200 && body == "ok")
        });
    }

    /// Starts the kubelet without waiting for healthz, which a kubelet still in TLS bootstrap
    /// does not serve yet.
    pub fn spawn_with(&mut self, extra: &[&str]) {
        assert!(self.child.is_none(), "kubelet already running");
        self.runs += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap();
        let sock = self.runtime_sock.clone().unwrap_or_else(containerd_socket);
        let kubelet = env!("CARGO_BIN_EXE_kubelet");
        let mut cmd = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(kubelet);
                c
            }
            None => Command::new(kubelet),
        };
        let child = cmd
            .args([
                &format!("--pod-manifest-path={}", self.manifests.display()),
                &format!("--root-dir={}", self.root_dir.display()),
                &format!("--container-runtime-endpoint=unix://{sock}"),
                &format!("--cgroup-root={}", self.cgroup_root),
                &format!("--hostname-override={NODE}"),
                "--node-ip=127.0.0.1",
                &format!("--healthz-port={}", self.healthz_port),
                &format!("--read-only-port={}", self.ro_port),
                &format!("--port={}", self.port),
                // The self-signed serving pair lands here rather than in /var/lib/kubelet/pki.
                &format!("--cert-dir={}", self.dir.path().join("pki").display()),
                // Drop-ins apply over any --config a test adds (see `pod_logs_dir`).
                &format!(
                    "--config-dir={}",
                    self.dir.path().join("config.d").display()
                ),
                "--file-check-frequency=2s",
                "--fail-swap-on=false",
                "--v=3",
            ])
            .args(extra)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn kubelet");
        self.child = Some(child);
    }

    pub fn assert_alive(&mut self) {
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            panic!("kubelet exited early with {status}; log:\n{}", self.log());
        }
    }

    /// Waits up to `timeout` for a kubelet that is meant to refuse to start; its exit status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut()?.try_wait().ok().flatten() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// The kubelet's own pid: the child, or the wrapper's child (nsenter does not pass
    /// signals on).
    pub fn pid(&self) -> Option<u32> {
        let id = self.child.as_ref()?.id();
        if self.wrapper.is_empty() {
            return Some(id);
        }
        std::fs::read_to_string(format!("/proc/{id}/task/{id}/children"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// SIGTERM, as systemd would; the kubelet must leave pods running.
    pub fn stop(&mut self) {
        let pid = self.pid();
        if let Some(mut child) = self.child.take() {
            let pid = pid.unwrap_or(child.id());
            let _ = Command::new("kill")
                .args(["-s", "TERM", &pid.to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = Command::new("kill")
                .args(["-s", "KILL", &pid.to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL, a crash: none of the kubelet's own shutdown runs.
    pub fn kill(&mut self) {
        let pid = self.pid();
        if let Some(mut child) = self.child.take() {
            let pid = pid.unwrap_or(child.id());
            let _ = Command::new("kill")
                .args(["-s", "KILL", &pid.to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn write_manifest(&self, file: &str, body: &str) {
        // Write then rename, so the watcher never sees half a file.
        let tmp = self.dir.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, self.manifests.join(file)).unwrap();
    }

    /// The log folder of a pod (`<podLogsDir>/<namespace>_<name>_<uid>`).
    pub fn pod_log_dir(&self, pod: &Value) -> PathBuf {
        let m = &pod["metadata"];
        let get = |k: &str| m[k].as_str().unwrap_or_default().to_string();
        self.pod_logs_dir.join(format!(
            "{}_{}_{}",
            get("namespace"),
            get("name"),
            get("uid")
        ))
    }

    pub fn remove_manifest(&self, file: &str) {
        std::fs::remove_file(self.manifests.join(file)).unwrap();
    }

    /// The pods the kubelet reports on its read-only port.
    pub fn pods(&self) -> Vec<Value> {
        let Some((200, body)) = http_get(self.ro_port, "/pods") else {
            return vec![];
        };
        let list: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        list["items"].as_array().cloned().unwrap_or_default()
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        let full = format!("{name}-{NODE}");
        self.pods()
            .into_iter()
            .find(|p| p["metadata"]["name"] == full.as_str())
    }

    pub fn wait_pod(
        &mut self,
        name: &str,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut last = None;
        let found = wait_for_opt(timeout, || {
            self.assert_alive();
            let p = self.pod(name);
            let hit = p.as_ref().filter(|p| ok(p)).cloned();
            last = p;
            hit
        });
        found.unwrap_or_else(|| {
            panic!(
                "timed out waiting for pod {name}: {what}\nlast status: {}\nkubelet log tail:\n{}",
                serde_json::to_string_pretty(&last).unwrap_or_default(),
                tail(&self.log(), 60)
            )
        })
    }

    /// Removes every manifest and waits until the runtime holds none of this test's pods.
    pub fn cleanup(&mut self) {
        if self.child.is_none() {
            self.start();
        }
        for entry in std::fs::read_dir(&self.manifests).unwrap().flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        let gone = wait_for_opt(Duration::from_secs(60), || {
            let n = runtime_pod_count();
            (n == 0).then_some(())
        });
        if gone.is_none() {
            eprintln!(
                "pods still present after cleanup; log tail:\n{}",
                tail(&self.log(), 40)
            );
        }
        self.stop();
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop();
        keep_log_of_failure(&self.log_path);
        unmount_below(self.dir.path());
    }
}

/// Lazily unmounts what is still mounted below `dir` (the volumes of pods the stopped kubelet
/// still had), deepest first, so that the temporary folder can go and no mount outlives the
/// test.
fn unmount_below(dir: &Path) {
    let prefix = format!("{}/", dir.display());
    let mut points: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|mp| mp.starts_with(&prefix))
        .map(String::from)
        .collect();
    points.sort_by_key(|mp| std::cmp::Reverse(mp.len()));
    for mp in points {
        let _ = rustix::mount::unmount(mp.as_str(), rustix::mount::UnmountFlags::DETACH);
    }
}

/// The temporary folder goes with a failed test; with `KRS_IT_KEEP_LOGS=<dir>` the whole
/// kubelet log is copied there first (the panic message holds only its tail).
fn keep_log_of_failure(log: &Path) {
    let Some(dir) = std::env::var_os("KRS_IT_KEEP_LOGS") else {
        return;
    };
    if !std::thread::panicking() {
        return;
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .replace("::", "-");
    let dest = Path::new(&dir).join(format!("{test}-{}.log", std::process::id()));
    let copied = std::fs::create_dir_all(&dir).and_then(|()| std::fs::copy(log, &dest));
    match copied {
        Ok(_) => eprintln!("kubelet log kept: {}", dest.display()),
        Err(e) => eprintln!("kubelet log not kept in {}: {e}", dest.display()),
    }
}

pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub fn wait_for_opt<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn wait_for<T>(timeout: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_for_opt(timeout, f).unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

/// A minimal HTTP/1.0 GET against localhost, returning status and body.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// An HTTPS request to 127.0.0.1:`port` with curl (`-k` unless `extra` names a CA), returning
/// status and body; `extra` adds curl arguments (client certificate, headers, method).
pub fn https_get(port: u16, path: &str, extra: &[&str]) -> Option<(u16, String)> {
    const MARK: &str = "\n__krs_status__";
    let trusts_ca = extra.contains(&"--cacert");
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-w",
            &format!("{MARK}%{{http_code}}"),
        ])
        .args(if trusts_ca { &[][..] } else { &["-k"][..] })
        .args(extra)
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once(MARK)?;
    let code: u16 = code.trim().parse().ok()?;
    (code != 0).then(|| (code, body.to_string()))
}

/// Pod sandboxes in the test containerd, via its own CLI so the check does not trust our client.
pub fn runtime_pod_count() -> usize {
    let sock = containerd_socket();
    let out = Command::new("ctr")
        .args(["--address", &sock, "-n", "k8s.io", "containers", "ls", "-q"])
        .output()
        .expect("ctr");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// Container IDs (running tasks) in the test containerd.
pub fn running_tasks() -> Vec<String> {
    let sock = containerd_socket();
    let out = Command::new("ctr")
        .args(["--address", &sock, "-n", "k8s.io", "tasks", "ls"])
        .output()
        .expect("ctr");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter(|l| l.contains("RUNNING"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

pub fn container_status<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

pub fn init_status<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["status"]["initContainerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

pub fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

/// A busybox pod manifest running `script` in one container.
pub fn pod_yaml(name: &str, restart: &str, grace: u32, script: &str) -> String {
    static_pod(
        name,
        &format!(
            r#"  restartPolicy: {restart}
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", {script:?}]
"#
        ),
    )
}

/// The test control plane (hack/cluster/up.sh), started once per test binary; its env.sh
/// exports as a map.
pub fn cluster_env() -> std::collections::HashMap<String, String> {
    static ENV: OnceLock<std::collections::HashMap<String, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        let up = repo_root().join("hack/cluster/up.sh");
        let status = Command::new("bash").arg(&up).status().expect("run up.sh");
        assert!(status.success(), "{} failed: {status}", up.display());
        let out = Command::new("bash")
            .arg(repo_root().join("hack/cluster/env.sh"))
            .output()
            .expect("env.sh");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim_start_matches("export ").split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches(['"', '\'']).to_string()))
            .collect()
    })
    .clone()
}

/// A kubeconfig for `node` (client cert CN=system:node:<node>, O=system:nodes).
pub fn node_kubeconfig(node: &str, out: &Path) {
    let env = cluster_env();
    let name = env
        .get("KRS_CLUSTER_NAME")
        .cloned()
        .unwrap_or_else(|| "krs".into());
    let status = Command::new("bash")
        .arg(repo_root().join("hack/cluster/kubelet-kubeconfig.sh"))
        .arg(&name)
        .arg(node)
        .arg(out)
        .status()
        .expect("kubelet-kubeconfig.sh");
    assert!(status.success(), "kubelet-kubeconfig.sh failed");
}

impl Kubelet {
    /// A kubelet for `test`, started as `node` of the test control plane with no extra flags.
    pub fn started_as_node(test: &str, node: &str) -> Self {
        let mut k = Kubelet::new(test);
        k.start_as_node(node, &[]);
        k
    }

    /// Starts the kubelet as `node` of the test control plane, with a node client certificate
    /// (no TLS bootstrap) and the node IP the API server reaches it on, plus `extra` flags.
    pub fn start_as_node(&mut self, node: &str, extra: &[&str]) {
        let env = cluster_env();
        let kubeconfig = self.dir.path().join("kubelet.conf");
        node_kubeconfig(node, &kubeconfig);
        let node_ip = env
            .get("KRS_NODE_IP")
            .cloned()
            .unwrap_or_else(|| "127.0.0.1".into());
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--node-ip={node_ip}"),
            format!("--hostname-override={node}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.start_with(&refs);
    }
}

/// The flags of a kubeadm node: client certificates from the cluster CA, bearer tokens by
/// TokenReview, authorization by SubjectAccessReview, no anonymous access.
pub fn webhook_auth_flags() -> Vec<String> {
    let env = cluster_env();
    let ca = env
        .get("KRS_CLUSTER_CA")
        .expect("KRS_CLUSTER_CA from env.sh");
    vec![
        format!("--client-ca-file={ca}"),
        "--authentication-token-webhook=true".into(),
        "--authorization-mode=Webhook".into(),
        "--anonymous-auth=false".into(),
    ]
}

pub async fn admin_client() -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let env = cluster_env();
    let path = env.get("KUBECONFIG").expect("KUBECONFIG from env.sh");
    let kc = kube::config::Kubeconfig::read_from(path).expect("admin kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("admin config");
    kube::Client::try_from(cfg).expect("admin client")
}

/// kubectl against the test control plane as its admin, in the default namespace.
pub fn kubectl(args: &[&str]) -> Command {
    let env = cluster_env();
    let mut cmd = Command::new("kubectl");
    cmd.arg(format!("--kubeconfig={}", env["KUBECONFIG"]))
        .arg("--request-timeout=30s")
        .arg("--namespace=default")
        .args(args);
    cmd
}

/// A runtime for a test that drives API clients: two workers, so the blocking helpers in the
/// test never stall the client's own tasks.
pub fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs an async test body alone (`serial()`) on a runtime of its own.
pub fn run_serial(body: impl std::future::Future<Output = ()>) {
    let _guard = serial();
    multi_thread_runtime().block_on(body);
}

pub async fn wait_async<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until the API server shows pod `name` in `phase`; returns its status.
pub async fn wait_phase(
    pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
    phase: &str,
    timeout: Duration,
) -> k8s_openapi::api::core::v1::PodStatus {
    wait_async(timeout, &format!("pod {name} {phase}"), || async {
        let status = pods.get(name).await.ok()?.status?;
        (status.phase.as_deref() == Some(phase)).then_some(status)
    })
    .await
}

/// Creates `pod` through the API server; returns the UID it was given.
pub async fn create_pod(
    pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> String {
    let created = pods
        .create(&kube::api::PostParams::default(), pod)
        .await
        .unwrap_or_else(|e| panic!("create pod {:?}: {e}", pod.metadata.name));
    created.metadata.uid.expect("a created pod has a UID")
}

/// Deletes these pods at once (grace 0); one that is not there is no error.
pub async fn delete_now(pods: &kube::Api<k8s_openapi::api::core::v1::Pod>, names: &[&str]) {
    let now = kube::api::DeleteParams::default().grace_period(0);
    for name in names {
        let _ = pods.delete(name, &now).await;
    }
}

/// The admin's client and the default namespace's pods, without the `stale` pods a run
/// before may have left.
pub async fn default_pods(
    stale: &[&str],
) -> (kube::Client, kube::Api<k8s_openapi::api::core::v1::Pod>) {
    let client = admin_client().await;
    let pods = kube::Api::namespaced(client.clone(), "default");
    delete_now(&pods, stale).await;
    (client, pods)
}

/// An API pod bound to `node`: one busybox container `main` that sleeps an hour, stopped with
/// a 1 s grace. A test adds what its scenario needs before [`api_pod`].
pub fn bound_sleeper(name: &str, node: &str) -> Value {
    serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
            }],
        },
    })
}

/// A pod manifest as the API type.
pub fn api_pod(manifest: Value) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(manifest).expect("a valid pod manifest")
}

/// The status of an API pod's first container, once the kubelet reported one.
pub fn first_status(
    p: &k8s_openapi::api::core::v1::Pod,
) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    p.status.as_ref()?.container_statuses.as_ref()?.first()
}

pub fn first_state(
    p: &k8s_openapi::api::core::v1::Pod,
) -> Option<&k8s_openapi::api::core::v1::ContainerState> {
    first_status(p)?.state.as_ref()
}

/// The container ID of an API pod's first container, while it runs.
pub fn running_container_id(p: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let status = first_status(p)?;
    status.state.as_ref()?.running.as_ref()?;
    status.container_id.clone()
}

/// Why an API pod's first container waits, if it does.
pub fn waiting_reason(p: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    first_state(p)?.waiting.as_ref()?.reason.clone()
}

/// Whether an API pod's first container runs.
pub fn first_running(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    first_state(p).is_some_and(|s| s.running.is_some())
}

/// A static pod manifest named `name`; `spec` is the spec's fields, indented by two spaces.
pub fn static_pod(name: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{spec}")
}
