//! Probes through the real API server and containerd: a failing exec liveness probe restarts
//! its container with upstream's events; a startup probe holds readiness back until it
//! passes; an httpGet readiness probe flips the container's `ready` and the pod's Ready
//! condition both ways without restarting it; a tcpSocket liveness probe that passes leaves
//! the container alone; /metrics/probes counts the runs.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

const NODE: &str = "krs-probes-node";
const LIVENESS_POD: &str = "krs-probe-liveness";
const READINESS_POD: &str = "krs-probe-readiness";

fn first_container(p: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
    first_status(p).cloned()
}

fn ready_condition(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

async fn event_messages(events: &Api<Event>, pod: &str, reason: &str) -> Vec<String> {
    events
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod},reason={reason}")))
        .await
        .map(|l| l.items.into_iter().filter_map(|e| e.message).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_restart_and_gate_readiness() {
    let (client, pods) = default_pods(&[]).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let gone = DeleteParams::default().grace_period(0);
    for p in [LIVENESS_POD, READINESS_POD] {
        let _ = pods.delete(p, &gone).await;
    }

    let mut k = Kubelet::started_as_node("probes", NODE);
    let liveness: Pod = api_pod(json!({
        "metadata": {"name": LIVENESS_POD},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "liveness",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "touch /tmp/health; sleep 3; rm -f /tmp/health; sleep 600"],
                "livenessProbe": {
                    "exec": {"command": ["cat", "/tmp/health"]},
                    "periodSeconds": 1,
                    "timeoutSeconds": 10,
                    "failureThreshold": 2,
                },
            }],
        },
    }));
    create_pod(&pods, &liveness).await;

    // httpd serves /www; /www/ok exists from 0 s to 15 s, the startup marker from 3 s.
    // (`a && b && (c) &` would put the whole list in the background, racing httpd.)
    let script = "mkdir -p /www && echo ok > /www/ok; \
        (sleep 3; touch /tmp/started; sleep 12; rm -f /www/ok) & \
        exec httpd -f -p 8080 -h /www";
    let readiness: Pod = api_pod(json!({
        "metadata": {"name": READINESS_POD},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "web",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "ports": [{"name": "http", "containerPort": 8080}],
                // Generous timeouts and thresholds: a busy machine (CI) may take seconds to
                // exec into a container; only the probe under test may decide.
                "startupProbe": {
                    "exec": {"command": ["test", "-f", "/tmp/started"]},
                    "periodSeconds": 1,
                    "timeoutSeconds": 10,
                    "failureThreshold": 60,
                },
                "readinessProbe": {
                    "httpGet": {"path": "/ok", "port": "http",
                                "httpHeaders": [{"name": "X-Probe", "value": "1"}]},
                    "periodSeconds": 1,
                    "timeoutSeconds": 10,
                },
                "livenessProbe": {
                    "tcpSocket": {"port": 8080},
                    "periodSeconds": 1,
                    "timeoutSeconds": 10,
                    "failureThreshold": 10,
                },
            }],
        },
    }));
    create_pod(&pods, &readiness).await;

    // Running, but neither started nor ready before the startup probe passes.
    let early = wait_async(
        Duration::from_secs(60),
        "the web container to run",
        || async {
            let c = first_container(&pods.get(READINESS_POD).await.ok()?)?;
            c.state.as_ref()?.running.as_ref()?;
            Some(c)
        },
    )
    .await;
    assert_eq!(
        (early.started, early.ready),
        (Some(false), false),
        "a startup probe holds the container back"
    );
    wait_async(
        Duration::from_secs(20),
        "Ready after the startup probe",
        || async {
            let p = pods.get(READINESS_POD).await.ok()?;
            let c = first_container(&p)?;
            (c.started == Some(true) && c.ready && ready_condition(&p).as_deref() == Some("True"))
                .then_some(())
        },
    )
    .await;
    // /www/ok goes at 15 s: not ready again, and not restarted.
    wait_async(
        Duration::from_secs(30),
        "not Ready once /ok is gone",
        || async {
            let p = pods.get(READINESS_POD).await.ok()?;
            let c = first_container(&p)?;
            (!c.ready && ready_condition(&p).as_deref() == Some("False")).then_some(())
        },
    )
    .await;
    let c = first_container(&pods.get(READINESS_POD).await.unwrap()).unwrap();
    assert_eq!(
        c.restart_count,
        0,
        "readiness never restarts a container: {:?} {:?}",
        event_messages(&events, READINESS_POD, "Killing").await,
        event_messages(&events, READINESS_POD, "Unhealthy").await
    );
    assert!(c.state.unwrap().running.is_some());
    let unhealthy = event_messages(&events, READINESS_POD, "Unhealthy").await;
    assert!(
        unhealthy
            .iter()
            .any(|m| m == "Readiness probe failed: HTTP probe failed with statuscode: 404"),
        "{unhealthy:?}"
    );

    // The liveness pod has been restarted by now (its probe fails from about 4 s).
    let restarted = wait_async(Duration::from_secs(60), "a liveness restart", || async {
        let c = first_container(&pods.get(LIVENESS_POD).await.ok()?)?;
        (c.restart_count >= 1).then_some(c)
    })
    .await;
    assert!(restarted.last_state.unwrap().terminated.is_some());
    let killing = event_messages(&events, LIVENESS_POD, "Killing").await;
    assert!(
        killing
            .iter()
            .any(|m| m == "Container liveness failed liveness probe, will be restarted"),
        "{killing:?}"
    );
    let unhealthy = event_messages(&events, LIVENESS_POD, "Unhealthy").await;
    assert!(
        unhealthy
            .iter()
            .any(|m| m.starts_with("Liveness probe failed: cat: can't open '/tmp/health'")),
        "{unhealthy:?}"
    );

    let (code, metrics) = http_get(k.ro_port, "/metrics/probes").expect("/metrics/probes");
    assert_eq!(code, 200);
    let has = |kind: &str, result: &str, container: &str, pod: &str| {
        metrics.lines().any(|l| {
            l.starts_with("prober_probe_total{")
                && l.contains(&format!("probe_type=\"{kind}\""))
                && l.contains(&format!("result=\"{result}\""))
                && l.contains(&format!("container=\"{container}\""))
                && l.contains(&format!("pod=\"{pod}\""))
        })
    };
    for (kind, result, container, pod) in [
        ("Liveness", "failed", "liveness", LIVENESS_POD),
        ("Readiness", "successful", "web", READINESS_POD),
        ("Readiness", "failed", "web", READINESS_POD),
        ("Startup", "successful", "web", READINESS_POD),
        ("Liveness", "successful", "web", READINESS_POD),
    ] {
        assert!(
            has(kind, result, container, pod),
            "{kind} {result} {container}: {metrics}"
        );
    }

    for p in [LIVENESS_POD, READINESS_POD] {
        let _ = pods.delete(p, &gone).await;
    }
    wait_async(Duration::from_secs(60), "the pods to go", || async {
        let a = pods.get_opt(LIVENESS_POD).await.ok()?.is_none();
        let b = pods.get_opt(READINESS_POD).await.ok()?.is_none();
        (a && b).then_some(())
    })
    .await;
    // A gone pod's probe series go with its workers. The pods were deleted with grace 0, so
    // the objects are gone before the kubelet has even seen the deletion: wait for it.
    wait_async(
        Duration::from_secs(30),
        "the gone pod's probe series to go",
        || async {
            let (_, metrics) = http_get(k.ro_port, "/metrics/probes")?;
            (!metrics.contains(READINESS_POD)).then_some(())
        },
    )
    .await;
    k.cleanup();
}
