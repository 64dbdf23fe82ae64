//! PodSpec fields of issue 14 item 6, each on the real bed. Through the API server (the v1.20
//! one has these fields): `enableServiceLinks`, `setHostnameAsFQDN` (and its 64-character
//! limit), `shareProcessNamespace`, `hostPID`/`hostIPC`, `dnsConfig` with `dnsPolicy: None`,
//! and the pod's `terminationGracePeriodSeconds` on delete (and a delete's own grace period
//! over it). Through static pods (the v1.20 API server drops these fields): `os.name`, the
//! `sleep` preStop action and image volumes.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use k8s_openapi::api::core::v1::{Event, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const NODE: &str = "rtc-misc-node";
const SERVICE: &str = "rtc-svc";
const API_PODS: &[&str] = &[
    "rtc-links-off",
    "rtc-links-on",
    "rtc-fqdn",
    "rtc-fqdn-long",
    "rtc-sharepid",
    "rtc-hostns",
    "rtc-dns",
    "rtc-grace",
    "rtc-grace-override",
];

fn container(name: &str, script: &str) -> serde_json::Value {
    json!({
        "name": name,
        "image": BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    })
}

fn api_pod(name: &str, spec: serde_json::Value) -> Pod {
    let mut spec = spec;
    spec["nodeName"] = json!(NODE);
    spec.as_object_mut()
        .unwrap()
        .entry("terminationGracePeriodSeconds")
        .or_insert(json!(1));
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// What a container of an API pod wrote (its CRI log), once it holds `until`.
fn wait_log(k: &Kubelet, pod: &Pod, container: &str, until: &str) -> String {
    let m = &pod.metadata;
    let dir = k.pod_logs_dir.join(format!(
        "default_{}_{}",
        m.name.as_deref().unwrap(),
        m.uid.as_deref().unwrap()
    ));
    let path = dir.join(container).join("0.log");
    wait_for_opt(Duration::from_secs(60), || {
        let text = std::fs::read_to_string(&path).ok()?;
        text.contains(until).then_some(text)
    })
    .unwrap_or_else(|| {
        panic!(
            "{} never held {until:?}: {:?}\nkubelet log:\n{}",
            path.display(),
            std::fs::read_to_string(&path),
            tail(&k.log(), 40)
        )
    })
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    wait_async(
        Duration::from_secs(90),
        &format!("{name} running"),
        || async {
            let p = pods.get(name).await.ok()?;
            let statuses = p.status.as_ref()?.container_statuses.as_ref()?;
            statuses
                .iter()
                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
                .then_some(p)
        },
    )
    .await
}

fn host_ns(kind: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{kind}"))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn container_id(p: &Pod) -> String {
    p.status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .container_id
        .clone()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string()
}

/// Deletes the pod (with the delete's own grace period, if any) and measures how long its
/// container keeps running.
async fn time_to_stop(pods: &Api<Pod>, name: &str, grace: Option<u32>) -> Duration {
    let p = running(pods, name).await;
    let id = container_id(&p);
    assert!(running_tasks().contains(&id));
    let params = match grace {
        Some(g) => DeleteParams::default().grace_period(g),
        None => DeleteParams::default(),
    };
    let start = Instant::now();
    pods.delete(name, &params).await.unwrap();
    wait_async(Duration::from_secs(90), "the container to stop", || async {
        (!running_tasks().contains(&id)).then_some(())
    })
    .await;
    start.elapsed()
}

#[test]
fn api_pod_fields() {
    run_serial(api_pod_fields_async());
}

async fn api_pod_fields_async() {
    let (client, pods) = default_pods(&[]).await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let gone = DeleteParams::default().grace_period(0);
    for p in API_PODS {
        let _ = pods.delete(p, &gone).await;
    }
    let _ = services.delete(SERVICE, &DeleteParams::default()).await;
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": SERVICE},
        "spec": {"ports": [{"port": 8080, "name": "web"}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();

    let mut k = Kubelet::new("podspec-misc");
    k.start_as_node(NODE, &["--cluster-domain=cluster.local"]);

    let env_then_sleep = "env | sort; echo END; sleep 3600";
    let ns_then_sleep =
        "readlink /proc/self/ns/pid; readlink /proc/self/ns/ipc; echo END; sleep 3600";
    let specs = [
        (
            "rtc-links-off",
            json!({"enableServiceLinks": false, "containers": [container("main", env_then_sleep)]}),
        ),
        (
            "rtc-links-on",
            json!({"containers": [container("main", env_then_sleep), container("ns", ns_then_sleep)]}),
        ),
        (
            "rtc-fqdn",
            json!({
                "hostname": "web",
                "subdomain": "rtc-sub",
                "setHostnameAsFQDN": true,
                "containers": [container("main", "hostname; echo END; sleep 3600")],
            }),
        ),
        (
            "rtc-fqdn-long",
            json!({
                "hostname": "h".repeat(40),
                "subdomain": "rtc-sub",
                "setHostnameAsFQDN": true,
                "containers": [container("main", "sleep 3600")],
            }),
        ),
        (
            "rtc-sharepid",
            json!({
                "shareProcessNamespace": true,
                "containers": [
                    container("a", "exec sleep 3601"),
                    container("b", "sleep 2; ps; echo END; sleep 3600"),
                ],
            }),
        ),
        (
            "rtc-hostns",
            json!({
                "hostPID": true,
                "hostIPC": true,
                "containers": [container("main", ns_then_sleep)],
            }),
        ),
        (
            "rtc-dns",
            json!({
                "dnsPolicy": "None",
                "dnsConfig": {
                    "nameservers": ["192.0.2.53"],
                    "searches": ["rtc.example", "svc.example"],
                    "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
                },
                "containers": [container("main", "cat /etc/resolv.conf; echo END; sleep 3600")],
            }),
        ),
    ];
    for (name, spec) in specs {
        pods.create(&PostParams::default(), &api_pod(name, spec))
            .await
            .unwrap();
    }

    // enableServiceLinks: the namespace's services only when on; the API server's own
    // `kubernetes` service either way.
    let off = wait_log(&k, &running(&pods, "rtc-links-off").await, "main", "END");
    let on_pod = running(&pods, "rtc-links-on").await;
    let on = wait_log(&k, &on_pod, "main", "END");
    assert!(on.contains("RTC_SVC_SERVICE_HOST="), "{on}");
    assert!(on.contains("RTC_SVC_SERVICE_PORT_WEB=8080"), "{on}");
    assert!(!off.contains("RTC_SVC_"), "{off}");
    assert!(off.contains("KUBERNETES_SERVICE_HOST="), "{off}");

    // setHostnameAsFQDN.
    let fqdn = wait_log(&k, &running(&pods, "rtc-fqdn").await, "main", "END");
    assert!(
        fqdn.contains(" web.rtc-sub.default.svc.cluster.local\n"),
        "{fqdn}"
    );
    let long = format!("{}.rtc-sub.default.svc.cluster.local", "h".repeat(40));
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let ev = wait_async(
        Duration::from_secs(60),
        "FailedCreatePodSandBox for the long FQDN",
        || async {
            let lp = ListParams::default().fields("involvedObject.name=rtc-fqdn-long");
            events
                .list(&lp)
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedCreatePodSandBox"))
        },
    )
    .await;
    assert_eq!(
        ev.message.as_deref(),
        Some(
            format!(
                "Failed to create pod sandbox: failed to construct FQDN from pod hostname and cluster domain, FQDN {long} is too long (64 characters is the max, 74 characters requested)"
            )
            .as_str()
        )
    );
    let p = pods.get("rtc-fqdn-long").await.unwrap();
    assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Pending"));

    // shareProcessNamespace: b sees a's process.
    let ps = wait_log(&k, &running(&pods, "rtc-sharepid").await, "b", "END");
    assert!(ps.contains("sleep 3601"), "{ps}");

    // hostPID / hostIPC against a pod without them.
    let hostns = wait_log(&k, &running(&pods, "rtc-hostns").await, "main", "END");
    let own = wait_log(&k, &on_pod, "ns", "END");
    for kind in ["pid", "ipc"] {
        let host = host_ns(kind);
        assert!(
            hostns.contains(&host),
            "{kind}: host {host}, pod:\n{hostns}"
        );
        assert!(
            !own.contains(&host),
            "{kind}: host {host}, plain pod:\n{own}"
        );
    }

    // dnsConfig with dnsPolicy None: exactly what the pod asked for.
    let resolv = wait_log(&k, &running(&pods, "rtc-dns").await, "main", "END");
    for line in [
        "nameserver 192.0.2.53",
        "search rtc.example svc.example",
        "options ndots:2 edns0",
    ] {
        assert!(resolv.contains(line), "{line:?} in:\n{resolv}");
    }

    // terminationGracePeriodSeconds: a container that ignores SIGTERM is killed after the
    // pod's period on a plain delete, and after the delete's own period when it gives one.
    let stubborn = "trap '' TERM; while true; do sleep 1; done";
    pods.create(
        &PostParams::default(),
        &api_pod(
            "rtc-grace",
            json!({"terminationGracePeriodSeconds": 5, "containers": [container("main", stubborn)]}),
        ),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &api_pod(
            "rtc-grace-override",
            json!({"terminationGracePeriodSeconds": 120, "containers": [container("main", stubborn)]}),
        ),
    )
    .await
    .unwrap();
    let took = time_to_stop(&pods, "rtc-grace", None).await;
    assert!(
        took >= Duration::from_millis(4500) && took < Duration::from_secs(15),
        "pod grace 5 s, stopped after {took:?}"
    );
    let took = time_to_stop(&pods, "rtc-grace-override", Some(3)).await;
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(15),
        "delete grace 3 s over the pod's 120 s, stopped after {took:?}"
    );

    for p in API_PODS {
        let _ = pods.delete(p, &gone).await;
    }
    for p in API_PODS {
        wait_async(Duration::from_secs(60), "the pods to go", || async {
            pods.get_opt(p).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    let _ = services.delete(SERVICE, &DeleteParams::default()).await;
    k.cleanup();
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn static_pod_fields() {
    let _serial = serial();
    let mut k = Kubelet::new("podspec-misc-static");
    k.start();

    // os.name: refused at admission, as upstream, before anything is created.
    k.write_manifest(
        "os.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: rtc-os
spec:
  os:
    name: windows
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
"#
        ),
    );
    let p = k.wait_pod("rtc-os", "rejected", Duration::from_secs(30), |p| {
        phase(p) == "Failed"
    });
    assert_eq!(p["status"]["reason"], "PodOSNotSupported");
    assert_eq!(
        p["status"]["message"],
        "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS"
    );

    // Image volumes: containerd 1.6 cannot mount them; the pod waits with an error that names
    // the volume and the runtime.
    k.write_manifest(
        "imgvol.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: rtc-imgvol
spec:
  volumes:
  - name: img
    image:
      reference: {BUSYBOX}
      pullPolicy: IfNotPresent
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts:
    - name: img
      mountPath: /img
"#
        ),
    );
    wait_for(
        Duration::from_secs(30),
        "the image volume's FailedMount",
        || {
            k.log()
                .lines()
                // The message is quoted in the log line, so its own quotes are escaped.
                .find(|l| l.contains("FailedMount") && l.contains(r#"volume \"img\""#))
                .map(str::to_string)
        },
    );
    let line = k
        .log()
        .lines()
        .find(|l| l.contains("FailedMount"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("image volumes need a container runtime that mounts images")
            && line.contains("this node runs containerd"),
        "{line}"
    );
    let p = k.pod("rtc-imgvol").unwrap();
    assert_eq!(phase(&p), "Pending");
    assert!(
        container_status(&p, "main")["state"]["running"].is_null(),
        "{p}"
    );

    // The sleep preStop action holds SIGTERM back for its seconds.
    k.write_manifest(
        "sleep.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: rtc-sleep-hook
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "trap 'echo TERM $(date +%s); sleep 3; exit 0' TERM; echo UP; while true; do sleep 1; done"]
    lifecycle:
      preStop:
        sleep:
          seconds: 4
"#
        ),
    );
    let p = k.wait_pod("rtc-sleep-hook", "running", Duration::from_secs(60), |p| {
        container_status(p, "main")["state"]["running"].is_object()
    });
    let log = k.pod_log_dir(&p).join("main/0.log");
    wait_for(Duration::from_secs(20), "the container up", || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|t| t.contains("UP"))
    });
    // The container lingers 3 s after SIGTERM: once it is gone the collector takes its log.
    let removed = unix_now();
    k.remove_manifest("sleep.yaml");
    let text = wait_for(Duration::from_secs(40), "TERM in the log", || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|t| t.contains("TERM "))
    });
    let term: f64 = text
        .split("TERM ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    // `date +%s` truncates: the signal came at least 4 s after the removal.
    assert!(
        term + 1.0 - removed >= 4.0 && term - removed < 15.0,
        "removed at {removed}, TERM at {term}"
    );

    k.cleanup();
}
