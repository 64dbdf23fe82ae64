//! The static CPU manager on this machine's CPUs, through static pods on the real containerd:
//! with CPU 0 reserved, a Guaranteed container asking for one CPU runs on CPU 1 alone; a
//! BestEffort container runs on the shared pool, which shrinks to `0` while CPU 1 is taken
//! and grows back to `0-1` once the Guaranteed pod is gone (the reconcile loop moves the
//! running container); `cpu_manager_state` says so in upstream's shape; and a kubelet started
//! with another policy over that state refuses to start, with upstream's words.
//!
//! Each container writes its `Cpus_allowed_list` to a hostPath file twice a second. Needs two
//! online CPUs (this bed has two); on a machine with one it says so and checks the refusal.
//! The memory manager test at the end writes `Mems_allowed_list` the same way.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

const GUARANTEED: &str = r#"    resources:
      requests: {cpu: "1", memory: 32Mi}
      limits: {cpu: "1", memory: 32Mi}
"#;

fn cpus_pod(name: &str, out: &Path, resources: &str) -> String {
    status_pod(name, "Cpus_allowed_list", out, resources)
}

/// A static pod whose container writes the `field` line of its /proc/self/status to
/// `<out>/<name>` twice a second.
fn status_pod(name: &str, field: &str, out: &Path, resources: &str) -> String {
    static_pod(
        name,
        &format!(
            r#"  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "while true; do grep {field} /proc/self/status | cut -f2 > /out/{name}.tmp; mv /out/{name}.tmp /out/{name}; sleep 0.5; done"]
    volumeMounts:
    - {{name: out, mountPath: /out}}
{resources}  volumes:
  - {{name: out, hostPath: {{path: {out}}}}}
"#,
            out = out.display()
        ),
    )
}

fn wait_cpus(out: &Path, name: &str, want: &str, k: &Kubelet) {
    let path = out.join(name);
    let got = wait_for_opt(Duration::from_secs(60), || {
        let text = std::fs::read_to_string(&path).ok()?;
        (text.trim() == want).then_some(())
    });
    assert!(
        got.is_some(),
        "{name} never ran on CPUs {want:?} (last: {:?})\n{}",
        std::fs::read_to_string(&path).ok(),
        tail(&k.log(), 60)
    );
}

/// Starts the kubelet with its configuration as it is and checks that it stops at once with
/// `want` in its log (the log line quotes the message, so its quotes come escaped).
fn refuses_to_start(k: &mut Kubelet, want: &str) {
    k.spawn_with(&[]);
    let status = k
        .wait_exit(Duration::from_secs(30))
        .expect("the kubelet should stop at start");
    assert!(!status.success());
    let log = k.log();
    assert!(log.contains(want), "{}", tail(&log, 30));
}

fn online_cpus() -> String {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn guaranteed_containers_get_cpus_of_their_own_and_the_shared_pool_follows() {
    let _guard = serial();
    let mut k = Kubelet::new("cpu-manager");
    let out = k.dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // A drop-in, as a --config file would bring the file defaults (webhook authentication).
    let config = k.drop_ins.join("50-cpu-manager.conf");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerReconcilePeriod: 1s\n",
    )
    .unwrap();
    let state = k.root_dir.join("cpu_manager_state");
    if online_cpus() != "0-1" {
        eprintln!(
            "online CPUs are {:?}, not 0-1: only the refusal is checked",
            online_cpus()
        );
    } else {
        k.write_manifest("shared.yaml", &cpus_pod("shared", &out, ""));
        k.start();
        wait_cpus(&out, "shared", "0-1", &k);

        k.write_manifest("pinned.yaml", &cpus_pod("pinned", &out, GUARANTEED));
        wait_cpus(&out, "pinned", "1", &k);
        wait_cpus(&out, "shared", "0", &k);
        let text = std::fs::read_to_string(&state).unwrap();
        assert!(
            text.starts_with(r#"{"policyName":"static","defaultCpuSet":"0","entries":{""#)
                && text.contains(r#"":{"main":"1"}}"#),
            "{text}"
        );

        k.remove_manifest("pinned.yaml");
        wait_cpus(&out, "shared", "0-1", &k);
        let text = std::fs::read_to_string(&state).unwrap();
        assert!(
            text.starts_with(r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":"#),
            "{text}"
        );
        k.remove_manifest("shared.yaml");
        wait_for(Duration::from_secs(60), "the pods gone", || {
            k.pods().is_empty().then_some(())
        });
        k.stop();
    }

    // The state says static: a kubelet asked for `none` over it stops, naming the file.
    if !state.exists() {
        k.start();
        k.stop();
    }
    std::fs::remove_file(&config).unwrap();
    refuses_to_start(
        &mut k,
        &format!(
            r#"configured policy \"none\" differs from state checkpoint policy \"static\", please drain this node and delete the CPU manager checkpoint file \"{}\" before restarting Kubelet"#,
            state.display()
        ),
    );
    // Without the file it starts again (and cleans up).
    std::fs::remove_file(&state).unwrap();
    k.cleanup();
}

/// The topology manager over the static CPU manager on this one-node machine: with
/// single-numa-node and the pod scope, a Guaranteed pod whose CPUs fit the node runs on its
/// own CPU, and one asking for more exclusive CPUs than the node has free is refused with
/// upstream's TopologyAffinityError before any container starts.
#[test]
fn the_topology_manager_refuses_a_pod_no_numa_node_can_hold() {
    let _guard = serial();
    let mut k = Kubelet::new("topology-manager");
    let out = k.dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        k.drop_ins.join("50-topology-manager.conf"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n\
         topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n",
    )
    .unwrap();
    if online_cpus() != "0-1" {
        eprintln!("online CPUs are {:?}, not 0-1: skipped", online_cpus());
        return;
    }
    let two = GUARANTEED.replace(r#"cpu: "1""#, r#"cpu: "2""#);
    k.write_manifest("wide.yaml", &cpus_pod("wide", &out, &two));
    k.write_manifest("pinned.yaml", &cpus_pod("pinned", &out, GUARANTEED));
    k.start();
    wait_cpus(&out, "pinned", "1", &k);
    let wide = k.wait_pod("wide", "refused", Duration::from_secs(60), |p| {
        p["status"]["phase"] == "Failed"
    });
    assert_eq!(wide["status"]["reason"], "TopologyAffinityError", "{wide}");
    assert_eq!(
        wide["status"]["message"],
        "Pod was rejected: Resources cannot be allocated with Topology locality"
    );
    assert!(!out.join("wide").exists(), "the refused pod ran");
    // Upstream's families say the same: one pod refused for its alignment, one CPU given out,
    // nothing left in the shared pool but the reserved CPU.
    let (code, metrics) = http_get(k.ro_port, "/metrics").expect("/metrics");
    assert_eq!(code, 200);
    let sample = |name: &str, labels: &[&str]| -> Option<f64> {
        metrics
            .lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter(|l| {
                let series = l.rsplit_once(' ').map_or("", |(s, _)| s);
                series.split('{').next() == Some(name) && labels.iter().all(|x| series.contains(x))
            })
            .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
    };
    for (name, labels, want) in [
        (
            "kubelet_topology_manager_admission_errors_total",
            &[][..],
            1.0,
        ),
        (
            "kubelet_container_aligned_compute_resources_failure_count",
            &[r#"scope="pod""#, r#"boundary="numa_node""#][..],
            1.0,
        ),
        (
            "kubelet_container_aligned_compute_resources_count",
            &[r#"scope="pod""#, r#"boundary="numa_node""#][..],
            1.0,
        ),
        ("kubelet_cpu_manager_pinning_requests_total", &[][..], 1.0),
        (
            "kubelet_cpu_manager_exclusive_cpu_allocation_count",
            &[][..],
            1.0,
        ),
        (
            "kubelet_cpu_manager_shared_pool_size_millicores",
            &[][..],
            0.0,
        ),
    ] {
        assert_eq!(
            sample(name, labels),
            Some(want),
            "{name} {labels:?}\n{metrics}"
        );
    }
    assert!(sample("kubelet_topology_manager_admission_requests_total", &[]) >= Some(2.0));
    let log = k.log();
    assert!(
        log.contains("Creating topology manager") && log.contains("single-numa-node"),
        "{}",
        tail(&log, 30)
    );
    k.remove_manifest("pinned.yaml");
    k.remove_manifest("wide.yaml");
    wait_for(Duration::from_secs(60), "the pods gone", || {
        k.pods().is_empty().then_some(())
    });
    k.cleanup();
}

/// The Static memory manager on this machine's NUMA node(s): with 100Mi of node 0 kept for the
/// system (what the bed's hard eviction threshold holds back), a Guaranteed container runs
/// with cpuset.mems set to the node that holds its memory, `memory_manager_state` books it in
/// upstream's shape, a Guaranteed pod no node can hold is refused with upstream's reason
/// before it runs, and a kubelet started with the None policy over that state refuses to
/// start, with upstream's words.
#[test]
fn the_memory_manager_binds_guaranteed_memory_to_a_numa_node() {
    let _guard = serial();
    let mut k = Kubelet::new("memory-manager");
    let out = k.dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let config = k.drop_ins.join("50-memory-manager.conf");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         memoryManagerPolicy: Static\n\
         reservedMemory:\n- numaNode: 0\n  limits: {memory: 100Mi}\n",
    )
    .unwrap();
    let mems_pod = |name: &str, memory: &str| {
        let resources = format!(
            "    resources:\n      requests: {{cpu: 100m, memory: {memory}}}\n      limits: {{cpu: 100m, memory: {memory}}}\n"
        );
        status_pod(name, "Mems_allowed_list", &out, &resources)
    };
    k.write_manifest("pinned.yaml", &mems_pod("pinned", "32Mi"));
    k.write_manifest("huge.yaml", &mems_pod("huge", "100Ti"));
    k.start();
    // This machine's first node holds 32Mi; the container may use that node's memory only,
    // and the runtime was told so (on a one-node machine the kernel's list says 0 anyway).
    wait_cpus(&out, "pinned", "0", &k);
    let pinned = k.wait_pod("pinned", "running", Duration::from_secs(30), |p| {
        p["status"]["containerStatuses"][0]["containerID"].is_string()
    });
    let id = pinned["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let info = std::process::Command::new("ctr")
        .args(["--address", &containerd_socket(), "-n", "k8s.io"])
        .args(["containers", "info", &id])
        .output()
        .expect("ctr");
    let info: serde_json::Value = serde_json::from_slice(&info.stdout)
        .unwrap_or_else(|e| panic!("ctr containers info {id}: {e}: {info:?}"));
    let resources = &info["Spec"]["linux"]["resources"];
    assert_eq!(resources["cpu"]["mems"], "0", "{resources}");
    let huge = k.wait_pod("huge", "refused", Duration::from_secs(60), |p| {
        p["status"]["phase"] == "Failed"
    });
    assert_eq!(
        huge["status"]["reason"], "UnexpectedAdmissionError",
        "{huge}"
    );
    assert_eq!(
        huge["status"]["message"],
        "Pod was rejected: Allocate failed due to [memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available, which is unexpected"
    );
    assert!(!out.join("huge").exists(), "the refused pod ran");
    let state = k.root_dir.join("memory_manager_state");
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(
        text.starts_with(r#"{"policyName":"Static","machineState":{"0":{"numberOfAssignments":1,"#),
        "{text}"
    );
    assert!(
        text.contains(r#"[{"numaAffinity":[0],"type":"memory","size":33554432}]"#),
        "{text}"
    );
    let (code, metrics) = http_get(k.ro_port, "/metrics").expect("/metrics");
    assert_eq!(code, 200);
    for (name, want) in [
        ("kubelet_memory_manager_pinning_requests_total", "2"),
        ("kubelet_memory_manager_pinning_errors_total", "1"),
    ] {
        let line = metrics.lines().find(|l| l.starts_with(&format!("{name} ")));
        assert_eq!(
            line.and_then(|l| l.split(' ').nth(1)),
            Some(want),
            "{name}\n{metrics}"
        );
    }
    k.remove_manifest("pinned.yaml");
    k.remove_manifest("huge.yaml");
    wait_for(Duration::from_secs(60), "the pods gone", || {
        k.pods().is_empty().then_some(())
    });
    k.stop();
    // The pod's memory went back when it went.
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(
        text.contains(r#""numberOfAssignments":0,"#) && !text.contains("entries"),
        "{text}"
    );

    // The state says Static: a kubelet with the default None policy over it stops.
    std::fs::remove_file(&config).unwrap();
    refuses_to_start(
        &mut k,
        &format!(
            r#"[memorymanager] configured policy \"None\" differs from state checkpoint policy \"Static\", please drain this node and delete the memory manager checkpoint file \"{}\" before restarting Kubelet"#,
            state.display()
        ),
    );
    std::fs::remove_file(&state).unwrap();
    k.cleanup();
}
