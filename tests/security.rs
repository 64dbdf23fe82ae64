//! Pod and container security settings on the real bed (containerd 1.6 + runc).
//!
//! Paths: `security_contexts_reach_the_process` and `security_admission_of_static_pods` use
//! static pod files (the kubelet reads them itself, so fields the v1.20 API server does not
//! know, like `appArmorProfile`, `supplementalGroupsPolicy` and `hostUsers`, arrive intact);
//! `sysctls_and_seccomp_annotations_through_the_api` uses API pods on the test control plane.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::Value;

/// What the container printed, once `done` appears in its log.
fn output(k: &Kubelet, pod: &Value, container: &str) -> String {
    let log = k.pod_log_dir(pod).join(format!("{container}/0.log"));
    log_until_done(&log)
}

fn log_until_done(log: &Path) -> String {
    let text = wait_for(Duration::from_secs(30), "container output", || {
        std::fs::read_to_string(log)
            .ok()
            .filter(|t| t.contains("done"))
    });
    // CRI log lines: <time> <stream> <tag> <content>
    text.lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The value after `key` in a `key:\tvalue` line of /proc/self/status output.
fn status_field<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim_start_matches(':').trim())
        .unwrap_or_else(|| panic!("no {key} in:\n{out}"))
}

fn running(p: &Value) -> bool {
    phase(p) == "Running"
}

fn manifest(name: &str, pod_extra: &str, containers: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{pod_extra}spec:\n  \
         terminationGracePeriodSeconds: 1\n  restartPolicy: Never\n{containers}"
    )
}

/// One busybox container `main` running `script` then printing `done`, with extra
/// container-level lines (indented by four).
fn one(script: &str, container_extra: &str) -> String {
    format!(
        "  containers:\n  - name: main\n    image: {BUSYBOX}\n    imagePullPolicy: IfNotPresent\n    \
         command: [\"sh\", \"-c\", {:?}]\n{container_extra}",
        format!("{script}; echo done; sleep 3600")
    )
}

const STATUS: &str = "grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status";

#[test]
fn security_contexts_reach_the_process() {
    let _guard = serial();
    let mut k = Kubelet::new("sec-contexts");
    let profiles = k.root_dir.join("seccomp/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("deny-mkdir.json"),
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    k.start();

    // seccompProfile: RuntimeDefault on the container.
    k.write_manifest(
        "rd.yaml",
        &manifest(
            "sec-rd",
            "",
            &one(
                STATUS,
                "    securityContext:\n      seccompProfile:\n        type: RuntimeDefault\n",
            ),
        ),
    );
    // The pod says RuntimeDefault, the container Unconfined: the container wins.
    k.write_manifest(
        "unconfined.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sec-unconfined\nspec:\n  \
             terminationGracePeriodSeconds: 1\n  restartPolicy: Never\n  securityContext:\n    \
             seccompProfile:\n      type: RuntimeDefault\n{}",
            one(
                STATUS,
                "    securityContext:\n      seccompProfile:\n        type: Unconfined\n"
            )
        ),
    );
    // A Localhost profile under <root-dir>/seccomp that denies mkdir.
    k.write_manifest(
        "local.yaml",
        &manifest(
            "sec-local",
            "",
            &one(
                "mkdir /tmp/x; echo mkdir-rc=$?",
                "    securityContext:\n      seccompProfile:\n        type: Localhost\n        \
                 localhostProfile: profiles/deny-mkdir.json\n",
            ),
        ),
    );
    // A Localhost profile that is not there.
    k.write_manifest(
        "missing.yaml",
        &manifest(
            "sec-missing",
            "",
            &one(
                "true",
                "    securityContext:\n      seccompProfile:\n        type: Localhost\n        \
                 localhostProfile: profiles/missing.json\n",
            ),
        ),
    );
    // The old annotations: kubelets ignore them since v1.25, so this runs unconfined.
    k.write_manifest(
        "annotated.yaml",
        &manifest(
            "sec-annotated",
            "  annotations:\n    seccomp.security.alpha.kubernetes.io/pod: runtime/default\n    \
             container.seccomp.security.alpha.kubernetes.io/main: runtime/default\n",
            &one(STATUS, ""),
        ),
    );
    // Capabilities and no_new_privs (as root), then user, groups, read-only root and the
    // masked /proc paths (as 1000).
    k.write_manifest(
        "ids.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sec-ids\nspec:\n  \
             terminationGracePeriodSeconds: 1\n  restartPolicy: Never\n  securityContext:\n    \
             fsGroup: 5000\n    supplementalGroups: [4000]\n{}  - name: ids\n    image: {BUSYBOX}\n    \
             imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {:?}]\n    securityContext:\n      \
             runAsUser: 1000\n      runAsGroup: 3000\n      readOnlyRootFilesystem: true\n      \
             procMount: Default\n",
            one(
                STATUS,
                "    securityContext:\n      allowPrivilegeEscalation: false\n      \
                 capabilities:\n        drop: [ALL]\n        add: [NET_ADMIN, CHOWN]\n"
            ),
            "id; touch /rootfs-write && echo root-writable || echo root-readonly; \
             test -c /proc/keys && echo keys-masked; awk '$5==\"/proc/sys\"{print \"procsys-\" substr($6,1,2)}' /proc/self/mountinfo; echo done; sleep 3600"
        ),
    );

    let rd = k.wait_pod("sec-rd", "running", Duration::from_secs(60), running);
    assert_eq!(status_field(&output(&k, &rd, "main"), "Seccomp"), "2");
    let unconfined = k.wait_pod(
        "sec-unconfined",
        "running",
        Duration::from_secs(60),
        running,
    );
    assert_eq!(
        status_field(&output(&k, &unconfined, "main"), "Seccomp"),
        "0"
    );
    let local = k.wait_pod("sec-local", "running", Duration::from_secs(60), running);
    let out = output(&k, &local, "main");
    assert!(out.contains("Operation not permitted"), "{out}");
    assert!(out.contains("mkdir-rc=1"), "{out}");
    let annotated = k.wait_pod("sec-annotated", "running", Duration::from_secs(60), running);
    assert_eq!(
        status_field(&output(&k, &annotated, "main"), "Seccomp"),
        "0"
    );

    let ids = k.wait_pod("sec-ids", "running", Duration::from_secs(60), running);
    let caps = output(&k, &ids, "main");
    // CAP_CHOWN (bit 0) and CAP_NET_ADMIN (bit 12) only.
    assert_eq!(status_field(&caps, "CapEff"), "0000000000001001", "{caps}");
    assert_eq!(status_field(&caps, "NoNewPrivs"), "1", "{caps}");
    let who = output(&k, &ids, "ids");
    assert!(who.contains("uid=1000 gid=3000"), "{who}");
    assert!(
        who.contains("groups=") && who.contains("4000") && who.contains("5000"),
        "{who}"
    );
    assert!(who.contains("root-readonly"), "{who}");
    // procMount Default: the runtime's masked and read-only /proc paths.
    assert!(who.contains("keys-masked"), "{who}");
    assert!(who.contains("procsys-ro"), "{who}");

    // containerd's own words for a missing profile, as upstream's CreateContainerError shows.
    let missing = k.wait_pod(
        "sec-missing",
        "CreateContainerError",
        Duration::from_secs(60),
        |p| container_status(p, "main")["state"]["waiting"]["reason"] == "CreateContainerError",
    );
    let message = container_status(&missing, "main")["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let want = k.root_dir.join("seccomp/profiles/missing.json");
    assert!(message.contains(&*want.to_string_lossy()), "{message}");
    assert!(message.contains("no such file or directory"), "{message}");
    assert!(
        message.starts_with("failed to create containerd container: cannot load seccomp profile"),
        "{message}"
    );
    eprintln!("missing seccomp profile: {message}");

    // seccompDefault: RuntimeDefault where nothing is set (a restarted kubelet adopts the
    // pods above and starts this one).
    k.stop();
    k.start_with(&["--seccomp-default=true"]);
    k.write_manifest(
        "default.yaml",
        &manifest("sec-default", "", &one(STATUS, "")),
    );
    let dflt = k.wait_pod("sec-default", "running", Duration::from_secs(60), running);
    assert_eq!(status_field(&output(&k, &dflt, "main"), "Seccomp"), "2");
    k.cleanup();
}

/// Waits until admission refuses the static pod `name` for `reason`, and checks its message.
fn assert_refused(k: &mut Kubelet, name: &str, reason: &str, message: &str) {
    let p = k.wait_pod(name, "refused", Duration::from_secs(30), |p| {
        phase(p) == "Failed" && p["status"]["reason"] == reason
    });
    assert_eq!(p["status"]["message"], message, "{name}");
}

#[test]
fn security_admission_of_static_pods() {
    let _guard = serial();
    let mut k = Kubelet::new("sec-admission");
    k.start();
    let sysctls = |list: &str| format!("spec:\n  securityContext:\n    sysctls:\n{list}");
    let with_spec = |name: &str, spec_head: &str, script: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{spec_head}  \
             terminationGracePeriodSeconds: 1\n  restartPolicy: Never\n{}",
            one(script, "")
        )
    };
    k.write_manifest(
        "safe.yaml",
        &with_spec(
            "sec-sysctl-safe",
            &sysctls(
                "    - name: net.ipv4.ip_local_port_range\n      value: \"1024 50000\"\n    \
                 - name: kernel.shm_rmid_forced\n      value: \"1\"\n",
            ),
            "cat /proc/sys/net/ipv4/ip_local_port_range /proc/sys/kernel/shm_rmid_forced",
        ),
    );
    k.write_manifest(
        "unsafe.yaml",
        &with_spec(
            "sec-sysctl-unsafe",
            &sysctls("    - name: kernel.msgmax\n      value: \"65536\"\n"),
            "true",
        ),
    );
    k.write_manifest(
        "hostnet.yaml",
        &with_spec(
            "sec-sysctl-hostnet",
            "spec:\n  hostNetwork: true\n  securityContext:\n    sysctls:\n    \
             - name: net.ipv4.tcp_syncookies\n      value: \"1\"\n",
            "true",
        ),
    );
    k.write_manifest(
        "apparmor.yaml",
        &with_spec(
            "sec-apparmor",
            "spec:\n  securityContext:\n    appArmorProfile:\n      type: RuntimeDefault\n",
            "true",
        ),
    );
    k.write_manifest(
        "strict.yaml",
        &with_spec(
            "sec-strict-groups",
            "spec:\n  securityContext:\n    supplementalGroupsPolicy: Strict\n",
            "true",
        ),
    );
    k.write_manifest(
        "userns.yaml",
        &with_spec("sec-userns", "spec:\n  hostUsers: false\n", "true"),
    );

    let safe = k.wait_pod(
        "sec-sysctl-safe",
        "running",
        Duration::from_secs(60),
        running,
    );
    let out = output(&k, &safe, "main");
    assert!(out.contains("1024\t50000"), "{out}");
    assert!(out.lines().any(|l| l == "1"), "{out}");

    assert_refused(
        &mut k,
        "sec-sysctl-unsafe",
        "SysctlForbidden",
        "Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted",
    );
    assert_refused(
        &mut k,
        "sec-sysctl-hostnet",
        "SysctlForbidden",
        "Pod was rejected: forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host Net enabled",
    );

    // This host's kernel has no AppArmor (checked, not assumed).
    let apparmor_on = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|v| v.starts_with('Y'))
        && Path::new("/sys/kernel/security/apparmor").exists();
    if apparmor_on {
        eprintln!("AppArmor is enabled here: the refusal is not tested");
    } else {
        assert_refused(
            &mut k,
            "sec-apparmor",
            "AppArmor",
            "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host",
        );
    }

    // containerd 1.6 reports no supplemental-groups-policy feature.
    assert_refused(
        &mut k,
        "sec-strict-groups",
        "SupplementalGroupsPolicyNotSupported",
        "Pod was rejected: SupplementalGroupsPolicy=Strict is not supported in this node",
    );

    // containerd 1.6 lists no runtime handlers: the sandbox is never created.
    let want = "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces";
    wait_for(
        Duration::from_secs(30),
        "the user namespace refusal",
        || {
            let log = k.log();
            (log.contains("FailedCreatePodSandBox") && log.contains(want)).then_some(())
        },
    );
    let userns = k.pod("sec-userns").expect("userns pod listed");
    assert_eq!(phase(&userns), "Pending");

    // The same unsafe sysctl runs once allowedUnsafeSysctls names it (a pattern).
    k.stop();
    k.start_with(&["--allowed-unsafe-sysctls=kernel.msg*"]);
    k.write_manifest(
        "allowed.yaml",
        &with_spec(
            "sec-sysctl-allowed",
            &sysctls("    - name: kernel.msgmax\n      value: \"65536\"\n"),
            "cat /proc/sys/kernel/msgmax",
        ),
    );
    let allowed = k.wait_pod(
        "sec-sysctl-allowed",
        "running",
        Duration::from_secs(60),
        running,
    );
    assert!(output(&k, &allowed, "main").lines().any(|l| l == "65536"));
    k.cleanup();
}

#[test]
fn bad_unsafe_sysctl_patterns_stop_the_kubelet() {
    let _guard = serial();
    let k = Kubelet::new("sec-bad-sysctl");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubelet"))
        .args([
            &format!("--root-dir={}", k.root_dir.display()),
            &format!("--pod-manifest-path={}", k.manifests.display()),
            &format!(
                "--container-runtime-endpoint=unix://{}",
                containerd_socket()
            ),
            &format!("--cgroup-root={}", k.cgroup_root),
            "--fail-swap-on=false",
            "--allowed-unsafe-sysctls=kernel.panic",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    // The log line quotes the error, so its own quotes come escaped.
    assert!(
        err.contains(r#"the sysctls \"kernel.panic\" are not known to be namespaced"#),
        "{err}"
    );
}

/// The log of an API pod's container, under this kubelet's pod log folder.
fn api_log(k: &Kubelet, pod: &k8s_openapi::api::core::v1::Pod, container: &str) -> PathBuf {
    let m = &pod.metadata;
    k.pod_logs_dir
        .join(format!(
            "default_{}_{}",
            m.name.as_deref().unwrap_or_default(),
            m.uid.as_deref().unwrap_or_default()
        ))
        .join(format!("{container}/0.log"))
}

#[test]
fn sysctls_and_seccomp_annotations_through_the_api() {
    run_serial(sysctls_through_the_api());
}

async fn sysctls_through_the_api() {
    use k8s_openapi::api::core::v1::{Event, Pod};
    use kube::api::{Api, ListParams};
    use serde_json::json;

    const NODE_NAME: &str = "sec-node";
    const NAMES: &[&str] = &[
        "sec-api-safe",
        "sec-api-unsafe",
        "sec-api-allowed",
        "sec-api-annotated",
    ];
    let (client, pods) = default_pods(&[]).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    delete_now(&pods, NAMES).await;
    let pod = |name: &str, sysctls: Value, annotations: Value, script: &str| -> Pod {
        api_pod(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {
                "nodeName": NODE_NAME,
                "terminationGracePeriodSeconds": 1,
                "restartPolicy": "Never",
                "securityContext": {"sysctls": sysctls},
                "containers": [{
                    "name": "main",
                    "image": BUSYBOX,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", format!("{script}; echo done; sleep 3600")],
                }],
            },
        }))
    };
    let wait_phase = |name: &'static str, want: &'static str| {
        let pods = pods.clone();
        async move {
            wait_async(Duration::from_secs(60), want, || async {
                let p = pods.get(name).await.ok()?;
                (p.status.as_ref()?.phase.as_deref()? == want).then_some(p)
            })
            .await
        }
    };

    let mut k = Kubelet::started_as_node("sec-api", NODE_NAME);
    let annotation = json!({"seccomp.security.alpha.kubernetes.io/pod": "runtime/default"});
    let created = [
        (
            "sec-api-safe",
            json!([{"name": "kernel.shm_rmid_forced", "value": "1"}]),
            json!({}),
            "cat /proc/sys/kernel/shm_rmid_forced",
        ),
        (
            "sec-api-unsafe",
            json!([{"name": "kernel.msgmax", "value": "65536"}]),
            json!({}),
            "true",
        ),
        // The v1.20 API server copies the old annotation into the field; the kubelet reads
        // the field.
        (
            "sec-api-annotated",
            json!([]),
            annotation,
            "grep Seccomp: /proc/self/status",
        ),
    ];
    for (name, sysctls, annotations, script) in created {
        create_pod(&pods, &pod(name, sysctls, annotations, script)).await;
    }

    let safe = wait_phase("sec-api-safe", "Running").await;
    let out = tokio::task::block_in_place(|| log_until_done(&api_log(&k, &safe, "main")));
    assert!(out.lines().any(|l| l == "1"), "{out}");

    let refused = wait_phase("sec-api-unsafe", "Failed").await;
    let status = refused.status.unwrap();
    assert_eq!(status.reason.as_deref(), Some("SysctlForbidden"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted")
    );
    let event = wait_async(Duration::from_secs(30), "SysctlForbidden event", || async {
        let list = events
            .list(&ListParams::default().fields("involvedObject.name=sec-api-unsafe"))
            .await
            .ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("SysctlForbidden"))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    let annotated = wait_phase("sec-api-annotated", "Running").await;
    let field = annotated
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.seccomp_profile.as_ref())
        .map(|p| p.type_.clone());
    assert_eq!(field.as_deref(), Some("RuntimeDefault"));
    let out = tokio::task::block_in_place(|| log_until_done(&api_log(&k, &annotated, "main")));
    assert!(out.contains("Seccomp:\t2"), "{out}");

    // With the sysctl allowed, the same pod runs.
    tokio::task::block_in_place(|| {
        k.stop();
        k.start_as_node(NODE_NAME, &["--allowed-unsafe-sysctls=kernel.msgmax"]);
    });
    let allowed = pod(
        "sec-api-allowed",
        json!([{"name": "kernel.msgmax", "value": "65536"}]),
        json!({}),
        "cat /proc/sys/kernel/msgmax",
    );
    create_pod(&pods, &allowed).await;
    let allowed = wait_phase("sec-api-allowed", "Running").await;
    let out = tokio::task::block_in_place(|| log_until_done(&api_log(&k, &allowed, "main")));
    assert!(out.lines().any(|l| l == "65536"), "{out}");

    delete_now(&pods, NAMES).await;
    tokio::task::block_in_place(|| k.cleanup());
}
