//! The Node object and its status as plain functions of fixed inputs: the initial Node the
//! kubelet registers, the status it keeps posting, what must be reconciled on a Node that
//! already exists, whether a status changed, and the patch that carries the change.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeRuntimeHandler, NodeSpec, NodeStatus, NodeSwapStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::{Map, Value, json};

use super::NodeSettings;
use crate::cm::allocatable;
pub use crate::cm::allocatable::{EPHEMERAL_STORAGE, PODS};
use crate::cri::api;
use crate::eviction::Pressure;
use crate::host::MachineFacts;
pub use crate::pod::qos::{CPU, HUGEPAGES_PREFIX, MEMORY};
use crate::quantity::{self, Amount, Style};

pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_OS: &str = "kubernetes.io/os";
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
pub const LABEL_BETA_OS: &str = "beta.kubernetes.io/os";
pub const LABEL_BETA_ARCH: &str = "beta.kubernetes.io/arch";
pub const ANNOTATION_CONTROLLER_ATTACH_DETACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";
pub const ANNOTATION_PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";
pub const TAINT_EXTERNAL_CLOUD_PROVIDER: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// Labels a restarted kubelet puts back on an existing Node when they differ from what it
/// would register with.
const DEFAULT_LABELS: [&str; 12] = [
    LABEL_HOSTNAME,
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    LABEL_OS,
    LABEL_ARCH,
    "node.kubernetes.io/windows-build",
    LABEL_BETA_OS,
    LABEL_BETA_ARCH,
];

pub const COND_READY: &str = "Ready";

/// At most this many names are reported per image.
const MAX_NAMES_PER_IMAGE: usize = 5;

pub const OS: &str = "linux";

/// The architecture as Go (and so every Kubernetes label and image index) names it.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    }
}

/// Everything a status is computed from, gathered before any object is touched.
#[derive(Clone, Debug, Default)]
pub struct StatusInputs {
    pub machine: MachineFacts,
    /// "<runtime name>://<runtime version>".
    pub container_runtime_version: String,
    /// Already sorted and capped (see [`node_images`]).
    pub images: Vec<ContainerImage>,
    /// None until the runtime has reported ready once.
    pub runtime_handlers: Option<Vec<NodeRuntimeHandler>>,
    /// Why the node is not ready (runtime, network, PLEG); empty when it is.
    pub ready_errors: Vec<String>,
    pub pressure: Pressure,
    /// Attachable volumes mounted or being mounted here, sorted (`volumesInUse`).
    pub volumes_in_use: Vec<String>,
    /// Device plugins' resources.
    pub devices: crate::cm::devicemanager::Capacity,
}

fn now_time(now: &jiff::Timestamp) -> Time {
    // The API keeps condition times to the second; a finer time would never compare equal to
    // what is read back.
    Time(jiff::Timestamp::from_second(now.as_second()).unwrap_or(*now))
}

/// The labels this kubelet registers its Node with: identity labels, then `--node-labels`.
pub fn node_labels(cfg: &NodeSettings) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = [
        (LABEL_HOSTNAME, cfg.hostname.as_str()),
        (LABEL_OS, OS),
        (LABEL_ARCH, go_arch()),
        (LABEL_BETA_OS, OS),
        (LABEL_BETA_ARCH, go_arch()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in &cfg.node_labels {
        labels.insert(k.clone(), v.clone());
    }
    labels
}

/// The Node this kubelet registers: identity labels, attach/detach annotation, taints,
/// provider ID, and a full status.
pub fn initial_node(cfg: &NodeSettings, inputs: &StatusInputs, now: &jiff::Timestamp) -> Node {
    let labels = node_labels(cfg);
    let mut annotations = BTreeMap::new();
    if cfg.enable_controller_attach_detach {
        annotations.insert(
            ANNOTATION_CONTROLLER_ATTACH_DETACH.to_string(),
            "true".to_string(),
        );
    }
    let mut taints = cfg.register_with_taints.clone();
    if cfg.external_cloud_provider {
        taints.push(Taint {
            key: TAINT_EXTERNAL_CLOUD_PROVIDER.to_string(),
            value: Some("true".to_string()),
            effect: "NoSchedule".to_string(),
            time_added: None,
        });
    }
    let mut node = Node {
        metadata: ObjectMeta {
            name: Some(cfg.hostname.clone()),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            provider_id: (!cfg.provider_id.is_empty()).then(|| cfg.provider_id.clone()),
            ..Default::default()
        }),
        status: None,
    };
    apply_status(&mut node, cfg, inputs, now);
    node
}

/// Brings `node`'s status up to date in place, keeping whatever it does not own.
pub fn apply_status(
    node: &mut Node,
    cfg: &NodeSettings,
    inputs: &StatusInputs,
    now: &jiff::Timestamp,
) {
    let now = now_time(now);
    let status = node.status.get_or_insert_with(Default::default);
    set_addresses(&mut node.metadata, status, cfg);
    set_machine_info(status, cfg, &inputs.machine, &inputs.devices);
    set_version_info(status, cfg, inputs);
    status.daemon_endpoints = Some(NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint { port: cfg.port }),
    });
    status.images = (!inputs.images.is_empty()).then(|| inputs.images.clone());
    status.volumes_in_use =
        (!inputs.volumes_in_use.is_empty()).then(|| inputs.volumes_in_use.clone());
    if let Some(h) = &inputs.runtime_handlers {
        // An empty list reads back as absent; keep it absent so it never looks like a change.
        status.runtime_handlers = (!h.is_empty()).then(|| h.clone());
    }
    set_conditions(status, cfg, inputs, &now);
}

/// Puts back the os/arch labels the scheduler relies on when they are missing or wrong on
/// the Node as read; true when it had to, which counts as a change on its own.
pub fn ensure_os_arch_labels(meta: &mut ObjectMeta) -> bool {
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in [(LABEL_OS, OS), (LABEL_ARCH, go_arch())] {
        if labels.get(k).map(String::as_str) != Some(v) {
            labels.insert(k.to_string(), v.to_string());
            changed = true;
        }
    }
    changed
}

fn set_addresses(meta: &mut ObjectMeta, status: &mut NodeStatus, cfg: &NodeSettings) {
    if cfg.external_cloud_provider {
        if cfg.node_ip_given {
            meta.annotations.get_or_insert_with(BTreeMap::new).insert(
                ANNOTATION_PROVIDED_NODE_IP.to_string(),
                cfg.node_ips.join(","),
            );
        } else if let Some(a) = meta.annotations.as_mut() {
            a.remove(ANNOTATION_PROVIDED_NODE_IP);
        }
        // The cloud provider's addresses take precedence once it has set them.
        if status.addresses.as_ref().is_some_and(|a| !a.is_empty()) {
            return;
        }
    }
    let mut addrs: Vec<NodeAddress> = cfg
        .node_ips
        .iter()
        .take(2)
        .map(|ip| NodeAddress {
            type_: "InternalIP".to_string(),
            address: ip.clone(),
        })
        .collect();
    addrs.push(NodeAddress {
        type_: "Hostname".to_string(),
        address: cfg.hostname.clone(),
    });
    status.addresses = Some(addrs);
}

fn set_machine_info(
    status: &mut NodeStatus,
    cfg: &NodeSettings,
    m: &MachineFacts,
    devices: &crate::cm::devicemanager::Capacity,
) {
    let info = status.node_info.get_or_insert_with(Default::default);
    info.machine_id = m.machine_id.clone();
    info.system_uuid = m.system_uuid.clone();
    info.boot_id = m.boot_id.clone();
    info.swap = Some(NodeSwapStatus {
        capacity: Some(i64::try_from(m.swap_bytes.unwrap_or(0)).unwrap_or(i64::MAX)),
    });

    let capacity = status.capacity.get_or_insert_with(BTreeMap::new);
    for (name, amount) in allocatable::capacity(m, &cfg.allocatable) {
        let style = allocatable::style_for(&name);
        capacity.insert(name, amount.to_quantity(style));
    }
    // Allocatable follows every capacity the status holds, each in its capacity's spelling.
    let amounts: allocatable::Resources = capacity
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), Amount::of(v).ok()?)))
        .collect();
    let allocatable = status.allocatable.get_or_insert_with(BTreeMap::new);
    allocatable.retain(|k, _| capacity.contains_key(k) || !is_extended_resource(k));
    for (name, left) in allocatable::allocatable(&cfg.allocatable, &amounts) {
        let style = capacity.get(&name).map_or(Style::Decimal, Style::of);
        allocatable.insert(name, left.to_quantity(style));
    }
    set_device_resources(capacity, allocatable, devices);
}

/// Device plugins' resources: every device in capacity, the healthy ones in allocatable; a
/// resource whose plugin is gone for good stays at zero, so the scheduler still knows it for
/// a plugin resource (upstream's way).
fn set_device_resources(
    capacity: &mut BTreeMap<String, Quantity>,
    allocatable: &mut BTreeMap<String, Quantity>,
    devices: &crate::cm::devicemanager::Capacity,
) {
    let count = |n: i64| Quantity(n.to_string());
    for (name, n) in &devices.capacity {
        capacity.insert(name.clone(), count(*n));
    }
    for (name, n) in &devices.allocatable {
        allocatable.insert(name.clone(), count(*n));
    }
    for name in &devices.removed {
        capacity.insert(name.clone(), count(0));
        allocatable.insert(name.clone(), count(0));
    }
}

/// Resource names outside the kubernetes.io domain that device plugins advertise.
fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.starts_with("kubernetes.io/") && !name.starts_with("requests.")
}

fn set_version_info(status: &mut NodeStatus, cfg: &NodeSettings, inputs: &StatusInputs) {
    let info: &mut NodeSystemInfo = status.node_info.get_or_insert_with(Default::default);
    info.kernel_version = inputs.machine.kernel_version.clone();
    info.os_image = inputs.machine.os_image.clone();
    info.container_runtime_version = inputs.container_runtime_version.clone();
    info.kubelet_version = cfg.kubelet_version.clone();
    // DisableNodeKubeProxyVersion is on by default in 1.34: the field is cleared.
    info.kube_proxy_version = String::new();
    info.operating_system = OS.to_string();
    info.architecture = go_arch().to_string();
}

/// The runtime's image list as the status shows it: largest first (ties by id, descending),
/// at most `max` images (-1: all), each with up to five names, digests before tags.
pub fn node_images(images: &[api::Image], max: i32) -> Vec<ContainerImage> {
    let mut sorted: Vec<&api::Image> = images.iter().collect();
    sorted.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| b.id.cmp(&a.id)));
    if let Ok(cap) = usize::try_from(max) {
        sorted.truncate(cap);
    }
    sorted
        .into_iter()
        .map(|img| {
            let names: Vec<String> = img
                .repo_digests
                .iter()
                .chain(img.repo_tags.iter())
                .take(MAX_NAMES_PER_IMAGE)
                .cloned()
                .collect();
            ContainerImage {
                names: Some(names),
                size_bytes: Some(i64::try_from(img.size).unwrap_or(i64::MAX)),
            }
        })
        .collect()
}

/// The runtime handlers as the node status lists them.
pub fn node_runtime_handlers(handlers: &[api::RuntimeHandler]) -> Vec<NodeRuntimeHandler> {
    handlers
        .iter()
        .map(|h| {
            let f = h.features.unwrap_or_default();
            NodeRuntimeHandler {
                name: Some(h.name.clone()),
                features: Some(k8s_openapi::api::core::v1::NodeRuntimeHandlerFeatures {
                    recursive_read_only_mounts: Some(f.recursive_read_only_mounts),
                    user_namespaces: Some(f.user_namespaces),
                }),
            }
        })
        .collect()
}

#[derive(Clone, Copy)]
struct PressureKind {
    type_: &'static str,
    /// Reason and message when under pressure, then when not.
    bad: (&'static str, &'static str),
    good: (&'static str, &'static str),
}

const MEMORY_PRESSURE: PressureKind = PressureKind {
    type_: "MemoryPressure",
    bad: (
        "KubeletHasInsufficientMemory",
        "kubelet has insufficient memory available",
    ),
    good: (
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
};
const DISK_PRESSURE: PressureKind = PressureKind {
    type_: "DiskPressure",
    bad: ("KubeletHasDiskPressure", "kubelet has disk pressure"),
    good: ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
};
const PID_PRESSURE: PressureKind = PressureKind {
    type_: "PIDPressure",
    bad: (
        "KubeletHasInsufficientPID",
        "kubelet has insufficient PID available",
    ),
    good: (
        "KubeletHasSufficientPID",
        "kubelet has sufficient PID available",
    ),
};

fn set_conditions(status: &mut NodeStatus, cfg: &NodeSettings, inputs: &StatusInputs, now: &Time) {
    let mut errors = inputs.ready_errors.clone();
    let mut required = vec![CPU, MEMORY, PODS];
    if cfg.allocatable.local_storage_capacity_isolation {
        required.push(EPHEMERAL_STORAGE);
    }
    let capacity = status.capacity.clone().unwrap_or_default();
    let missing: Vec<&str> = required
        .into_iter()
        .filter(|r| !capacity.contains_key(*r))
        .collect();
    if !missing.is_empty() {
        errors.push(format!(
            "missing node capacity for resources: {}",
            missing.join(", ")
        ));
    }
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    update_pressure(conditions, MEMORY_PRESSURE, inputs.pressure.memory, now);
    update_pressure(conditions, DISK_PRESSURE, inputs.pressure.disk, now);
    update_pressure(conditions, PID_PRESSURE, inputs.pressure.pid, now);
    update_ready(conditions, &errors, now);
}

/// A pressure condition: the heartbeat always moves; reason, message and transition time
/// change only when the status flips.
fn update_pressure(conds: &mut Vec<NodeCondition>, kind: PressureKind, under: bool, now: &Time) {
    let idx = conds.iter().position(|c| c.type_ == kind.type_);
    let mut c = idx
        .map(|i| conds[i].clone())
        .unwrap_or_else(|| NodeCondition {
            type_: kind.type_.to_string(),
            status: "Unknown".to_string(),
            ..Default::default()
        });
    c.last_heartbeat_time = Some(now.clone());
    let (want, (reason, message)) = if under {
        ("True", kind.bad)
    } else {
        ("False", kind.good)
    };
    if c.status != want {
        c.status = want.to_string();
        c.reason = Some(reason.to_string());
        c.message = Some(message.to_string());
        c.last_transition_time = Some(now.clone());
    }
    match idx {
        Some(i) => conds[i] = c,
        None => conds.push(c),
    }
}

/// Joins errors the way Kubernetes aggregates them: duplicates dropped, a single error as
/// is, several as "[a, b]".
pub fn aggregate_errors(errors: &[String]) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.len() {
        0 => None,
        1 => Some(seen[0].to_string()),
        _ => Some(format!("[{}]", seen.join(", "))),
    }
}

/// The Ready condition for a set of readiness errors, keeping the previous transition time
/// while the status stays the same.
pub fn ready_condition(
    previous: Option<&NodeCondition>,
    errors: &[String],
    now: &Time,
) -> NodeCondition {
    let (status, reason, message) = match aggregate_errors(errors) {
        None => (
            "True",
            "KubeletReady",
            "kubelet is posting ready status".to_string(),
        ),
        Some(msg) => ("False", "KubeletNotReady", msg),
    };
    let transition = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Some(now.clone()),
    };
    NodeCondition {
        type_: COND_READY.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: transition,
    }
}

fn update_ready(conds: &mut Vec<NodeCondition>, errors: &[String], now: &Time) {
    let idx = conds.iter().position(|c| c.type_ == COND_READY);
    let c = ready_condition(idx.map(|i| &conds[i]), errors, now);
    match idx {
        Some(i) => conds[i] = c,
        None => conds.push(c),
    }
}

/// A status as JSON with what must not count as a change taken out: heartbeat times,
/// condition order, quantity spelling, and empty lists or maps versus absent ones.
fn comparable(status: Option<&NodeStatus>) -> Value {
    let mut v = status
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    if let Some(obj) = v.as_object_mut() {
        if let Some(Value::Array(conds)) = obj.get_mut("conditions") {
            for c in conds.iter_mut() {
                if let Some(co) = c.as_object_mut() {
                    co.remove("lastHeartbeatTime");
                }
            }
            conds.sort_by(|a, b| a["type"].as_str().cmp(&b["type"].as_str()));
        }
        for key in ["capacity", "allocatable"] {
            if let Some(Value::Object(m)) = obj.get_mut(key) {
                for q in m.values_mut() {
                    if let Some(amount) = q.as_str().and_then(|s| Amount::parse(s).ok()) {
                        *q = Value::String(amount.nano().to_string());
                    }
                }
            }
        }
        obj.retain(|_, v| match v {
            Value::Null => false,
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            _ => true,
        });
    }
    v
}

/// Whether anything but heartbeat times differs between two statuses.
pub fn status_changed(old: Option<&NodeStatus>, new: Option<&NodeStatus>) -> bool {
    comparable(old) != comparable(new)
}

/// Whether a status must be sent: it changed, or nothing has been reported for the report
/// period (or ever).
pub fn should_patch(
    changed: bool,
    since_last_report: Option<std::time::Duration>,
    report_every: std::time::Duration,
) -> bool {
    changed || since_last_report.is_none_or(|d| d >= report_every)
}

fn string_map_diff(
    old: Option<&BTreeMap<String, String>>,
    new: Option<&BTreeMap<String, String>>,
) -> Map<String, Value> {
    let empty = BTreeMap::new();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let mut out = Map::new();
    for (k, v) in new {
        if old.get(k) != Some(v) {
            out.insert(k.clone(), Value::String(v.clone()));
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.insert(k.clone(), Value::Null);
        }
    }
    out
}

fn quantity_map_diff(
    old: Option<&BTreeMap<String, Quantity>>,
    new: Option<&BTreeMap<String, Quantity>>,
) -> Map<String, Value> {
    let empty = BTreeMap::new();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let mut out = Map::new();
    for (k, v) in new {
        if !old.get(k).is_some_and(|o| quantity::same_amount(o, v)) {
            out.insert(k.clone(), Value::String(v.0.clone()));
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.insert(k.clone(), Value::Null);
        }
    }
    out
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The strategic merge patch taking `orig` to `new` for the status subresource: conditions
/// merge by type (so conditions set by others survive), addresses are replaced whole (their
/// merge key is wrong upstream), resource maps carry changed and removed keys only, and
/// metadata carries label/annotation changes.
pub fn status_patch(orig: &Node, new: &Node) -> Value {
    let default = NodeStatus::default();
    let o = orig.status.as_ref().unwrap_or(&default);
    let n = new.status.as_ref().unwrap_or(&default);
    let mut status = Map::new();
    if let Some(conds) = &n.conditions {
        status.insert("conditions".into(), to_json(conds));
    }
    if o.addresses != n.addresses {
        let mut list = Vec::new();
        if o.addresses.as_ref().is_some_and(|a| !a.is_empty()) {
            list.push(json!({"$patch": "replace"}));
        }
        list.extend(n.addresses.iter().flatten().map(to_json));
        status.insert("addresses".into(), Value::Array(list));
    }
    for (key, old, new) in [
        ("capacity", o.capacity.as_ref(), n.capacity.as_ref()),
        (
            "allocatable",
            o.allocatable.as_ref(),
            n.allocatable.as_ref(),
        ),
    ] {
        let diff = quantity_map_diff(old, new);
        if !diff.is_empty() {
            status.insert(key.into(), Value::Object(diff));
        }
    }
    if o.node_info != n.node_info {
        status.insert("nodeInfo".into(), to_json(&n.node_info));
    }
    if o.daemon_endpoints != n.daemon_endpoints {
        status.insert("daemonEndpoints".into(), to_json(&n.daemon_endpoints));
    }
    if o.images != n.images {
        status.insert("images".into(), to_json(&n.images));
    }
    if o.runtime_handlers != n.runtime_handlers {
        status.insert("runtimeHandlers".into(), to_json(&n.runtime_handlers));
    }
    if o.volumes_in_use != n.volumes_in_use {
        status.insert("volumesInUse".into(), to_json(&n.volumes_in_use));
    }
    let mut patch = Map::new();
    let meta = metadata_patch(&orig.metadata, &new.metadata);
    if !meta.is_empty() {
        patch.insert("metadata".into(), Value::Object(meta));
    }
    patch.insert("status".into(), Value::Object(status));
    Value::Object(patch)
}

fn metadata_patch(orig: &ObjectMeta, new: &ObjectMeta) -> Map<String, Value> {
    let mut meta = Map::new();
    let labels = string_map_diff(orig.labels.as_ref(), new.labels.as_ref());
    if !labels.is_empty() {
        meta.insert("labels".into(), Value::Object(labels));
    }
    let annotations = string_map_diff(orig.annotations.as_ref(), new.annotations.as_ref());
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    meta
}

/// What a kubelet registering over an existing Node changes on it: the attach/detach
/// annotation, the default labels, and the huge page sizes (and whole resource maps when
/// the Node has none). None when nothing needs changing.
pub fn reconcile_existing(initial: &Node, existing: &Node) -> Option<Value> {
    let mut want = existing.clone();

    let cmad = initial
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_CONTROLLER_ATTACH_DETACH));
    let annotations = want.metadata.annotations.get_or_insert_with(BTreeMap::new);
    match cmad {
        Some(v) => {
            annotations.insert(ANNOTATION_CONTROLLER_ATTACH_DETACH.into(), v.clone());
        }
        None => {
            annotations.remove(ANNOTATION_CONTROLLER_ATTACH_DETACH);
        }
    }

    let labels = want.metadata.labels.get_or_insert_with(BTreeMap::new);
    for key in DEFAULT_LABELS {
        if let Some(v) = initial.metadata.labels.as_ref().and_then(|l| l.get(key)) {
            if v.is_empty() {
                labels.remove(key);
            } else {
                labels.insert(key.to_string(), v.clone());
            }
        }
    }

    let init_status = initial.status.clone().unwrap_or_default();
    let status = want.status.get_or_insert_with(Default::default);
    for (mine, theirs) in [
        (&mut status.capacity, &init_status.capacity),
        (&mut status.allocatable, &init_status.allocatable),
    ] {
        let map = mine.get_or_insert_with(|| theirs.clone().unwrap_or_default());
        map.retain(|k, _| {
            !k.starts_with(HUGEPAGES_PREFIX) || theirs.as_ref().is_some_and(|t| t.contains_key(k))
        });
        for (k, v) in theirs.iter().flatten() {
            if k.starts_with(HUGEPAGES_PREFIX) {
                map.insert(k.clone(), v.clone());
            }
        }
    }

    let mut patch = Map::new();
    let meta = metadata_patch(&existing.metadata, &want.metadata);
    if !meta.is_empty() {
        patch.insert("metadata".into(), Value::Object(meta));
    }
    let old_status = existing.status.clone().unwrap_or_default();
    let mut status_patch = Map::new();
    for (key, old, new) in [
        (
            "capacity",
            old_status.capacity.as_ref(),
            status.capacity.as_ref(),
        ),
        (
            "allocatable",
            old_status.allocatable.as_ref(),
            status.allocatable.as_ref(),
        ),
    ] {
        let diff = quantity_map_diff(old, new);
        if !diff.is_empty() {
            status_patch.insert(key.into(), Value::Object(diff));
        }
    }
    if !status_patch.is_empty() {
        patch.insert("status".into(), Value::Object(status_patch));
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

#[cfg(test)]
mod tests;
