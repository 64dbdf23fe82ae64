//! The memory manager over a fake 2-node sysfs: 8 GiB on each node, 2 MiB huge pages on
//! node 0, 1 GiB of memory reserved on node 0.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::cm::numa::NumaMask;

const GI: u64 = 1 << 30;

pub(crate) fn sysfs(root: &Path) {
    for node in [0, 1] {
        let dir = root.join(format!("devices/system/node/node{node}"));
        std::fs::create_dir_all(dir.join("hugepages/hugepages-2048kB")).unwrap();
        std::fs::write(
            dir.join("meminfo"),
            format!("Node {node} MemTotal:  8388608 kB\n"),
        )
        .unwrap();
        let pages = if node == 0 { "4\n" } else { "0\n" };
        std::fs::write(dir.join("hugepages/hugepages-2048kB/nr_hugepages"), pages).unwrap();
    }
}

pub(crate) fn settings(dir: &Path, policy: &str) -> MemorySettings {
    sysfs(&dir.join("sys"));
    MemorySettings {
        policy: policy.into(),
        reserved_memory: vec![MemoryReservation {
            numa_node: 0,
            limits: BTreeMap::from([("memory".to_string(), "1Gi".to_string())]),
        }],
        node_reservation: BTreeMap::from([("memory".to_string(), Amount::from_units(1 << 30))]),
        root_dir: dir.to_path_buf(),
        sysfs: dir.join("sys"),
        whole: machine::NodeMemory::default(),
    }
}

pub(crate) fn container(name: &str, memory: &str, hugepages: Option<&str>) -> Container {
    let mut r = BTreeMap::from([
        ("cpu".to_string(), Quantity("1".into())),
        ("memory".to_string(), Quantity(memory.into())),
    ]);
    if let Some(h) = hugepages {
        r.insert("hugepages-2Mi".to_string(), Quantity(h.into()));
    }
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: Some(r.clone()),
            limits: Some(r),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn pod(uid: &str, init: Vec<Container>, containers: Vec<Container>) -> Pod {
    let mut p = Pod::default();
    p.metadata.uid = Some(uid.into());
    p.metadata.name = Some(uid.into());
    p.spec = Some(PodSpec {
        init_containers: (!init.is_empty()).then_some(init),
        containers,
        ..Default::default()
    });
    p
}

fn hint(nodes: &[u32], preferred: bool) -> Hint {
    Hint {
        affinity: Some(NumaMask::of(nodes.iter().copied())),
        preferred,
    }
}

fn free(m: &MemoryManager, node: u32) -> u64 {
    m.lock().machine[&node].memory_map["memory"].free
}

#[test]
fn a_guaranteed_container_gets_memory_on_one_node_and_gives_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let m = MemoryManager::start(&settings(dir.path(), STATIC)).unwrap();
    {
        let state = m.lock();
        let t = &state.machine[&0].memory_map;
        // 8 GiB less 1 GiB for the system and 8 MiB behind the huge pages.
        assert_eq!(t["memory"].allocatable, 7 * GI - (8 << 20));
        assert_eq!(t["hugepages-2Mi"].allocatable, 8 << 20);
        assert_eq!(state.machine[&1].memory_map["memory"].allocatable, 8 * GI);
    }
    let p = pod("a", vec![], vec![container("app", "2Gi", Some("4Mi"))]);
    let admission = m.begin(&p);
    let hints = admission.hints(&p.spec.as_ref().unwrap().containers[0]);
    drop(admission);
    // Huge pages exist on node 0 only, so only masks with node 0 can hold the request.
    assert_eq!(
        hints["memory"],
        Some(vec![hint(&[0], true), hint(&[0, 1], false)])
    );
    assert_eq!(hints["memory"], hints["hugepages-2Mi"]);
    m.admit(&p).unwrap();
    assert_eq!(m.cpuset_mems("a", "app").as_deref(), Some("0"));
    assert_eq!(free(&m, 0), 5 * GI - (8 << 20));
    let blocks = m.blocks("a", "app");
    assert_eq!(blocks.len(), 2);
    assert!(blocks.iter().all(|b| b.numa_affinity == [0]));
    assert_eq!(m.lock().machine[&0].assignments, 2);

    // A restart reads the same state back and accepts it.
    let again = MemoryManager::start(&settings(dir.path(), STATIC)).unwrap();
    assert_eq!(again.cpuset_mems("a", "app").as_deref(), Some("0"));
    m.forget("a");
    assert_eq!(free(&m, 0), 7 * GI - (8 << 20));
    assert_eq!(m.lock().machine[&0].assignments, 0);
    assert!(m.cpuset_mems("a", "app").is_none());
}

#[test]
fn a_container_larger_than_a_node_spans_both_and_the_group_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let m = MemoryManager::start(&settings(dir.path(), STATIC)).unwrap();
    let big = pod("big", vec![], vec![container("app", "10Gi", None)]);
    m.admit(&big).unwrap();
    assert_eq!(m.cpuset_mems("big", "app").as_deref(), Some("0,1"));
    assert_eq!(m.lock().machine[&1].cells, [0, 1]);
    // Both nodes now serve the group: a small container goes there too, not preferred.
    let small = pod("small", vec![], vec![container("app", "1Gi", None)]);
    let admission = m.begin(&small);
    let hints = admission.hints(&small.spec.as_ref().unwrap().containers[0]);
    drop(admission);
    assert_eq!(hints["memory"], Some(vec![hint(&[0, 1], false)]));
    m.admit(&small).unwrap();
    assert_eq!(m.cpuset_mems("small", "app").as_deref(), Some("0,1"));
    m.forget("big");
    m.forget("small");
    assert_eq!(m.lock().machine[&1].cells, [1]);
}

#[test]
fn what_no_node_can_hold_is_refused_and_nothing_stays_booked() {
    let dir = tempfile::tempdir().unwrap();
    let m = MemoryManager::start(&settings(dir.path(), STATIC)).unwrap();
    let p = pod(
        "p",
        vec![],
        vec![container("a", "2Gi", None), container("b", "20Gi", None)],
    );
    let err = m.admit(&p).unwrap_err();
    assert_eq!(err, AllocateError::NoDefault);
    assert!(m.blocks("p", "a").is_empty());
    assert_eq!(free(&m, 0), 7 * GI - (8 << 20));
    // The topology manager's hint is widened when its nodes cannot hold the request.
    let wide = pod("w", vec![], vec![container("app", "9Gi", None)]);
    let mut admission = m.begin(&wide);
    let c = &wide.spec.as_ref().unwrap().containers[0];
    admission
        .allocate(c, false, Some(hint(&[1], false)))
        .unwrap();
    admission.commit();
    assert_eq!(m.cpuset_mems("w", "app").as_deref(), Some("0,1"));
    // A preferred hint that has to be widened into one that is not is refused.
    let next = pod("n", vec![], vec![container("app", "9Gi", None)]);
    let mut admission = m.begin(&next);
    let c = &next.spec.as_ref().unwrap().containers[0];
    let err = admission
        .allocate(c, false, Some(hint(&[1], true)))
        .unwrap_err();
    assert_eq!(err, AllocateError::NoExtension);
}

#[test]
fn init_container_memory_is_reused_by_the_app_containers() {
    let dir = tempfile::tempdir().unwrap();
    let m = MemoryManager::start(&settings(dir.path(), STATIC)).unwrap();
    let p = pod(
        "i",
        vec![container("init", "3Gi", None)],
        vec![container("app", "2Gi", None)],
    );
    m.admit(&p).unwrap();
    // 3 GiB booked, not 5: the app took 2 GiB of what the init container held.
    assert_eq!(free(&m, 0), 4 * GI - (8 << 20));
    assert_eq!(m.blocks("i", "init")[0].size, GI);
    assert_eq!(m.blocks("i", "app")[0].size, 2 * GI);
    m.forget("i");
    assert_eq!(free(&m, 0), 7 * GI - (8 << 20));
}

#[test]
fn pods_that_are_not_guaranteed_and_the_none_policy_book_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m = MemoryManager::start(&settings(dir.path(), STATIC)).unwrap();
    let mut c = container("app", "1Gi", None);
    c.resources.as_mut().unwrap().limits = None;
    let burstable = pod("b", vec![], vec![c]);
    assert!(
        m.begin(&burstable)
            .hints(&burstable.spec.as_ref().unwrap().containers[0])
            .is_empty()
    );
    m.admit(&burstable).unwrap();
    assert!(m.cpuset_mems("b", "app").is_none());

    let dir = tempfile::tempdir().unwrap();
    let none = MemoryManager::start(&settings(dir.path(), NONE)).unwrap();
    let p = pod("g", vec![], vec![container("app", "1Gi", None)]);
    none.admit(&p).unwrap();
    assert!(none.cpuset_mems("g", "app").is_none());
    assert!(none.allocatable().is_empty());
    // Upstream writes its state file under the None policy too.
    let text = std::fs::read_to_string(dir.path().join(state::FILE_NAME)).unwrap();
    assert!(
        text.starts_with(r#"{"policyName":"None","machineState":{}"#),
        "{text}"
    );
}

#[test]
fn start_refuses_another_policys_state_and_a_changed_machine() {
    let dir = tempfile::tempdir().unwrap();
    MemoryManager::start(&settings(dir.path(), NONE)).unwrap();
    let err = MemoryManager::start(&settings(dir.path(), STATIC))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with(r#"could not restore state from checkpoint: [memorymanager] configured policy "Static" differs from state checkpoint policy "None", please drain this node and delete the memory manager checkpoint file"#),
        "{err}"
    );
    std::fs::remove_file(dir.path().join(state::FILE_NAME)).unwrap();
    let m = MemoryManager::start(&settings(dir.path(), STATIC)).unwrap();
    m.admit(&pod("a", vec![], vec![container("app", "1Gi", None)]))
        .unwrap();
    drop(m);
    // Another reservation split changes what each node offers: the state no longer fits.
    let mut moved = settings(dir.path(), STATIC);
    moved.reserved_memory[0].numa_node = 1;
    let err = MemoryManager::start(&moved).err().unwrap().to_string();
    assert!(
        err.starts_with("[memorymanager] the expected machine state is different from the real one; please drain node and remove policy state file"),
        "{err}"
    );
    let mut bad = settings(dir.path(), "static");
    bad.policy = "static".into();
    assert_eq!(
        MemoryManager::start(&bad).err().unwrap().to_string(),
        r#"unknown policy: "static""#
    );
}

#[test]
fn allocatable_memory_per_node() {
    let dir = tempfile::tempdir().unwrap();
    let m = MemoryManager::start(&settings(dir.path(), STATIC)).unwrap();
    let mut got: Vec<(u32, String, u64)> = m
        .allocatable()
        .into_iter()
        .map(|b| (b.numa_affinity[0], b.resource, b.size))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (0, "hugepages-2Mi".to_string(), 8 << 20),
            (0, "memory".to_string(), 7 * GI - (8 << 20)),
            (1, "memory".to_string(), 8 * GI),
        ]
    );
}
