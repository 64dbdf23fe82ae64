//! OpenTelemetry export against a real OTLP/gRPC receiver on loopback (`common/otlp.rs`):
//! with a `tracing` block, API pods run on the test control plane give one trace per sync
//! (`syncPod` with its pull, volume, sandbox, container and CRI client spans, then the probes
//! that make it ready), `syncTerminatingPod` and `syncTerminatedPod` on deletion, errors on the
//! spans that failed, and a server span for a request to 10250 that joins the caller's trace;
//! `/debug/pods/startup` and the start histograms show each pod's start. Without the block,
//! nothing reaches a receiver on the default endpoint; with the block but no sampling rate,
//! only what a sampled caller asks for is exported (parent-based sampling).

mod common;
#[path = "common/otlp.rs"]
#[allow(dead_code)]
mod otlp;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use otlp::SpanRecord;
use serde_json::{Value, json};

const NODE_NAME: &str = "krs-trace-node";
const WEB: &str = "krs-trace-web";
const BAD: &str = "krs-trace-bad";
const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";

type Spans = Arc<Mutex<Vec<SpanRecord>>>;

/// A receiver on its own thread and runtime, so the blocking test helpers never stall it.
fn receiver(addr: &str) -> (u16, Spans) {
    let listener = std::net::TcpListener::bind(addr).expect("bind the OTLP receiver");
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let spans: Spans = Arc::default();
    let sink = spans.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).unwrap();
            let _ = otlp::serve(l, move |batch| sink.lock().unwrap().extend(batch)).await;
        });
    });
    (port, spans)
}

fn config_file(k: &Kubelet, tracing: &str) -> String {
    let path = k.dir.path().join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
{tracing}"
        ),
    )
    .unwrap();
    format!("--config={}", path.display())
}

fn snapshot(spans: &Spans) -> Vec<SpanRecord> {
    spans.lock().unwrap().clone()
}

fn by_id(all: &[SpanRecord], id: &str) -> Option<SpanRecord> {
    all.iter().find(|s| s.span_id == id).cloned()
}

/// The chain of span names from `s` up to its root.
fn ancestry(all: &[SpanRecord], s: &SpanRecord) -> Vec<String> {
    let mut out = vec![s.name.clone()];
    let mut cur = s.clone();
    while !cur.parent_span_id.is_empty() {
        match by_id(all, &cur.parent_span_id) {
            Some(p) => {
                out.push(p.name.clone());
                cur = p;
            }
            None => {
                out.push(format!("<missing {}>", cur.parent_span_id));
                break;
            }
        }
    }
    out
}

fn pod_of(s: &SpanRecord) -> Option<&str> {
    s.attr("k8s.pod.name")
}

#[test]
fn pod_syncs_are_exported_as_traces() {
    run_serial(traced_pods());
}

async fn traced_pods() {
    let (_, pods) = default_pods(&[]).await;
    let now = DeleteParams::default().grace_period(0);
    for p in [WEB, BAD] {
        let _ = pods.delete(p, &now).await;
    }
    let (port, spans) = receiver("127.0.0.1:0");
    let mut k = Kubelet::new("tracing");
    let config = config_file(
        &k,
        &format!("tracing:\n  endpoint: 127.0.0.1:{port}\n  samplingRatePerMillion: 1000000\n"),
    );
    k.start_as_node(NODE_NAME, &[&config]);

    let web: Pod = api_pod(json!({
        "metadata": {"name": WEB},
        "spec": {
            "nodeName": NODE_NAME,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [{
                "name": "web",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "600"],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                "readinessProbe": {
                    "exec": {"command": ["true"]},
                    "initialDelaySeconds": 1,
                    "periodSeconds": 1,
                },
            }],
        },
    }));
    let bad: Pod = api_pod(json!({
        "metadata": {"name": BAD},
        "spec": {
            "nodeName": NODE_NAME,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "bad",
                "image": "krs.invalid/never/here:1",
                "imagePullPolicy": "Never",
            }],
        },
    }));
    create_pod(&pods, &web).await;
    create_pod(&pods, &bad).await;
    wait_async(Duration::from_secs(60), "the web pod Ready", || {
        let pods = pods.clone();
        async move {
            let p = pods.get(WEB).await.ok()?;
            let ready = p
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(())
        }
    })
    .await;

    // A caller's sampled trace context on 10250 puts the server span in that trace.
    let (code, body) = https_get(
        k.port,
        &format!("/debug/pods/startup/default/{WEB}"),
        &[
            "-H",
            &format!("traceparent: 00-{CALLER_TRACE}-{CALLER_SPAN}-01"),
        ],
    )
    .expect("startup breakdown");
    assert_eq!(code, 200, "{body}");
    let report: Value = serde_json::from_str(&body).expect("JSON");
    let phases: Vec<&str> = report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    for want in [
        "seen",
        "admitted",
        "volumesReady",
        "sandboxCreated",
        "running",
        "ready",
    ] {
        assert!(phases.contains(&want), "{want} missing from {body}");
    }
    assert_eq!(report["containers"][0]["name"], "web", "{body}");
    assert!(report["containers"][0]["started"].is_string(), "{body}");
    assert_eq!(report["images"][0]["image"], BUSYBOX, "{body}");
    assert!(report["totalSeconds"].as_f64().unwrap() > 0.0, "{body}");
    assert_eq!(report["countedInMetrics"], true, "an API pod: {body}");
    let (code, list) = https_get(k.port, "/debug/pods/startup", &[]).expect("list");
    assert_eq!(code, 200);
    assert!(list.contains(WEB) && list.contains(BAD), "{list}");
    let (_, metrics) = https_get(k.port, "/metrics", &[]).expect("metrics");
    for family in [
        "kubelet_pod_start_sli_duration_seconds_count",
        "kubelet_pod_start_total_duration_seconds_count",
    ] {
        let count: f64 = metrics
            .lines()
            .find(|l| l.starts_with(family))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{family} missing"));
        assert!(count >= 1.0, "{family} {count}");
    }
    let log = k.log();
    let line = log
        .lines()
        .find(|l| l.contains("Observed pod startup duration") && l.contains(WEB))
        .unwrap_or_else(|| panic!("no start summary; log tail:\n{}", tail(&log, 40)));
    assert!(
        line.contains("sandboxCreated +") && line.contains("web started +"),
        "{line}"
    );

    for p in [WEB, BAD] {
        pods.delete(p, &DeleteParams::default()).await.unwrap();
    }
    wait_for(Duration::from_secs(60), "both pods terminated", || {
        let got = snapshot(&spans);
        let done: HashSet<&str> = got
            .iter()
            .filter(|s| s.name == "syncTerminatedPod")
            .filter_map(pod_of)
            .collect();
        (done.contains(WEB) && done.contains(BAD)).then_some(())
    });
    k.stop();
    let all = snapshot(&spans);

    // Every span comes from the kubelet on this node.
    for s in &all {
        assert_eq!(
            s.resource.get("service.name").map(String::as_str),
            Some("kubelet")
        );
        assert_eq!(
            s.resource.get("host.name").map(String::as_str),
            Some(NODE_NAME)
        );
    }

    // One trace per sync: syncPod spans are roots, each with a trace of its own.
    let syncs: Vec<&SpanRecord> = all
        .iter()
        .filter(|s| s.name == "syncPod" && pod_of(s) == Some(WEB))
        .collect();
    assert!(!syncs.is_empty(), "no syncPod for {WEB}");
    let traces: HashSet<&str> = syncs.iter().map(|s| s.trace_id.as_str()).collect();
    assert_eq!(traces.len(), syncs.len(), "a trace per sync");
    for s in &syncs {
        assert!(s.parent_span_id.is_empty(), "syncPod is a root span");
        assert_eq!(s.kind, "internal");
        assert_eq!(s.scope, "k8s.io/kubernetes/pkg/kubelet");
        assert_eq!(s.attr("k8s.namespace.name"), Some("default"));
        assert_eq!(s.attr("k8s.pod"), Some(&*format!("default/{WEB}")));
        assert!(s.attr("k8s.pod.uid").is_some_and(|u| u.len() == 36));
    }
    assert_eq!(syncs[0].attr("k8s.pod.update_type"), Some("create"));

    // The sync that started the container holds the whole start.
    let start = all
        .iter()
        .find(|s| s.name == "startContainer" && s.attr("k8s.container.name") == Some("web"))
        .expect("startContainer span");
    let trace = start.trace_id.clone();
    let in_trace: Vec<&SpanRecord> = all.iter().filter(|s| s.trace_id == trace).collect();
    let chain = |name: &str| {
        let s = in_trace
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{name} not in the start's trace: {in_trace:#?}"));
        ancestry(&all, s)
    };
    assert_eq!(chain("startContainer"), ["startContainer", "syncPod"]);
    assert_eq!(chain("setupVolumes"), ["setupVolumes", "syncPod"]);
    assert_eq!(
        chain("runtime.v1.RuntimeService/RunPodSandbox"),
        [
            "runtime.v1.RuntimeService/RunPodSandbox",
            "createPodSandbox",
            "syncPod"
        ]
    );
    assert_eq!(
        chain("runtime.v1.ImageService/ImageStatus"),
        [
            "runtime.v1.ImageService/ImageStatus",
            "pullImage",
            "startContainer",
            "syncPod"
        ]
    );
    for call in ["CreateContainer", "StartContainer"] {
        let name = format!("runtime.v1.RuntimeService/{call}");
        assert_eq!(chain(&name), [name.as_str(), "startContainer", "syncPod"]);
    }
    let create = in_trace
        .iter()
        .find(|s| s.name == "runtime.v1.RuntimeService/CreateContainer")
        .unwrap();
    assert_eq!(create.kind, "client");
    assert_eq!(create.attr("rpc.system"), Some("grpc"));
    assert_eq!(
        create.attr("rpc.service"),
        Some("runtime.v1.RuntimeService")
    );
    assert_eq!(create.attr("rpc.method"), Some("CreateContainer"));
    assert_eq!(create.attr("rpc.grpc.status_code"), Some("0"));
    // The readiness probe that made it Ready, in the same trace.
    let probe = in_trace
        .iter()
        .find(|s| s.name == "probe" && s.attr("probe.result") == Some("successful"))
        .unwrap_or_else(|| panic!("no successful probe in the start's trace"));
    assert_eq!(probe.attr("probe.type"), Some("Readiness"));
    assert_eq!(ancestry(&all, probe), ["probe", "syncPod"]);

    // Errors are recorded where they happen.
    let pull = all
        .iter()
        .find(|s| {
            s.name == "pullImage"
                && s.attr("container.image.name") == Some("krs.invalid/never/here:1")
        })
        .expect("the bad pod's pullImage");
    assert_eq!(pull.status_code, 2, "error status: {pull:?}");
    assert!(pull.status_message.contains("Never"), "{pull:?}");
    assert!(pull.events.iter().any(|e| e == "exception"), "{pull:?}");
    let bad_start = by_id(&all, &pull.parent_span_id).expect("its startContainer");
    assert_eq!(bad_start.status_code, 2);

    // Deletion: syncTerminatingPod (stopping, with StopContainer) then syncTerminatedPod
    // (removal), each a root.
    for name in ["syncTerminatingPod", "syncTerminatedPod"] {
        let s = all
            .iter()
            .find(|s| s.name == name && pod_of(s) == Some(WEB))
            .unwrap_or_else(|| panic!("no {name}"));
        assert!(s.parent_span_id.is_empty());
    }
    let terminating = all
        .iter()
        .find(|s| s.name == "syncTerminatingPod" && pod_of(s) == Some(WEB))
        .unwrap();
    assert!(
        all.iter().any(|s| s.trace_id == terminating.trace_id
            && s.name == "runtime.v1.RuntimeService/StopContainer"),
        "StopContainer under syncTerminatingPod"
    );

    // The request to 10250 joined the caller's trace.
    let server = all
        .iter()
        .find(|s| s.kind == "server" && s.trace_id == CALLER_TRACE)
        .unwrap_or_else(|| panic!("no server span in the caller's trace"));
    assert_eq!(server.parent_span_id, CALLER_SPAN);
    assert_eq!(server.name, "/debug/pods/startup/{namespace}/{name}");
    assert_eq!(server.attr("http.status_code"), Some("200"));
    assert_eq!(server.attr("http.method"), Some("GET"));
}

#[test]
fn nothing_is_exported_without_the_block_or_a_sampled_parent() {
    let _guard = serial();
    // The default endpoint: were anything exported by default, it would land here.
    let (port, spans) = receiver("127.0.0.1:4317");
    assert_eq!(port, 4317);
    let mut k = Kubelet::new("notrace");
    let config = config_file(&k, "");
    k.start_with(&[&config]);
    k.write_manifest(
        "quiet.yaml",
        &pod_yaml("krs-notrace", "Always", 1, "sleep 600"),
    );
    k.wait_pod("krs-notrace", "running", Duration::from_secs(60), |p| {
        phase(p) == "Running"
    });
    let traced = format!("traceparent: 00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let (code, _) = https_get(k.port, "/pods", &["-H", &traced]).expect("pods");
    assert_eq!(code, 200);
    k.stop();
    assert!(
        snapshot(&spans).is_empty(),
        "exported without a tracing block"
    );

    // With the block but no rate, the kubelet's own work is never sampled; a caller's sampled
    // request is (parent-based).
    let config = config_file(&k, "tracing: {}\n");
    k.start_with(&[&config]);
    let (code, _) = https_get(k.port, "/pods", &["-H", &traced]).expect("pods");
    assert_eq!(code, 200);
    std::thread::sleep(Duration::from_secs(2));
    k.cleanup();
    let all = snapshot(&spans);
    assert!(!all.is_empty(), "the sampled request was not exported");
    for s in &all {
        assert_eq!(s.trace_id, CALLER_TRACE, "unsampled work exported: {s:?}");
    }
    assert!(all.iter().any(|s| s.name == "/pods" && s.kind == "server"));
}
