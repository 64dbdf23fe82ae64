use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::*;
use crate::host::MachineFacts;
use crate::host::facts::HugePages;
use crate::node::NodeSettings;

const GI: u64 = 1 << 30;

fn settings() -> NodeSettings {
    crate::node::test_settings()
}

fn facts() -> MachineFacts {
    MachineFacts {
        num_cpus: Some(4),
        memory_bytes: Some(16 * GI),
        swap_bytes: Some(0),
        hugepages: vec![
            HugePages {
                page_size_bytes: 2 << 20,
                pages: 0,
            },
            HugePages {
                page_size_bytes: GI,
                pages: 2,
            },
        ],
        machine_id: "mid".into(),
        system_uuid: "uuid".into(),
        boot_id: "boot".into(),
        kernel_version: "6.1.0".into(),
        os_image: "Debian GNU/Linux 12 (bookworm)".into(),
        root_fs_bytes: Some(100 * GI),
    }
}

fn inputs() -> StatusInputs {
    StatusInputs {
        machine: facts(),
        container_runtime_version: "containerd://2.1.4".into(),
        images: Vec::new(),
        runtime_handlers: None,
        ready_errors: Vec::new(),
        devices: Default::default(),
        pressure: Pressure::default(),
        volumes_in_use: Vec::new(),
    }
}

#[test]
fn volumes_in_use_are_reported_and_cleared() {
    let cfg = settings();
    let t0 = ts("2025-01-01T00:00:00Z");
    let original = initial_node(&cfg, &inputs(), &t0);
    let mut i = inputs();
    i.volumes_in_use = vec!["kubernetes.io/csi/d.csi^h-1".into()];
    let mut next = original.clone();
    apply_status(&mut next, &cfg, &i, &t0);
    assert!(status_changed(
        original.status.as_ref(),
        next.status.as_ref()
    ));
    let p = status_patch(&original, &next);
    assert_eq!(
        p["status"]["volumesInUse"],
        json!(["kubernetes.io/csi/d.csi^h-1"])
    );
    let mut cleared = next.clone();
    apply_status(&mut cleared, &cfg, &inputs(), &t0);
    let p = status_patch(&next, &cleared);
    assert!(p["status"]["volumesInUse"].is_null() && p["status"].get("volumesInUse").is_some());
}

fn ts(s: &str) -> jiff::Timestamp {
    s.parse().unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

fn q(map: &Option<BTreeMap<String, Quantity>>, key: &str) -> String {
    map.as_ref()
        .and_then(|m| m.get(key))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "<absent>".into())
}

fn condition<'a>(node: &'a Node, t: &str) -> &'a NodeCondition {
    match node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == t))
    {
        Some(c) => c,
        None => panic!("no {t} condition"),
    }
}

fn strs(v: &[(&str, &str)]) -> BTreeMap<String, String> {
    v.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn initial_node_identity() {
    let mut cfg = settings();
    cfg.node_labels = strs(&[("team", "x"), (LABEL_ARCH, "custom")]);
    cfg.provider_id = "kind://docker/kind/node-a".into();
    cfg.register_with_taints = vec![Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }];
    let node = initial_node(&cfg, &inputs(), &ts("2025-01-01T00:00:00Z"));
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(node.metadata.name.as_deref(), Some("node-a"));
    assert_eq!(labels[LABEL_HOSTNAME], "node-a");
    assert_eq!(labels[LABEL_OS], "linux");
    assert_eq!(labels[LABEL_BETA_OS], "linux");
    assert_eq!(labels[LABEL_BETA_ARCH], go_arch());
    assert_eq!(labels["team"], "x");
    assert_eq!(
        labels[LABEL_ARCH], "custom",
        "--node-labels override defaults"
    );
    if cfg!(target_arch = "x86_64") {
        assert_eq!(go_arch(), "amd64");
    }
    assert_eq!(
        node.metadata.annotations,
        Some(strs(&[(ANNOTATION_CONTROLLER_ATTACH_DETACH, "true")]))
    );
    let spec = node.spec.clone().unwrap_or_default();
    assert_eq!(
        spec.provider_id.as_deref(),
        Some("kind://docker/kind/node-a")
    );
    assert_eq!(spec.taints.as_ref().map(Vec::len), Some(1));
    assert_eq!(spec.unschedulable, None);

    cfg.enable_controller_attach_detach = false;
    cfg.external_cloud_provider = true;
    let node = initial_node(&cfg, &inputs(), &ts("2025-01-01T00:00:00Z"));
    assert_eq!(node.metadata.annotations, None);
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert_eq!(taints.len(), 2);
    assert_eq!(taints[1].key, TAINT_EXTERNAL_CLOUD_PROVIDER);
    assert_eq!(taints[1].value.as_deref(), Some("true"));
    assert_eq!(taints[1].effect, "NoSchedule");
}

#[test]
fn node_info_addresses_and_endpoints() {
    let node = initial_node(&settings(), &inputs(), &ts("2025-01-01T00:00:00Z"));
    let v = serde_json::to_value(&node.status).unwrap_or_default();
    assert_eq!(
        v["addresses"],
        json!([
            {"type": "InternalIP", "address": "10.0.0.5"},
            {"type": "Hostname", "address": "node-a"},
        ])
    );
    assert_eq!(
        v["daemonEndpoints"],
        json!({"kubeletEndpoint": {"Port": 10250}})
    );
    let info = &v["nodeInfo"];
    assert_eq!(info["machineID"], "mid");
    assert_eq!(info["systemUUID"], "uuid");
    assert_eq!(info["bootID"], "boot");
    assert_eq!(info["kernelVersion"], "6.1.0");
    assert_eq!(info["osImage"], "Debian GNU/Linux 12 (bookworm)");
    assert_eq!(info["containerRuntimeVersion"], "containerd://2.1.4");
    assert_eq!(info["kubeletVersion"], "v1.34.0");
    assert_eq!(info["kubeProxyVersion"], "");
    assert_eq!(info["operatingSystem"], "linux");
    assert_eq!(info["architecture"], go_arch());
    assert_eq!(info["swap"], json!({"capacity": 0}));
    assert!(v.get("images").is_none(), "no images means no list");
}

#[test]
fn dual_stack_and_external_cloud_addresses() {
    let mut cfg = settings();
    cfg.node_ips = vec!["10.0.0.5".into(), "fd00::5".into()];
    let node = initial_node(&cfg, &inputs(), &ts("2025-01-01T00:00:00Z"));
    let types: Vec<(String, String)> = node
        .status
        .and_then(|s| s.addresses)
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert_eq!(
        types,
        vec![
            ("InternalIP".into(), "10.0.0.5".into()),
            ("InternalIP".into(), "fd00::5".into()),
            ("Hostname".into(), "node-a".into()),
        ]
    );

    let mut cfg = settings();
    cfg.external_cloud_provider = true;
    cfg.node_ip_given = true;
    let mut node = initial_node(&cfg, &inputs(), &ts("2025-01-01T00:00:00Z"));
    assert_eq!(
        node.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_PROVIDED_NODE_IP))
            .map(String::as_str),
        Some("10.0.0.5")
    );
    // Addresses the cloud provider set are left alone.
    if let Some(s) = node.status.as_mut() {
        s.addresses = Some(vec![k8s_openapi::api::core::v1::NodeAddress {
            type_: "ExternalIP".into(),
            address: "1.2.3.4".into(),
        }]);
    }
    apply_status(&mut node, &cfg, &inputs(), &ts("2025-01-01T00:00:10Z"));
    assert_eq!(
        node.status.and_then(|s| s.addresses).map(|a| a.len()),
        Some(1)
    );
}

#[test]
fn capacity_and_allocatable_without_reservations() {
    let node = initial_node(&settings(), &inputs(), &ts("2025-01-01T00:00:00Z"));
    let s = node.status.unwrap_or_default();
    assert_eq!(q(&s.capacity, CPU), "4");
    assert_eq!(q(&s.capacity, MEMORY), "16Gi");
    assert_eq!(q(&s.capacity, PODS), "110");
    assert_eq!(q(&s.capacity, EPHEMERAL_STORAGE), "100Gi");
    assert_eq!(q(&s.capacity, "hugepages-2Mi"), "0");
    assert_eq!(q(&s.capacity, "hugepages-1Gi"), "2Gi");
    assert_eq!(q(&s.allocatable, CPU), "4");
    assert_eq!(
        q(&s.allocatable, MEMORY),
        "14Gi",
        "huge pages come out of memory"
    );
    assert_eq!(q(&s.allocatable, "hugepages-1Gi"), "2Gi");
    assert_eq!(q(&s.allocatable, EPHEMERAL_STORAGE), "100Gi");
}

#[test]
fn allocatable_subtracts_reservations_and_thresholds() {
    let mut cfg = settings();
    cfg.allocatable.system_reserved = strs(&[("cpu", "100m"), ("memory", "1Gi"), ("pid", "1000")]);
    cfg.allocatable.kube_reserved = strs(&[("memory", "500Mi"), ("ephemeral-storage", "1Gi")]);
    cfg.allocatable.eviction_hard = strs(&[
        ("memory.available", "100Mi"),
        ("nodefs.available", "10%"),
        ("imagefs.available", "15%"),
    ]);
    let node = initial_node(&cfg, &inputs(), &ts("2025-01-01T00:00:00Z"));
    let s = node.status.unwrap_or_default();
    assert_eq!(q(&s.allocatable, CPU), "3900m");
    // 16Gi - 1Gi - 500Mi - 100Mi - 2Gi of huge pages.
    assert_eq!(q(&s.allocatable, MEMORY), "12712Mi");
    // 100Gi - 1Gi - float32(10%) of 100Gi, exactly as upstream rounds it.
    assert_eq!(
        q(&s.allocatable, EPHEMERAL_STORAGE),
        (100 * GI - GI - 10_737_418_400).to_string()
    );
    assert_eq!(q(&s.allocatable, PODS), "110");
    assert!(
        s.allocatable
            .as_ref()
            .is_some_and(|a| !a.contains_key("pid")),
        "reservations for resources without capacity are ignored"
    );
}

#[test]
fn percentage_memory_threshold_and_floor_at_zero() {
    let mut cfg = settings();
    cfg.allocatable.eviction_hard = strs(&[("memory.available", "5%")]);
    let mut i = inputs();
    i.machine.hugepages.clear();
    let node = initial_node(&cfg, &i, &ts("2025-01-01T00:00:00Z"));
    let s = node.status.unwrap_or_default();
    assert_eq!(
        q(&s.allocatable, MEMORY),
        (16 * GI - 858_993_472).to_string()
    );

    cfg.allocatable.system_reserved = strs(&[("memory", "100Gi"), ("cpu", "8")]);
    let node = initial_node(&cfg, &i, &ts("2025-01-01T00:00:00Z"));
    let s = node.status.unwrap_or_default();
    assert_eq!(q(&s.allocatable, MEMORY), "0");
    assert_eq!(q(&s.allocatable, CPU), "0");
}

#[test]
fn pods_per_core_caps_pods() {
    let mut cfg = settings();
    cfg.allocatable.pods_per_core = 10;
    let node = initial_node(&cfg, &inputs(), &ts("2025-01-01T00:00:00Z"));
    assert_eq!(q(&node.status.unwrap_or_default().capacity, PODS), "40");
    cfg.allocatable.pods_per_core = 1000;
    let node = initial_node(&cfg, &inputs(), &ts("2025-01-01T00:00:00Z"));
    assert_eq!(q(&node.status.unwrap_or_default().capacity, PODS), "110");
}

#[test]
fn missing_root_fs_makes_the_node_not_ready() {
    let mut i = inputs();
    i.machine.root_fs_bytes = None;
    let node = initial_node(&settings(), &i, &ts("2025-01-01T00:00:00Z"));
    let ready = condition(&node, COND_READY);
    assert_eq!(ready.status, "False");
    assert_eq!(
        ready.message.as_deref(),
        Some("missing node capacity for resources: ephemeral-storage")
    );
    let mut cfg = settings();
    cfg.allocatable.local_storage_capacity_isolation = false;
    let node = initial_node(&cfg, &i, &ts("2025-01-01T00:00:00Z"));
    assert_eq!(condition(&node, COND_READY).status, "True");
}

#[test]
fn fresh_conditions() {
    let node = initial_node(&settings(), &inputs(), &ts("2025-01-01T00:00:00.700Z"));
    let conds = node.status.and_then(|s| s.conditions).unwrap_or_default();
    let summary: Vec<(&str, &str, &str, &str)> = conds
        .iter()
        .map(|c| {
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available"
            ),
            (
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure"
            ),
            (
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available"
            ),
            (
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status"
            ),
        ]
    );
    let second = Some(Time(ts("2025-01-01T00:00:00Z")));
    for c in &conds {
        assert_eq!(c.last_heartbeat_time, second, "times are whole seconds");
        assert_eq!(c.last_transition_time, second);
    }
}

#[test]
fn transition_times_carry_over_until_the_status_flips() {
    let cfg = settings();
    let t0 = ts("2025-01-01T00:00:00Z");
    let t1 = ts("2025-01-01T00:00:10Z");
    let t2 = ts("2025-01-01T00:00:20Z");
    let original = initial_node(&cfg, &inputs(), &t0);

    let mut next = original.clone();
    apply_status(&mut next, &cfg, &inputs(), &t1);
    let ready = condition(&next, COND_READY);
    assert_eq!(ready.last_heartbeat_time, Some(Time(t1)));
    assert_eq!(ready.last_transition_time, Some(Time(t0)));
    assert!(
        !status_changed(original.status.as_ref(), next.status.as_ref()),
        "a heartbeat alone is no change"
    );

    let mut broken = inputs();
    broken.ready_errors = vec![
        "container runtime is down".into(),
        "PLEG is not healthy: x".into(),
    ];
    broken.pressure.disk = true;
    let mut third = next.clone();
    apply_status(&mut third, &cfg, &broken, &t2);
    let ready = condition(&third, COND_READY);
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("[container runtime is down, PLEG is not healthy: x]")
    );
    assert_eq!(ready.last_transition_time, Some(Time(t2)));
    let disk = condition(&third, "DiskPressure");
    assert_eq!(disk.status, "True");
    assert_eq!(disk.reason.as_deref(), Some("KubeletHasDiskPressure"));
    assert_eq!(disk.last_transition_time, Some(Time(t2)));
    let mem = condition(&third, "MemoryPressure");
    assert_eq!(mem.last_transition_time, Some(Time(t0)));
    assert!(status_changed(next.status.as_ref(), third.status.as_ref()));
}

#[test]
fn unchanged_pressure_keeps_a_foreign_reason() {
    let cfg = settings();
    let mut node = initial_node(&cfg, &inputs(), &ts("2025-01-01T00:00:00Z"));
    if let Some(c) = node
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|c| c.iter_mut().find(|c| c.type_ == "PIDPressure"))
    {
        c.reason = Some("SomethingElse".into());
    }
    apply_status(&mut node, &cfg, &inputs(), &ts("2025-01-01T00:00:10Z"));
    assert_eq!(
        condition(&node, "PIDPressure").reason.as_deref(),
        Some("SomethingElse")
    );
}

#[test]
fn ready_condition_from_previous() {
    let t0 = Time(ts("2025-01-01T00:00:00Z"));
    let t1 = Time(ts("2025-01-01T00:01:00Z"));
    let ok = ready_condition(None, &[], &t0);
    assert_eq!(ok.last_transition_time, Some(t0.clone()));
    let still = ready_condition(Some(&ok), &[], &t1);
    assert_eq!(still.last_transition_time, Some(t0.clone()));
    assert_eq!(still.last_heartbeat_time, Some(t1.clone()));
    let bad = ready_condition(Some(&ok), &["x".into(), "x".into()], &t1);
    assert_eq!(bad.message.as_deref(), Some("x"), "duplicates collapse");
    assert_eq!(bad.last_transition_time, Some(t1));
}

#[test]
fn required_labels_are_restored() {
    let cfg = settings();
    let mut node = initial_node(&cfg, &inputs(), &ts("2025-01-01T00:00:00Z"));
    if let Some(l) = node.metadata.labels.as_mut() {
        l.remove(LABEL_OS);
    }
    let before = node.clone();
    assert!(ensure_os_arch_labels(&mut node.metadata));
    assert!(!ensure_os_arch_labels(&mut node.metadata));
    apply_status(&mut node, &cfg, &inputs(), &ts("2025-01-01T00:00:10Z"));
    let patch = status_patch(&before, &node);
    assert_eq!(patch["metadata"]["labels"], json!({LABEL_OS: "linux"}));
}

fn image(id: &str, size: u64, tags: &[&str], digests: &[&str]) -> api::Image {
    api::Image {
        id: id.into(),
        size,
        repo_tags: tags.iter().map(|s| s.to_string()).collect(),
        repo_digests: digests.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

#[test]
fn images_sorted_capped_and_named() {
    let imgs = vec![
        image("a", 10, &["small:1"], &[]),
        image("b", 300, &["big:1", "big:2"], &["big@sha256:1"]),
        image("c", 50, &[], &["mid@sha256:2"]),
        image("d", 50, &["t1", "t2", "t3", "t4"], &["d1", "d2"]),
    ];
    let out = node_images(&imgs, 3);
    let names: Vec<Vec<String>> = out
        .iter()
        .map(|i| i.names.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        vec![
            vec!["big@sha256:1".to_string(), "big:1".into(), "big:2".into()],
            vec![
                "d1".into(),
                "d2".into(),
                "t1".into(),
                "t2".into(),
                "t3".into()
            ],
            vec!["mid@sha256:2".into()],
        ],
        "largest first, equal sizes by id descending, digests before tags, five names at most"
    );
    assert_eq!(out[0].size_bytes, Some(300));
    assert_eq!(node_images(&imgs, -1).len(), 4);
    assert!(node_images(&imgs, 0).is_empty());
}

#[test]
fn patch_decision() {
    let report = Duration::from_secs(300);
    assert!(should_patch(false, None, report), "never reported");
    assert!(!should_patch(false, Some(Duration::from_secs(10)), report));
    assert!(should_patch(true, Some(Duration::from_secs(10)), report));
    assert!(should_patch(false, Some(report), report));
}

#[test]
fn status_patch_shape() {
    let cfg = settings();
    let t0 = ts("2025-01-01T00:00:00Z");
    let mut original = initial_node(&cfg, &inputs(), &t0);
    if let Some(s) = original.status.as_mut() {
        s.capacity
            .get_or_insert_with(BTreeMap::new)
            .insert("example.com/gone".into(), Quantity("1".into()));
    }
    let mut i = inputs();
    i.machine.memory_bytes = Some(8 * GI);
    i.images = node_images(&[image("x", 1, &["x:1"], &[])], 50);
    let mut cfg2 = cfg.clone();
    cfg2.node_ips = vec!["10.0.0.6".into()];
    let mut next = original.clone();
    if let Some(s) = next.status.as_mut() {
        s.capacity
            .get_or_insert_with(BTreeMap::new)
            .remove("example.com/gone");
    }
    apply_status(&mut next, &cfg2, &i, &ts("2025-01-01T00:00:10Z"));
    assert!(status_changed(
        original.status.as_ref(),
        next.status.as_ref()
    ));
    let p = status_patch(&original, &next);
    let st = &p["status"];
    assert_eq!(st["conditions"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        st["addresses"],
        json!([
            {"$patch": "replace"},
            {"type": "InternalIP", "address": "10.0.0.6"},
            {"type": "Hostname", "address": "node-a"},
        ])
    );
    assert_eq!(
        st["capacity"],
        json!({"memory": "8Gi", "example.com/gone": null})
    );
    assert_eq!(st["allocatable"]["memory"], "6Gi");
    assert_eq!(st["images"], json!([{"names": ["x:1"], "sizeBytes": 1}]));
    assert!(
        st.get("nodeInfo").is_none(),
        "unchanged fields are left out"
    );
    assert!(p.get("metadata").is_none());
}

#[test]
fn quantity_spelling_is_not_a_change() {
    let cfg = settings();
    let original = initial_node(&cfg, &inputs(), &ts("2025-01-01T00:00:00Z"));
    let mut respelled = original.clone();
    if let Some(c) = respelled.status.as_mut().and_then(|s| s.capacity.as_mut()) {
        c.insert(MEMORY.into(), Quantity((16 * GI).to_string()));
    }
    assert!(!status_changed(
        original.status.as_ref(),
        respelled.status.as_ref()
    ));
}

#[test]
fn reconcile_an_existing_node() {
    let cfg = settings();
    let initial = initial_node(&cfg, &inputs(), &ts("2025-01-01T00:00:00Z"));
    assert_eq!(reconcile_existing(&initial, &initial), None);

    let mut existing = initial.clone();
    existing.metadata.labels = Some(strs(&[
        (LABEL_HOSTNAME, "old-name"),
        (LABEL_OS, "linux"),
        ("keep", "me"),
    ]));
    existing.metadata.annotations = Some(strs(&[("other", "x")]));
    if let Some(s) = existing.status.as_mut() {
        for m in [s.capacity.as_mut(), s.allocatable.as_mut()]
            .into_iter()
            .flatten()
        {
            m.insert("hugepages-32Mi".into(), Quantity("0".into()));
            m.insert("hugepages-1Gi".into(), Quantity("1Gi".into()));
        }
    }
    let patch = reconcile_existing(&initial, &existing);
    let Some(p) = patch else {
        panic!("expected a patch");
    };
    assert_eq!(
        p["metadata"]["labels"],
        json!({
            LABEL_HOSTNAME: "node-a",
            LABEL_ARCH: go_arch(),
            LABEL_BETA_OS: "linux",
            LABEL_BETA_ARCH: go_arch(),
        })
    );
    assert_eq!(
        p["metadata"]["annotations"],
        json!({ANNOTATION_CONTROLLER_ATTACH_DETACH: "true"})
    );
    assert_eq!(
        p["status"]["capacity"],
        json!({"hugepages-32Mi": null, "hugepages-1Gi": "2Gi"})
    );
    assert_eq!(
        p["status"]["allocatable"],
        json!({"hugepages-32Mi": null, "hugepages-1Gi": "2Gi"})
    );

    // Attach/detach turned off: the annotation goes.
    let mut off = cfg.clone();
    off.enable_controller_attach_detach = false;
    let initial_off = initial_node(&off, &inputs(), &ts("2025-01-01T00:00:00Z"));
    let p = reconcile_existing(&initial_off, &initial).unwrap_or_default();
    assert_eq!(
        p["metadata"]["annotations"],
        json!({ANNOTATION_CONTROLLER_ATTACH_DETACH: null})
    );

    // A Node without resource maps gets the whole set.
    let mut bare = initial.clone();
    bare.status = None;
    let p = reconcile_existing(&initial, &bare).unwrap_or_default();
    assert_eq!(p["status"]["capacity"]["cpu"], "4");
    assert_eq!(p["status"]["allocatable"]["memory"], "14Gi");
}

#[test]
fn aggregate_like_kubernetes() {
    assert_eq!(aggregate_errors(&[]), None);
    assert_eq!(aggregate_errors(&["a".into()]), Some("a".into()));
    assert_eq!(
        aggregate_errors(&["a".into(), "b".into(), "a".into()]),
        Some("[a, b]".into())
    );
}

#[test]
fn runtime_handlers_are_listed_when_known() {
    let cfg = settings();
    let mut i = inputs();
    i.runtime_handlers = Some(node_runtime_handlers(&[api::RuntimeHandler {
        name: "runc".into(),
        features: Some(api::RuntimeHandlerFeatures {
            recursive_read_only_mounts: true,
            user_namespaces: false,
        }),
    }]));
    let node = initial_node(&cfg, &i, &ts("2025-01-01T00:00:00Z"));
    let v = serde_json::to_value(&node.status).unwrap_or_default();
    assert_eq!(
        v["runtimeHandlers"],
        json!([{"name": "runc", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}}])
    );
    i.runtime_handlers = Some(Vec::new());
    let node = initial_node(&cfg, &i, &ts("2025-01-01T00:00:00Z"));
    assert_eq!(node.status.and_then(|s| s.runtime_handlers), None);
}
