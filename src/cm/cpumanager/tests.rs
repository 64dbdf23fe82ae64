use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::topology::fake_sysfs;
use super::*;

/// A two-CPU machine like this one: one socket, one NUMA node, no hyperthreads.
fn two_cpus(root: &Path) {
    fake_sysfs(&root.join("sys"), &[(0, "0", 0), (0, "1", 0)]);
}

pub(crate) fn settings(root: &Path, policy: &str) -> CpuSettings {
    CpuSettings {
        policy: policy.into(),
        options: BTreeMap::new(),
        reconcile_period: Duration::from_secs(10),
        reserved_system_cpus: String::new(),
        reserved_cpu: Some(Amount::parse("1").unwrap()),
        feature_gates: BTreeMap::new(),
        root_dir: root.to_path_buf(),
        sysfs: root.join("sys"),
    }
}

pub(crate) fn pod(uid: &str, containers: &[(&str, &str)], inits: &[(&str, &str)]) -> Pod {
    let c = |list: &[(&str, &str)]| -> Vec<serde_json::Value> {
        list.iter()
            .map(|(name, cpu)| {
                let mut c = serde_json::json!({"name": name, "image": "x"});
                if !cpu.is_empty() {
                    let r = serde_json::json!({"cpu": cpu, "memory": "64Mi"});
                    c["resources"] = serde_json::json!({"requests": r, "limits": r});
                }
                c
            })
            .collect()
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "spec": {"containers": c(containers), "initContainers": c(inits)},
    }))
    .unwrap()
}

fn state_file(root: &Path) -> String {
    std::fs::read_to_string(root.join("cpu_manager_state")).unwrap()
}

#[test]
fn the_none_policy_writes_upstreams_file_and_sets_no_cpuset() {
    let dir = tempfile::tempdir().unwrap();
    let m = CpuManager::start(&settings(dir.path(), "none")).unwrap();
    assert_eq!(
        state_file(dir.path()),
        r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#
    );
    let p = pod("a", &[("app", "1")], &[]);
    m.admit(&p).unwrap();
    assert_eq!(m.cpuset_for("a", "app"), None);
    assert!(m.allocatable_cpus().is_empty());
}

#[test]
fn a_guaranteed_container_gets_the_unreserved_cpu_and_gives_it_back() {
    let dir = tempfile::tempdir().unwrap();
    two_cpus(dir.path());
    let m = CpuManager::start(&settings(dir.path(), "static")).unwrap();
    assert_eq!(m.allocatable_cpus().to_string(), "1");
    assert!(state_file(dir.path()).contains(r#""defaultCpuSet":"0-1""#));

    let best_effort = pod("be", &[("app", "")], &[]);
    m.admit(&best_effort).unwrap();
    assert_eq!(m.cpuset_for("be", "app").unwrap().to_string(), "0-1");

    let guaranteed = pod("g", &[("app", "1")], &[]);
    m.admit(&guaranteed).unwrap();
    assert_eq!(m.cpuset_for("g", "app").unwrap().to_string(), "1");
    assert_eq!(m.exclusive_cpus("g", "app").to_string(), "1");
    assert_eq!(m.cpuset_for("be", "app").unwrap().to_string(), "0");
    assert!(
        state_file(dir.path()).starts_with(
            r#"{"policyName":"static","defaultCpuSet":"0","entries":{"g":{"app":"1"}},"checksum":"#
        ),
        "{}",
        state_file(dir.path())
    );
    // Admitting it again (a restart) keeps what it has.
    m.admit(&guaranteed).unwrap();
    assert_eq!(m.exclusive_cpus("g", "app").to_string(), "1");

    // No CPU is left to give: upstream's reason and words, and nothing changes.
    let second = pod("g2", &[("app", "1")], &[]);
    let err = m.admit(&second).unwrap_err();
    assert_eq!(err.reason(), "UnexpectedAdmissionError");
    assert_eq!(
        err.message(),
        "Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, which is unexpected"
    );
    assert_eq!(m.cpuset_for("g2", "app").unwrap().to_string(), "0");

    m.retain(|uid| uid != "g");
    assert_eq!(m.cpuset_for("be", "app").unwrap().to_string(), "0-1");
    assert!(m.exclusive_cpus("g", "app").is_empty());
    assert!(state_file(dir.path()).contains(r#""defaultCpuSet":"0-1","checksum""#));
}

#[test]
fn a_pod_that_does_not_fit_whole_takes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    fake_sysfs(
        &dir.path().join("sys"),
        &[(0, "0", 0), (0, "1", 0), (0, "2", 0), (0, "3", 0)],
    );
    let m = CpuManager::start(&settings(dir.path(), "static")).unwrap();
    // 3 assignable CPUs: the first container fits, the second does not.
    let p = pod("p", &[("a", "2"), ("b", "2")], &[]);
    assert!(m.admit(&p).is_err());
    assert!(m.exclusive_cpus("p", "a").is_empty());
    assert_eq!(m.cpuset_for("x", "y").unwrap().to_string(), "0-3");
}

#[test]
fn an_init_containers_cpus_go_on_to_the_app_container() {
    let dir = tempfile::tempdir().unwrap();
    fake_sysfs(
        &dir.path().join("sys"),
        &[(0, "0", 0), (0, "1", 0), (0, "2", 0), (0, "3", 0)],
    );
    let m = CpuManager::start(&settings(dir.path(), "static")).unwrap();
    let p = pod("p", &[("app", "2")], &[("init", "2")]);
    m.admit(&p).unwrap();
    assert_eq!(m.exclusive_cpus("p", "init"), m.exclusive_cpus("p", "app"));
    assert_eq!(m.cpuset_for("other", "c").unwrap().to_string(), "0,3");
    m.forget("p");
    assert_eq!(m.cpuset_for("other", "c").unwrap().to_string(), "0-3");
}

#[test]
fn a_restarted_manager_keeps_the_assignments() {
    let dir = tempfile::tempdir().unwrap();
    two_cpus(dir.path());
    let m = CpuManager::start(&settings(dir.path(), "static")).unwrap();
    m.admit(&pod("g", &[("app", "1")], &[])).unwrap();
    drop(m);
    let m = CpuManager::start(&settings(dir.path(), "static")).unwrap();
    assert_eq!(m.exclusive_cpus("g", "app").to_string(), "1");
    assert_eq!(m.cpuset_for("be", "app").unwrap().to_string(), "0");
}

#[test]
fn a_state_of_another_policy_or_another_machine_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    two_cpus(dir.path());
    CpuManager::start(&settings(dir.path(), "none")).unwrap();
    let err = CpuManager::start(&settings(dir.path(), "static"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with(r#"could not restore state from checkpoint: configured policy "static" differs from state checkpoint policy "none", please drain this node and delete the CPU manager checkpoint file"#),
        "{err}"
    );
    std::fs::remove_file(dir.path().join("cpu_manager_state")).unwrap();

    // Written on a machine with 4 CPUs: CPU 2-3 are gone.
    let cp = checkpoint::Checkpoint {
        policy_name: "static".into(),
        default_cpu_set: "0-3".into(),
        ..Default::default()
    };
    checkpoint::write(&dir.path().join("cpu_manager_state"), &cp).unwrap();
    let err = CpuManager::start(&settings(dir.path(), "static"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains(
            r#"current set of available CPUs "0-1" doesn't match with CPUs in state "0-3""#
        ),
        "{err}"
    );

    std::fs::write(dir.path().join("cpu_manager_state"), "{not json").unwrap();
    let err = CpuManager::start(&settings(dir.path(), "static"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with("could not restore state from checkpoint: "),
        "{err}"
    );
}

#[test]
fn bad_settings_are_refused_with_upstreams_reasons() {
    let dir = tempfile::tempdir().unwrap();
    two_cpus(dir.path());
    let start = |s: CpuSettings| CpuManager::start(&s).err().map(|e| e.to_string());

    let mut s = settings(dir.path(), "dynamic");
    assert_eq!(start(s.clone()).unwrap(), r#"unknown policy: "dynamic""#);
    s.policy = "static".into();
    s.reserved_cpu = None;
    assert_eq!(
        start(s.clone()).unwrap(),
        "[cpumanager] unable to determine reserved CPU resources for static policy"
    );
    s.reserved_cpu = Some(Amount::ZERO);
    assert!(start(s.clone()).unwrap().contains("greater than zero"));
    s.reserved_cpu = Some(Amount::parse("1").unwrap());
    s.reserved_system_cpus = "0,5".into();
    assert_eq!(
        start(s.clone()).unwrap(),
        "reserved-cpus: 0,5 is not a subset of online-cpus: 0-1"
    );
    s.reserved_system_cpus = String::new();
    s.options.insert("full-pcpus-only".into(), "maybe".into());
    assert!(start(s.clone()).unwrap().contains("bad value for option"));
    s.options.clear();
    s.options.insert("align-by-socket".into(), "true".into());
    assert!(
        start(s.clone())
            .unwrap()
            .contains("Alpha-level Options not enabled")
    );
    s.feature_gates
        .insert("CPUManagerPolicyAlphaOptions".into(), true);
    assert!(start(s.clone()).unwrap().contains("not implemented"));
    s.options.clear();
    s.options.insert("no-such-option".into(), "true".into());
    assert!(
        start(s.clone())
            .unwrap()
            .contains("unknown CPU Manager Policy option")
    );

    let mut s = settings(dir.path(), "none");
    s.options.insert("full-pcpus-only".into(), "true".into());
    assert!(
        start(s)
            .unwrap()
            .contains("None policy: received unsupported options")
    );
}

#[test]
fn full_physical_cpus_only_refuses_half_cores() {
    let dir = tempfile::tempdir().unwrap();
    // 1 socket, 2 cores × 2 threads: siblings 0,2 and 1,3.
    fake_sysfs(
        &dir.path().join("sys"),
        &[(0, "0,2", 0), (0, "1,3", 0), (0, "0,2", 0), (0, "1,3", 0)],
    );
    let mut s = settings(dir.path(), "static");
    s.options.insert("full-pcpus-only".into(), "true".into());
    s.reserved_cpu = Some(Amount::parse("2").unwrap());
    let m = CpuManager::start(&s).unwrap();
    assert_eq!(m.allocatable_cpus().to_string(), "1,3");
    let err = m.admit(&pod("a", &[("app", "1")], &[])).unwrap_err();
    assert_eq!(err.reason(), "SMTAlignmentError");
    assert_eq!(
        err.message(),
        "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"
    );
    m.admit(&pod("b", &[("app", "2")], &[])).unwrap();
    assert_eq!(m.exclusive_cpus("b", "app").to_string(), "1,3");
    let err = m.admit(&pod("c", &[("app", "2")], &[])).unwrap_err();
    assert_eq!(
        err.message(),
        "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 0, requested CPUs = 2, CPUs per core = 2"
    );
}

#[test]
fn only_running_containers_of_admitted_pods_whose_cpuset_changed_are_due() {
    let dir = tempfile::tempdir().unwrap();
    two_cpus(dir.path());
    let m = CpuManager::start(&settings(dir.path(), "static")).unwrap();
    m.admit(&pod("be", &[("app", "")], &[])).unwrap();
    m.started("c-be", &CpuSet::parse("0-1").unwrap());
    let running = vec![
        ("c-be".to_string(), "be".to_string(), "app".to_string()),
        ("c-x".to_string(), "unknown".to_string(), "app".to_string()),
    ];
    assert!(m.due(&running).is_empty());
    m.admit(&pod("g", &[("app", "1")], &[])).unwrap();
    assert_eq!(
        m.due(&running),
        vec![("c-be".to_string(), CpuSet::parse("0").unwrap())]
    );
    m.started("c-be", &CpuSet::parse("0").unwrap());
    assert!(m.due(&running).is_empty());
    // A container no longer running is forgotten.
    m.due(&[]);
    assert!(m.lock().last_update.is_empty());
}
