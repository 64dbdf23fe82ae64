//! No resource manager setting is accepted in silence: every one a user may write in the
//! configuration file is honoured or refused before any pod runs (the parse or a manager's
//! start fails with a reason). Each row goes the way a real start goes: the file through the
//! command line's parse and validation, then the CPU, memory and topology managers' start
//! over a fake 2-socket sysfs (8 GiB on each node).

use crate::cm::cpumanager::topology::{TWO_SOCKETS_HT, fake_sysfs};
use crate::cm::cpumanager::{CpuManager, CpuSettings};
use crate::cm::memorymanager::{MemoryManager, MemorySettings};
use crate::cm::topologymanager::{TopologyManager, TopologySettings};

#[derive(Debug, PartialEq)]
enum Outcome {
    Honoured,
    Refused,
}

fn outcome(body: &str) -> (Outcome, String) {
    let dir = tempfile::tempdir().unwrap();
    let sysfs = dir.path().join("sys");
    fake_sysfs(&sysfs, &TWO_SOCKETS_HT);
    for (node, distance) in [(0, "10 20"), (1, "20 10")] {
        let dir = sysfs.join(format!("devices/system/node/node{node}"));
        std::fs::write(dir.join("distance"), format!("{distance}\n")).unwrap();
        let meminfo = format!("Node {node} MemTotal:  8388608 kB\n");
        std::fs::write(dir.join("meminfo"), meminfo).unwrap();
    }
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"),
    )
    .unwrap();
    let args = [
        "kubelet".to_string(),
        format!("--config={}", file.display()),
        format!("--root-dir={}", dir.path().join("root").display()),
    ];
    let settings = match crate::cli::parse(args) {
        Ok(s) => s,
        Err(e) => return (Outcome::Refused, e.to_string()),
    };
    std::fs::create_dir_all(&settings.flags.root_dir).unwrap();
    let mut cpu = CpuSettings::from(&settings);
    cpu.sysfs = sysfs.clone();
    if let Err(e) = CpuManager::start(&cpu) {
        return (Outcome::Refused, e.to_string());
    }
    let facts = crate::host::MachineFacts {
        num_cpus: Some(16),
        memory_bytes: Some(16 << 30),
        ..Default::default()
    };
    let mut memory = MemorySettings::new(&settings, &facts);
    memory.sysfs = sysfs.clone();
    if let Err(e) = MemoryManager::start(&memory) {
        return (Outcome::Refused, e.to_string());
    }
    let mut topology = TopologySettings::from(&settings);
    topology.sysfs = sysfs;
    if let Err(e) = TopologyManager::start(&topology) {
        return (Outcome::Refused, e.to_string());
    }
    (Outcome::Honoured, String::new())
}

#[test]
fn every_resource_manager_setting_is_honoured_or_refused() {
    use Outcome::*;
    const STATIC: &str = "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n";
    let options = |kind: &str, opts: &str| format!("{kind}PolicyOptions:\n  {opts}\n");
    const MEM_STATIC: &str = "memoryManagerPolicy: Static\n";
    // One reservedMemory entry; rows that need two add the second as a bare list item.
    let reserve = |node: u32, limits: &str| {
        format!("reservedMemory:\n- numaNode: {node}\n  limits: {{{limits}}}\n")
    };
    let rows: Vec<(String, Outcome, &str)> = vec![
        ("cpuManagerPolicy: none\n".into(), Honoured, ""),
        (STATIC.into(), Honoured, ""),
        (
            format!("{STATIC}cpuManagerReconcilePeriod: 5s\n"),
            Honoured,
            "",
        ),
        ("cpuManagerPolicy: static\n".into(), Refused, "reserved CPU"),
        ("cpuManagerPolicy: bogus\n".into(), Refused, "bogus"),
        (
            "cpuManagerPolicy: static\nkubeReserved: {cpu: \"1\"}\n".into(),
            Honoured,
            "",
        ),
        (
            format!(
                "{STATIC}{}",
                options("cpuManager", "full-pcpus-only: \"true\"")
            ),
            Honoured,
            "",
        ),
        (
            format!(
                "{STATIC}{}",
                options("cpuManager", "distribute-cpus-across-numa: \"true\"")
            ),
            Honoured,
            "",
        ),
        (
            format!(
                "{STATIC}{}",
                options("cpuManager", "strict-cpu-reservation: \"true\"")
            ),
            Refused,
            "strict-cpu-reservation",
        ),
        (
            format!(
                "{STATIC}{}",
                options("cpuManager", "align-by-socket: \"true\"")
            ),
            Refused,
            "align-by-socket",
        ),
        (
            options("cpuManager", "full-pcpus-only: \"true\""),
            Refused,
            "None policy: received unsupported options",
        ),
        (
            "reservedSystemCPUs: \"9\"\ncpuManagerPolicy: static\n".into(),
            Refused,
            "not a subset of online-cpus",
        ),
        ("topologyManagerPolicy: best-effort\n".into(), Honoured, ""),
        ("topologyManagerPolicy: restricted\n".into(), Honoured, ""),
        (
            format!("{STATIC}topologyManagerPolicy: single-numa-node\n"),
            Honoured,
            "",
        ),
        ("topologyManagerPolicy: bogus\n".into(), Refused, "bogus"),
        (
            "topologyManagerPolicy: restricted\ntopologyManagerScope: pod\n".into(),
            Honoured,
            "",
        ),
        ("topologyManagerScope: node\n".into(), Refused, "node"),
        (
            format!(
                "topologyManagerPolicy: best-effort\n{}",
                options("topologyManager", "prefer-closest-numa-nodes: \"true\"")
            ),
            Honoured,
            "",
        ),
        (
            format!(
                "topologyManagerPolicy: best-effort\n{}",
                options("topologyManager", "max-allowable-numa-nodes: \"16\"")
            ),
            Honoured,
            "",
        ),
        (
            format!(
                "topologyManagerPolicy: best-effort\n{}",
                options("topologyManager", "max-allowable-numa-nodes: \"4\"")
            ),
            Refused,
            "should not be less than 8",
        ),
        (
            options("topologyManager", "bogus: \"1\""),
            Refused,
            "unknown Topology Manager Policy option",
        ),
        ("memoryManagerPolicy: None\n".into(), Honoured, ""),
        (
            "memoryManagerPolicy: Static\n".into(),
            Refused,
            r#"the total amount "0" of type "memory" is not equal to the value "100Mi" determined by Node Allocatable feature"#,
        ),
        (
            format!("{MEM_STATIC}{}", reserve(0, "memory: 100Mi")),
            Honoured,
            "",
        ),
        (
            format!(
                "{MEM_STATIC}{}{}",
                reserve(0, "memory: 50Mi"),
                "- numaNode: 1\n  limits: {memory: 50Mi}\n"
            ),
            Honoured,
            "",
        ),
        (
            format!(
                "{MEM_STATIC}{STATIC}topologyManagerPolicy: single-numa-node\n{}",
                reserve(1, "memory: 100Mi")
            ),
            Honoured,
            "",
        ),
        (
            format!("{MEM_STATIC}{}", reserve(0, "memory: 60Mi")),
            Refused,
            r#"the total amount "60Mi" of type "memory""#,
        ),
        (
            format!("{MEM_STATIC}{}", reserve(2, "memory: 100Mi")),
            Refused,
            "references a NUMA node 2 that does not exist",
        ),
        (
            format!(
                "{MEM_STATIC}systemReserved: {{memory: 1Gi}}\n{}",
                reserve(0, "memory: 1124Mi")
            ),
            Honoured,
            "",
        ),
        (
            format!(
                "{MEM_STATIC}evictionHard: {{nodefs.available: 10%}}\n{}",
                reserve(0, "memory: 1Mi")
            ),
            Refused,
            r#"the total amount "1Mi" of type "memory" is not equal to the value "0""#,
        ),
        (
            "memoryManagerPolicy: bogus\n".into(),
            Refused,
            r#"unknown policy: "bogus""#,
        ),
        // Upstream's None policy reads no reservedMemory; neither does ours.
        (reserve(0, "memory: 100Mi"), Honoured, ""),
        (
            format!("{MEM_STATIC}{}", reserve(0, "cpu: \"1\"")),
            Refused,
            r#"the limit type "cpu" for NUMA node 0 is not supported, only [memory hugepages-<HugePageSize>] is accepted"#,
        ),
        (
            format!("{MEM_STATIC}{}", reserve(0, "memory: \"0\"")),
            Refused,
            r#"reserved memory may not be zero for NUMA node 0 and resource "memory""#,
        ),
        (
            format!(
                "{MEM_STATIC}{}{}",
                reserve(0, "memory: 50Mi"),
                "- numaNode: 0\n  limits: {memory: 50Mi}\n"
            ),
            Refused,
            r#"the reserved memory has a duplicate value for NUMA node 0 and resource "memory""#,
        ),
    ];
    let mut wrong = Vec::new();
    for (body, want, says) in rows {
        let (got, why) = outcome(&body);
        if got != want || !why.contains(says) {
            wrong.push(format!(
                "{body:?}: {got:?} ({why}), want {want:?} saying {says:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
