use std::collections::BTreeMap;
use std::path::Path;

use super::policy::{self, NumaInfo, Options, Policy};
use super::*;
use crate::cm::cpumanager::tests::{pod, settings};
use crate::cm::cpumanager::topology::{TWO_SOCKETS_HT, fake_sysfs};
use crate::cm::numa::NumaMask;

fn hint(mask: &[u32], preferred: bool) -> Hint {
    Hint {
        affinity: Some(NumaMask::of(mask.iter().copied())),
        preferred,
    }
}

fn two_nodes() -> NumaInfo {
    NumaInfo {
        nodes: vec![0, 1],
        distances: BTreeMap::new(),
    }
}

fn opts() -> Options {
    policy::options(&BTreeMap::new(), &BTreeMap::new()).unwrap()
}

fn provider(resource: &str, hints: ResourceHints) -> BTreeMap<String, ResourceHints> {
    BTreeMap::from([(resource.to_string(), hints)])
}

fn merged(p: Policy, providers: &[BTreeMap<String, ResourceHints>]) -> (String, bool) {
    let (best, admit) = policy::merge(p, &two_nodes(), &opts(), providers);
    (best.to_string(), admit)
}

#[test]
fn cpu_and_device_hints_meet_on_the_node_both_prefer() {
    let cpu = provider(
        "cpu",
        Some(vec![
            hint(&[0], true),
            hint(&[1], true),
            hint(&[0, 1], false),
        ]),
    );
    let gpu = provider("gpu", Some(vec![hint(&[1], true), hint(&[0, 1], false)]));
    for p in [
        Policy::BestEffort,
        Policy::Restricted,
        Policy::SingleNumaNode,
    ] {
        assert_eq!(
            merged(p, &[cpu.clone(), gpu.clone()]),
            ("{10 true}".into(), true)
        );
    }
}

#[test]
fn hints_that_cannot_meet_are_admitted_only_by_best_effort() {
    let cpu = provider("cpu", Some(vec![hint(&[0], true), hint(&[0, 1], false)]));
    let gpu = provider("gpu", Some(vec![hint(&[1], true), hint(&[0, 1], false)]));
    let providers = [cpu, gpu];
    assert_eq!(
        merged(Policy::BestEffort, &providers),
        ("{01 false}".into(), true)
    );
    assert_eq!(
        merged(Policy::Restricted, &providers),
        ("{01 false}".into(), false)
    );
    assert_eq!(
        merged(Policy::SingleNumaNode, &providers),
        ("{<nil> false}".into(), false)
    );
}

#[test]
fn no_preference_anywhere_is_preferred_and_a_resource_nothing_holds_is_not() {
    // A best-effort pod: no provider has a preference.
    let none = [BTreeMap::new(), provider("gpu", None)];
    assert_eq!(
        merged(Policy::Restricted, &none),
        ("{11 true}".into(), true)
    );
    assert_eq!(
        merged(Policy::SingleNumaNode, &none),
        ("{<nil> true}".into(), true)
    );
    // Not enough free CPUs anywhere.
    let full = [provider("cpu", Some(Vec::new()))];
    assert_eq!(
        merged(Policy::BestEffort, &full),
        ("{11 false}".into(), true)
    );
    assert_eq!(
        merged(Policy::Restricted, &full),
        ("{11 false}".into(), false)
    );
    // A request only both nodes together hold: fine for restricted, not single-numa-node.
    let wide = [provider("cpu", Some(vec![hint(&[0, 1], true)]))];
    assert_eq!(
        merged(Policy::Restricted, &wide),
        ("{11 true}".into(), true)
    );
    assert_eq!(
        merged(Policy::SingleNumaNode, &wide),
        ("{<nil> false}".into(), false)
    );
}

#[test]
fn prefer_closest_picks_the_nearer_pair_of_nodes() {
    let numa = NumaInfo {
        nodes: vec![0, 1, 2, 3],
        distances: BTreeMap::from([
            (0, vec![10, 30, 20, 30]),
            (1, vec![30, 10, 30, 20]),
            (2, vec![20, 30, 10, 30]),
            (3, vec![30, 20, 30, 10]),
        ]),
    };
    let cpu = provider("cpu", Some(vec![hint(&[0, 1], true), hint(&[0, 2], true)]));
    let closest = policy::options(
        &BTreeMap::from([("prefer-closest-numa-nodes".to_string(), "true".to_string())]),
        &BTreeMap::new(),
    )
    .unwrap();
    let (best, _) = policy::merge(
        Policy::BestEffort,
        &numa,
        &opts(),
        std::slice::from_ref(&cpu),
    );
    assert_eq!(best.to_string(), "{11 true}");
    let (best, _) = policy::merge(Policy::BestEffort, &numa, &closest, &[cpu]);
    assert_eq!(best.to_string(), "{101 true}");
}

#[test]
fn options_are_checked_as_upstream_checks_them() {
    let given = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
    let gates = BTreeMap::new();
    let err = |k, v| {
        policy::options(&given(k, v), &gates)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err("bogus", "1"),
        "unknown Topology Manager Policy option: \"bogus\""
    );
    assert_eq!(
        err("max-allowable-numa-nodes", "4"),
        "the minimum value of \"max-allowable-numa-nodes\" should not be less than 8"
    );
    let opts = policy::options(&given("max-allowable-numa-nodes", "16"), &gates).unwrap();
    assert_eq!(opts.max_allowable_numa_nodes, 16);
    let off = BTreeMap::from([("TopologyManagerPolicyBetaOptions".to_string(), false)]);
    assert!(policy::options(&given("max-allowable-numa-nodes", "16"), &off).is_err());
}

fn managers(root: &Path, policy: &str, scope: &str) -> (Arc<CpuManager>, Arc<TopologyManager>) {
    // CPU 0 is reserved (settings' one CPU, from the lowest core).
    fake_sysfs(&root.join("sys"), &TWO_SOCKETS_HT);
    let cpus = CpuManager::start(&settings(root, "static")).unwrap();
    let topology = TopologyManager::start(&TopologySettings {
        policy: policy.into(),
        scope: scope.into(),
        options: BTreeMap::new(),
        feature_gates: BTreeMap::new(),
        sysfs: root.join("sys"),
    })
    .unwrap();
    (cpus, topology)
}

#[test]
fn exclusive_cpus_come_from_the_one_node_that_holds_them_or_the_pod_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (cpus, topology) = managers(dir.path(), "single-numa-node", "container");
    let first = pod("a", &[("app", "4")], &[]);
    topology.admit(&first, Some(&cpus), None, None).unwrap();
    // Node 0 has three free CPUs (0 is reserved): all four come from node 1.
    assert_eq!(cpus.exclusive_cpus("a", "app").to_string(), "2-3,6-7");
    assert_eq!(topology.affinity_mask("a", "app"), Some(NumaMask::of([1])));

    let second = pod("b", &[("app", "4")], &[]);
    let err = topology
        .admit(&second, Some(&cpus), None, None)
        .unwrap_err();
    assert_eq!(err.reason(), "TopologyAffinityError");
    assert_eq!(
        err.message(),
        "Resources cannot be allocated with Topology locality"
    );
    assert!(cpus.exclusive_cpus("b", "app").is_empty());
    assert_eq!(topology.affinity("b", "app"), None);
    // Three fit on node 0.
    let third = pod("c", &[("app", "3")], &[]);
    topology.admit(&third, Some(&cpus), None, None).unwrap();
    assert_eq!(cpus.exclusive_cpus("c", "app").to_string(), "1,4-5");
}

#[test]
fn best_effort_admits_what_cannot_be_aligned_and_the_cpu_manager_says_what_is_short() {
    let dir = tempfile::tempdir().unwrap();
    let (cpus, topology) = managers(dir.path(), "best-effort", "container");
    // Five: no single node holds them; both nodes together do.
    let wide = pod("w", &[("app", "5")], &[]);
    topology.admit(&wide, Some(&cpus), None, None).unwrap();
    assert_eq!(cpus.exclusive_cpus("w", "app").len(), 5);
    assert_eq!(
        topology.affinity_mask("w", "app"),
        Some(NumaMask::of([0, 1]))
    );
    let more = pod("m", &[("app", "3")], &[]);
    let err = topology.admit(&more, Some(&cpus), None, None).unwrap_err();
    assert_eq!(err.reason(), "UnexpectedAdmissionError");
}

#[test]
fn pod_scope_keeps_every_container_of_the_pod_on_one_node() {
    let two_of_two = pod("p", &[("one", "2"), ("two", "2")], &[]);
    let dir = tempfile::tempdir().unwrap();
    let (cpus, topology) = managers(dir.path(), "single-numa-node", "container");
    topology
        .admit(&two_of_two, Some(&cpus), None, None)
        .unwrap();
    // Container by container: the first fits the lower node, the second only the other.
    assert_eq!(cpus.exclusive_cpus("p", "one").to_string(), "1,5");
    assert_eq!(cpus.exclusive_cpus("p", "two").to_string(), "2,6");

    let dir = tempfile::tempdir().unwrap();
    let (cpus, topology) = managers(dir.path(), "single-numa-node", "pod");
    topology
        .admit(&two_of_two, Some(&cpus), None, None)
        .unwrap();
    // Four at once fit node 1 only.
    assert_eq!(cpus.exclusive_cpus("p", "one").to_string(), "2,6");
    assert_eq!(cpus.exclusive_cpus("p", "two").to_string(), "3,7");
    topology.forget("p");
    assert_eq!(topology.affinity("p", "one"), None);
}

#[test]
fn a_bad_policy_or_scope_or_too_many_nodes_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let layout: Vec<(u32, &str, u32)> = (0..9).map(|n| (n, "0", n)).collect();
    fake_sysfs(&dir.path().join("sys"), &layout);
    let s = |policy: &str, scope: &str| TopologySettings {
        policy: policy.into(),
        scope: scope.into(),
        options: BTreeMap::new(),
        feature_gates: BTreeMap::new(),
        sysfs: dir.path().join("sys"),
    };
    let err = |policy, scope| {
        TopologyManager::start(&s(policy, scope))
            .err()
            .unwrap()
            .to_string()
    };
    assert_eq!(err("bogus", "container"), "unknown policy: \"bogus\"");
    assert_eq!(err("restricted", "node"), "unknown scope: \"node\"");
    assert_eq!(
        err("restricted", "pod"),
        "unsupported on machines with more than 8 NUMA Nodes"
    );
    assert!(TopologyManager::start(&s("none", "container")).is_ok());
}

#[test]
fn memory_is_a_third_provider_and_single_numa_node_keeps_it_with_the_cpus() {
    use crate::cm::memorymanager::tests as mem;
    use crate::cm::memorymanager::{MemoryManager, STATIC};
    let dir = tempfile::tempdir().unwrap();
    let (cpus, topology) = managers(dir.path(), "single-numa-node", "container");
    // 8 GiB per node, 1 GiB of node 0 kept for the system (and 8 MiB behind huge pages).
    let memory = MemoryManager::start(&mem::settings(dir.path(), STATIC)).unwrap();
    // No single node holds 9 GiB: refused whole, the CPU it was about to get given back.
    let too_big = mem::pod("b", vec![], vec![mem::container("app", "9Gi", None)]);
    let err = topology
        .admit(&too_big, Some(&cpus), Some(&memory), None)
        .unwrap_err();
    assert_eq!(err.reason(), "TopologyAffinityError");
    assert!(cpus.exclusive_cpus("b", "app").is_empty());
    assert!(memory.blocks("b", "app").is_empty());

    let fits_node_1 = mem::pod("a", vec![], vec![mem::container("app", "7Gi", None)]);
    topology
        .admit(&fits_node_1, Some(&cpus), Some(&memory), None)
        .unwrap();
    assert_eq!(topology.affinity_mask("a", "app"), Some(NumaMask::of([1])));
    assert_eq!(memory.cpuset_mems("a", "app").as_deref(), Some("1"));
    assert_eq!(cpus.exclusive_cpus("a", "app").to_string(), "2");
    // Now node 1 serves a single-node allocation, so no mask is left for 9 GiB: the memory
    // manager gives no hints (no preference, as upstream's), and its allocation fails.
    let err = topology
        .admit(&too_big, Some(&cpus), Some(&memory), None)
        .unwrap_err();
    assert_eq!(err.reason(), "UnexpectedAdmissionError");
    assert!(cpus.exclusive_cpus("b", "app").is_empty());

    // Best effort admits it across both nodes; the memory manager's own error surfaces as
    // upstream's unexpected admission error when even that cannot hold it.
    let (cpus, topology) = managers(dir.path(), "best-effort", "container");
    std::fs::remove_file(dir.path().join("memory_manager_state")).unwrap();
    let memory = MemoryManager::start(&mem::settings(dir.path(), STATIC)).unwrap();
    topology
        .admit(&too_big, Some(&cpus), Some(&memory), None)
        .unwrap();
    assert_eq!(memory.cpuset_mems("b", "app").as_deref(), Some("0,1"));
    let huge = mem::pod("c", vec![], vec![mem::container("app", "20Gi", None)]);
    let err = topology
        .admit(&huge, Some(&cpus), Some(&memory), None)
        .unwrap_err();
    assert_eq!(err.reason(), "UnexpectedAdmissionError");
    assert!(
        err.message()
            .starts_with("Allocate failed due to [memorymanager] failed to "),
        "{}",
        err.message()
    );
}
