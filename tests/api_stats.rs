//! The stats and metrics endpoints on the read-only port, with a real pod in the test bed's
//! containerd: /stats/summary (full and only_cpu_and_memory), /metrics, /metrics/resource,
//! /metrics/cadvisor and /metrics/probes.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

fn summary(k: &Kubelet, query: &str) -> Option<Value> {
    match http_get(k.ro_port, &format!("/stats/summary{query}")) {
        Some((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

fn pod_in<'a>(summary: &'a Value, name: &str) -> Option<&'a Value> {
    summary["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == name)
}

fn positive(v: &Value) -> bool {
    v.as_u64().is_some_and(|n| n > 0)
}

/// The value of the first sample line starting with `prefix` (timestamps ignored).
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l[prefix.len()..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Whether the kernel keeps pressure stall information for cgroups here: cgroup v2 with PSI
/// compiled in and not turned off at boot (then /proc/pressure cannot be read).
fn psi_here() -> bool {
    cgroup_v2_host() && std::fs::read_to_string("/proc/pressure/cpu").is_ok()
}

fn metrics(k: &Kubelet, path: &str) -> String {
    match http_get(k.ro_port, path) {
        Some((200, body)) => body,
        other => panic!("GET {path}: {other:?}"),
    }
}

#[test]
fn summary_and_metrics_for_a_running_pod() {
    let _guard = serial();
    let mut k = Kubelet::new("api-stats");
    k.start();
    let name = "stats-sleeper";
    let full_name = format!("{name}-{NODE}");
    k.write_manifest(
        "stats.yaml",
        &pod_yaml(
            name,
            "Always",
            2,
            "head -c 2000000 /dev/zero > /tmp/blob; cat /tmp/blob > /dev/null; sleep 3600",
        ),
    );
    k.wait_pod(name, "running", Duration::from_secs(60), |p| {
        container_status(p, "main")["state"]["running"].is_object()
    });

    // The pod shows up with its container once the runtime reports it.
    let s = wait_for(Duration::from_secs(30), "pod in /stats/summary", || {
        let s = summary(&k, "")?;
        let pod = pod_in(&s, &full_name)?;
        let c = pod["containers"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "main")?;
        positive(&c["memory"]["workingSetBytes"]).then_some(s.clone())
    });
    let node = &s["node"];
    assert_eq!(node["nodeName"], NODE);
    assert!(positive(&node["cpu"]["usageCoreNanoSeconds"]), "{node}");
    assert!(positive(&node["memory"]["workingSetBytes"]), "{node}");
    assert!(positive(&node["memory"]["availableBytes"]), "{node}");
    assert!(positive(&node["fs"]["capacityBytes"]), "{node}");
    assert!(positive(&node["runtime"]["imageFs"]["usedBytes"]), "{node}");
    assert!(positive(&node["rlimit"]["maxpid"]), "{node}");
    assert!(node["startTime"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert!(
        node["systemContainers"]
            .as_array()
            .is_some_and(|l| l.iter().any(|c| c["name"] == "kubelet")),
        "{node}"
    );

    let pod = pod_in(&s, &full_name).unwrap();
    assert_eq!(pod["podRef"]["namespace"], "default");
    assert!(pod["podRef"]["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(positive(&pod["memory"]["workingSetBytes"]), "{pod}");
    assert!(positive(&pod["cpu"]["usageCoreNanoSeconds"]), "{pod}");
    assert!(
        pod["network"]["interfaces"]
            .as_array()
            .is_some_and(|l| !l.is_empty()),
        "{pod}"
    );
    assert!(pod["ephemeral-storage"]["capacityBytes"].is_u64(), "{pod}");
    let c = &pod["containers"][0];
    assert_eq!(c["name"], "main");
    assert!(positive(&c["cpu"]["usageCoreNanoSeconds"]), "{c}");
    assert!(positive(&c["rootfs"]["capacityBytes"]), "{c}");
    assert!(c["logs"].is_object(), "{c}");
    // The memory figures come from v1's memory.stat/usage_in_bytes or v2's
    // memory.stat/memory.current (this test runs on both: e2e/vm/run.sh test): none may be
    // missing or zero for a running shell.
    for field in ["usageBytes", "workingSetBytes", "rssBytes", "pageFaults"] {
        assert!(positive(&c["memory"][field]), "memory.{field}: {c}");
    }

    // The sampler turns two cumulative readings 10 s apart into a rate; containerd measures
    // writable layers every 10 s or so.
    let s = wait_for(
        Duration::from_secs(40),
        "usageNanoCores and rootfs usage",
        || {
            let s = summary(&k, "")?;
            let pod = pod_in(&s, &full_name)?;
            let rates = s["node"]["cpu"]["usageNanoCores"].is_u64()
                && pod["cpu"]["usageNanoCores"].is_u64();
            let rootfs = positive(&pod["containers"][0]["rootfs"]["usedBytes"]);
            (rates && rootfs).then_some(s.clone())
        },
    );
    let pod = pod_in(&s, &full_name).unwrap();
    // 2 MB written into the container's writable layer count as its ephemeral storage.
    assert!(
        pod["ephemeral-storage"]["usedBytes"].as_u64() > Some(1_000_000),
        "{pod}"
    );

    // Pressure stall information where the kernel keeps it per cgroup (v2 with PSI on), as
    // upstream's KubeletPSI reports it: some and full for CPU, memory and IO of the node, the
    // pod and the container. v1 keeps none per cgroup, and none is reported.
    let c = &pod["containers"][0];
    for (what, v) in [("node", &s["node"]), ("pod", pod), ("container", c)] {
        for resource in ["cpu", "memory", "io"] {
            let psi = &v[resource]["psi"];
            if psi_here() {
                for line in ["some", "full"] {
                    assert!(psi[line]["total"].is_u64(), "{what} {resource}: {psi}");
                    assert!(psi[line]["avg10"].is_f64(), "{what} {resource}: {psi}");
                }
            } else {
                assert!(psi.is_null(), "{what} {resource}: {psi}");
            }
        }
    }

    let small = summary(&k, "?only_cpu_and_memory=true").expect("cpu and memory summary");
    assert!(small["node"]["fs"].is_null() && small["node"]["network"].is_null());
    assert!(positive(&small["node"]["memory"]["workingSetBytes"]));
    let small_pod = pod_in(&small, &full_name).expect("pod in the small summary");
    assert!(small_pod["network"].is_null() && small_pod["ephemeral-storage"].is_null());
    assert!(positive(
        &small_pod["containers"][0]["memory"]["workingSetBytes"]
    ));

    // /metrics: the kubelet's own families.
    let text = wait_for(Duration::from_secs(10), "kubelet_running_pods 1", || {
        let t = metrics(&k, "/metrics");
        (sample(&t, "kubelet_running_pods ") == Some(1.0)).then_some(t)
    });
    let op = |o: &str| {
        sample(
            &text,
            &format!("kubelet_runtime_operations_total{{operation_type=\"{o}\"}}"),
        )
    };
    assert!(op("run_podsandbox") >= Some(1.0), "{text}");
    assert!(op("create_container") >= Some(1.0));
    assert!(op("list_container_stats") >= Some(1.0));
    assert!(
        sample(
            &text,
            "kubelet_running_containers{container_state=\"running\"}"
        ) >= Some(1.0)
    );
    assert_eq!(
        sample(&text, &format!("kubelet_node_name{{node=\"{NODE}\"}}")),
        Some(1.0)
    );
    assert!(sample(&text, "kubelet_started_pods_total") >= Some(1.0));
    assert!(sample(&text, "kubelet_pod_start_duration_seconds_count") >= Some(1.0));
    assert!(
        sample(
            &text,
            "kubelet_pod_worker_duration_seconds_count{operation_type=\"create\"}"
        ) >= Some(1.0)
    );
    assert!(sample(&text, "kubelet_pleg_relist_duration_seconds_count") >= Some(1.0));
    assert!(text.contains("# TYPE kubelet_runtime_operations_duration_seconds histogram"));
    assert!(sample(&text, "process_resident_memory_bytes") > Some(0.0));

    // /metrics/resource: what metrics-server reads.
    let res = metrics(&k, "/metrics/resource");
    let sel = format!("{{container=\"main\",namespace=\"default\",pod=\"{full_name}\"}}");
    assert!(
        sample(&res, &format!("container_memory_working_set_bytes{sel}")) > Some(0.0),
        "{res}"
    );
    assert!(
        sample(&res, &format!("container_cpu_usage_seconds_total{sel}")) > Some(0.0),
        "{res}"
    );
    assert!(
        sample(&res, &format!("container_start_time_seconds{sel}")) > Some(1.0e9),
        "{res}"
    );
    let pod_sel = format!("{{namespace=\"default\",pod=\"{full_name}\"}}");
    assert!(
        sample(&res, &format!("pod_memory_working_set_bytes{pod_sel}")) > Some(0.0),
        "{res}"
    );
    assert!(
        sample(&res, "node_cpu_usage_seconds_total ") > Some(0.0),
        "{res}"
    );
    assert_eq!(sample(&res, "resource_scrape_error "), Some(0.0));

    // /metrics/cadvisor: container_* with cadvisor's labels.
    let cad = metrics(&k, "/metrics/cadvisor");
    let line = cad
        .lines()
        .find(|l| {
            l.starts_with("container_memory_working_set_bytes{container=\"main\"")
                && l.contains(&format!("pod=\"{full_name}\""))
        })
        .unwrap_or_else(|| panic!("no container line in\n{cad}"));
    assert!(
        line.contains("image=\"docker.io/library/busybox:1.36\""),
        "{line}"
    );
    assert!(
        line.contains(&format!("id=\"{}/kubepods/", k.cgroup_root)),
        "{line}"
    );
    assert!(
        cad.lines()
            .any(|l| l.starts_with("container_network_receive_bytes_total{")
                && l.contains(&format!("pod=\"{full_name}\""))),
        "{cad}"
    );
    // Every per-container family has a reading for the container, on cgroup v1 as on v2.
    let value = |family: &str| {
        cad.lines()
            .find(|l| {
                l.starts_with(&format!("{family}{{container=\"main\""))
                    && l.contains(&format!("pod=\"{full_name}\""))
            })
            .and_then(|l| l.rsplit_once('}')?.1.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    for family in [
        "container_cpu_usage_seconds_total",
        "container_memory_usage_bytes",
        "container_memory_working_set_bytes",
        "container_memory_rss",
        "container_start_time_seconds",
    ] {
        let v = value(family);
        assert!(v > Some(0.0), "{family} for main: {v:?}\n{cad}");
    }
    // The pressure counters are there exactly where the Summary has PSI.
    for resource in ["cpu", "memory", "io"] {
        for kind in ["stalled", "waiting"] {
            let family = format!("container_pressure_{resource}_{kind}_seconds_total");
            let v = value(&family);
            assert_eq!(
                v.is_some_and(|v| v >= 0.0),
                psi_here(),
                "{family}: {v:?}\n{cad}"
            );
        }
    }

    let probes = http_get(k.ro_port, "/metrics/probes").expect("probes");
    assert_eq!(probes.0, 200);
    assert!(probes.1.contains("# TYPE prober_probe_total counter"));

    k.cleanup();
}
