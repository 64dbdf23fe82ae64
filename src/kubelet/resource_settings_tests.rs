//! No resource manager setting is accepted in silence: every one a user may write in the
//! configuration file is honoured, refused before any pod runs (the parse or a manager's
//! start fails with a reason), or named in the start-up warning. Each row goes the way a
//! real start goes: the file through the command line's parse and validation, then the CPU
//! and topology managers' start over a fake 2-socket sysfs, then the warning list.

use crate::cm::cpumanager::topology::{TWO_SOCKETS_HT, fake_sysfs};
use crate::cm::cpumanager::{CpuManager, CpuSettings};
use crate::cm::topologymanager::{TopologyManager, TopologySettings};

#[derive(Debug, PartialEq)]
enum Outcome {
    Honoured,
    Refused,
    Named,
}

fn outcome(body: &str) -> (Outcome, String) {
    let dir = tempfile::tempdir().unwrap();
    let sysfs = dir.path().join("sys");
    fake_sysfs(&sysfs, &TWO_SOCKETS_HT);
    for (node, distance) in [(0, "10 20"), (1, "20 10")] {
        let path = sysfs.join(format!("devices/system/node/node{node}/distance"));
        std::fs::write(path, format!("{distance}\n")).unwrap();
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
    let mut topology = TopologySettings::from(&settings);
    topology.sysfs = sysfs;
    if let Err(e) = TopologyManager::start(&topology) {
        return (Outcome::Refused, e.to_string());
    }
    let named = super::preflight::resource_managers_ignored(&settings.config);
    if named.is_empty() {
        (Outcome::Honoured, String::new())
    } else {
        (Outcome::Named, named.join(", "))
    }
}

#[test]
fn every_resource_manager_setting_is_honoured_refused_or_named() {
    use Outcome::*;
    const STATIC: &str = "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n";
    let options = |kind: &str, opts: &str| format!("{kind}PolicyOptions:\n  {opts}\n");
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
        (
            "memoryManagerPolicy: Static\n".into(),
            Named,
            "memoryManagerPolicy: Static",
        ),
        (
            "reservedMemory:\n- numaNode: 0\n  limits: {memory: 100Mi}\n".into(),
            Named,
            "reservedMemory",
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
