//! Node allocatable: what the node has (capacity), what is held back from pods
//! (system-reserved, kube-reserved, hard eviction thresholds), what is left for them
//! (allocatable: reported in the node status and used by admission), and the limits on the
//! cgroup every pod lives under, so pods together cannot eat what is kept for the node.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::resources::{hugepage_size, milli_cpu_to_shares};
use super::{CgroupError, CgroupManager, PodResources};
use crate::config::Settings;
use crate::events::{EventRecorder, EventType};
use crate::host::MachineFacts;
use crate::pod::qos::{CPU, HUGEPAGES_PREFIX, MEMORY};
use crate::quantity::{self, Amount, NANO, Style};

pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// The enforceNodeAllocatable key that limits the pods' cgroup.
pub const PODS_KEY: &str = "pods";
/// Upstream retries a failed update this often: pods may use more memory than the new limit
/// until evictions bring them under it.
const RETRY: Duration = Duration::from_secs(60);

/// Amounts per resource name.
pub type Resources = BTreeMap<String, Amount>;

/// The settings that decide what the node offers pods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocatableSettings {
    pub max_pods: i32,
    pub pods_per_core: i32,
    /// Whether ephemeral storage is a resource (its capacity: the root dir's filesystem).
    pub local_storage_capacity_isolation: bool,
    pub system_reserved: BTreeMap<String, String>,
    pub kube_reserved: BTreeMap<String, String>,
    pub eviction_hard: BTreeMap<String, String>,
    pub enforce_node_allocatable: Vec<String>,
    /// systemReservedCgroup and kubeReservedCgroup, for their enforcement keys.
    pub system_reserved_cgroup: String,
    pub kube_reserved_cgroup: String,
}

impl From<&Settings> for AllocatableSettings {
    fn from(settings: &Settings) -> Self {
        let cfg = &settings.config;
        let (system_reserved, kube_reserved) = with_reserved_cpus(
            &cfg.system_reserved,
            &cfg.kube_reserved,
            &cfg.reserved_system_cpus,
        );
        AllocatableSettings {
            max_pods: cfg.max_pods,
            pods_per_core: cfg.pods_per_core,
            local_storage_capacity_isolation: cfg.local_storage_capacity_isolation,
            system_reserved,
            kube_reserved,
            eviction_hard: cfg.eviction_hard.clone(),
            enforce_node_allocatable: cfg.enforce_node_allocatable.clone(),
            system_reserved_cgroup: cfg.system_reserved_cgroup.clone(),
            kube_reserved_cgroup: cfg.kube_reserved_cgroup.clone(),
        }
    }
}

/// reservedSystemCPUs replaces the cpu of both reservations, as upstream does: kube-reserved
/// loses its cpu and system-reserved holds the number of CPUs listed.
pub fn with_reserved_cpus(
    system_reserved: &BTreeMap<String, String>,
    kube_reserved: &BTreeMap<String, String>,
    reserved_system_cpus: &str,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let (mut system, mut kube) = (system_reserved.clone(), kube_reserved.clone());
    let count = crate::cm::cpumanager::CpuSet::parse(reserved_system_cpus)
        .map(|s| s.len())
        .unwrap_or(0);
    if count > 0 {
        kube.remove(CPU);
        system.insert(CPU.to_string(), count.to_string());
    }
    (system, kube)
}

/// The resource name of a huge page size ("hugepages-2Mi").
pub fn hugepage_resource(page_size_bytes: u64) -> String {
    format!("{HUGEPAGES_PREFIX}{}", quantity::bytes(page_size_bytes).0)
}

/// How the API server prints each resource: counts in decimal, bytes in binary.
pub fn style_for(resource: &str) -> Style {
    match resource {
        CPU | PODS => Style::Decimal,
        _ => Style::Binary,
    }
}

/// What the machine has: cpu, memory, each huge page size, pods (maxPods, or podsPerCore
/// times the cpus when lower) and, with local storage isolation, ephemeral storage.
pub fn capacity(machine: &MachineFacts, s: &AllocatableSettings) -> Resources {
    let bytes = |b: u64| Amount::from_nano(i128::from(b) * NANO);
    let cpus = machine.num_cpus.unwrap_or(0);
    let mut out = Resources::new();
    out.insert(CPU.into(), Amount::from_units(cpus as i64));
    out.insert(MEMORY.into(), bytes(machine.memory_bytes.unwrap_or(0)));
    for hp in &machine.hugepages {
        out.insert(
            hugepage_resource(hp.page_size_bytes),
            bytes(hp.page_size_bytes.saturating_mul(hp.pages)),
        );
    }
    let max_pods = i64::from(s.max_pods);
    let pods = if s.pods_per_core > 0 {
        (cpus as i64)
            .saturating_mul(i64::from(s.pods_per_core))
            .min(max_pods)
    } else {
        max_pods
    };
    out.insert(PODS.into(), Amount::from_units(pods));
    if s.local_storage_capacity_isolation
        && let Some(size) = machine.root_fs_bytes
    {
        out.insert(EPHEMERAL_STORAGE.into(), bytes(size));
    }
    out
}

/// What is held back from each capacity: system-reserved + kube-reserved + the hard
/// eviction threshold that guards it (memory.available for memory, nodefs.available for
/// ephemeral-storage). Pods are never reserved.
pub fn reserved(s: &AllocatableSettings, capacity: &Resources) -> Resources {
    let mut out = Resources::new();
    for (name, cap) in capacity {
        if name == PODS {
            continue;
        }
        let mut total: Amount = [&s.system_reserved, &s.kube_reserved]
            .iter()
            .filter_map(|r| r.get(name))
            .filter_map(|v| Amount::parse(v).ok())
            .sum();
        let signal = match name.as_str() {
            MEMORY => Some("memory.available"),
            EPHEMERAL_STORAGE => Some("nodefs.available"),
            _ => None,
        };
        if let Some(value) = signal.and_then(|sig| s.eviction_hard.get(sig))
            && let Some(n) = threshold_amount(value, *cap)
        {
            total += n;
        }
        if total != Amount::ZERO {
            out.insert(name.clone(), total);
        }
    }
    out
}

/// What pods may have: capacity minus reservations, never below zero; memory that backs
/// huge pages is not available to ordinary allocations.
pub fn allocatable(s: &AllocatableSettings, capacity: &Resources) -> Resources {
    let held = reserved(s, capacity);
    let mut out: Resources = capacity
        .iter()
        .map(|(name, cap)| {
            let left = *cap - held.get(name).copied().unwrap_or_default();
            (name.clone(), left.max(Amount::ZERO))
        })
        .collect();
    let hugepages: Amount = capacity
        .iter()
        .filter(|(name, _)| name.starts_with(HUGEPAGES_PREFIX))
        .map(|(_, v)| *v)
        .sum();
    if hugepages > Amount::ZERO
        && let Some(memory) = out.get_mut(MEMORY)
    {
        *memory = (*memory - hugepages).max(Amount::ZERO);
    }
    out
}

/// An eviction threshold as an amount: a quantity as given, or a percentage of `capacity`
/// computed with upstream's float32 percentage so the result matches to the byte. 0% and
/// 100% mean no threshold.
pub fn threshold_amount(value: &str, capacity: Amount) -> Option<Amount> {
    let value = value.trim();
    if let Some(p) = value.strip_suffix('%') {
        if value == "0%" || value == "100%" {
            return None;
        }
        let parsed: f64 = p.trim().parse().ok()?;
        let fraction = (parsed as f32) / 100.0;
        if !(0.0..=1.0).contains(&fraction) {
            return None;
        }
        let cap = capacity.nano();
        let cap_units = cap.div_euclid(NANO) + i128::from(cap % NANO != 0);
        let amount = (cap_units as f64 * f64::from(fraction)) as i64;
        return Some(Amount::from_units(amount));
    }
    Amount::parse(value).ok().filter(|n| *n >= Amount::ZERO)
}

/// /proc/sys/kernel/pid_max, the node's pid capacity.
pub fn pid_max() -> Option<i64> {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse().ok())
}

/// The limits for the pods' cgroup: capacity minus system-reserved and kube-reserved when
/// "pods" is enforced, else the whole capacity (the cgroup's default cpu share is too low to
/// leave alone). Hard eviction thresholds are not subtracted here, as upstream: they shape the
/// reported allocatable, not the cgroup.
pub fn pods_limits(
    capacity: &Resources,
    pid_max: Option<i64>,
    s: &AllocatableSettings,
) -> PodResources {
    let enforced = s.enforce_node_allocatable.iter().any(|k| k == PODS_KEY);
    let held = |name: &str| -> Amount {
        if !enforced {
            return Amount::ZERO;
        }
        [&s.system_reserved, &s.kube_reserved]
            .iter()
            .filter_map(|r| r.get(name))
            .filter_map(|v| Amount::parse(v).ok())
            .sum()
    };
    let left = |name: &str| {
        let cap = capacity.get(name).copied().unwrap_or_default();
        (cap - held(name)).max(Amount::ZERO)
    };
    let pids = pid_max.map(|max| (Amount::from_units(max) - held("pid")).max(Amount::ZERO));
    // Each huge page size as the other resources: what the machine has, less what is held.
    let hugepage_limits = capacity
        .keys()
        .filter_map(|name| {
            let size = hugepage_size(name)?;
            Some((size, left(name).units().unwrap_or(i64::MAX)))
        })
        .collect();
    PodResources {
        cpu_shares: Some(milli_cpu_to_shares(left(CPU).millis().unwrap_or(i64::MAX))),
        memory_limit: Some(left(MEMORY).units().unwrap_or(i64::MAX)),
        pids_limit: pids.and_then(Amount::units),
        hugepage_limits,
        ..Default::default()
    }
}

/// The limits upstream puts on systemReservedCgroup or kubeReservedCgroup: cpu shares for
/// the reserved cpu, and unless only the compressible resources are enforced
/// ("system-reserved-compressible"), the reserved memory, pids and huge pages as limits.
/// Resources not reserved are left alone; nothing reserved is nothing to enforce.
pub fn reserved_limits(
    reserved: &BTreeMap<String, String>,
    compressible_only: bool,
) -> Option<PodResources> {
    if reserved.is_empty() {
        return None;
    }
    let amount = |name: &str| reserved.get(name).and_then(|v| Amount::parse(v).ok());
    let mut out = PodResources {
        cpu_shares: amount(CPU).map(|a| milli_cpu_to_shares(a.millis().unwrap_or(i64::MAX))),
        ..Default::default()
    };
    if compressible_only {
        return Some(out);
    }
    out.memory_limit = amount(MEMORY).and_then(Amount::units);
    out.pids_limit = amount("pid").and_then(Amount::units);
    out.hugepage_limits = reserved
        .keys()
        .filter_map(|name| Some((hugepage_size(name)?, amount(name)?.units()?)))
        .collect();
    Some(out)
}

/// One cgroup node allocatable enforcement limits, with upstream's words for the events.
#[derive(Clone, Debug, PartialEq)]
pub struct Enforcement {
    /// None for the pods' cgroup; else systemReservedCgroup or kubeReservedCgroup.
    pub cgroup: Option<String>,
    pub limits: PodResources,
    done: String,
    failed: String,
}

/// What enforceNodeAllocatable asks for: the pods' cgroup always (with the whole capacity
/// when "pods" is not a key), and the reserved cgroups their keys name.
pub fn enforcements(
    capacity: &Resources,
    pid_max: Option<i64>,
    s: &AllocatableSettings,
) -> Vec<Enforcement> {
    let mut out = vec![Enforcement {
        cgroup: None,
        limits: pods_limits(capacity, pid_max, s),
        done: "Updated Node Allocatable limit across pods".into(),
        failed: "Failed to update Node Allocatable Limits".into(),
    }];
    let keys = &s.enforce_node_allocatable;
    for (key, cgroup, reserved, who) in [
        (
            "system-reserved",
            &s.system_reserved_cgroup,
            &s.system_reserved,
            "System",
        ),
        (
            "kube-reserved",
            &s.kube_reserved_cgroup,
            &s.kube_reserved,
            "Kube",
        ),
    ] {
        let full = keys.iter().any(|k| k == key);
        let compressible = keys.iter().any(|k| *k == format!("{key}-compressible"));
        // Validation asks for the cgroup with either key.
        if !(full || compressible) || cgroup.is_empty() {
            continue;
        }
        let Some(limits) = reserved_limits(reserved, !full) else {
            continue;
        };
        out.push(Enforcement {
            cgroup: Some(cgroup.clone()),
            limits,
            done: format!(
                "Updated limits on {} reserved cgroup {cgroup}",
                who.to_lowercase()
            ),
            failed: format!("Failed to enforce {who} Reserved Cgroup Limits on {cgroup:?}"),
        });
    }
    out
}

/// With per-QoS cgroups: limits the reserved cgroups to what is reserved for them now, and
/// the pods' cgroup to what the node offers them in `tasks`. As upstream, a reserved cgroup
/// that cannot be limited (one that does not exist) stops the kubelet, while the pods'
/// cgroup is retried (pods may use more than the new limit until evictions).
pub fn spawn_enforcement(
    cgroups: std::sync::Arc<CgroupManager>,
    machine: &MachineFacts,
    settings: &AllocatableSettings,
    node_name: String,
    events: EventRecorder,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> Result<(), CgroupError> {
    if !cgroups.cgroups_per_qos() {
        return Ok(());
    }
    let (pods, reserved): (Vec<_>, Vec<_>) =
        enforcements(&capacity(machine, settings), pid_max(), settings)
            .into_iter()
            .partition(|e| e.cgroup.is_none());
    for e in &reserved {
        let cgroup = e.cgroup.as_deref().unwrap_or_default();
        if let Err(err) = cgroups.apply_reserved_limits(cgroup, &e.limits) {
            let err = CgroupError::Enforcement {
                what: e.failed.clone(),
                source: Box::new(err),
            };
            failed(&events, &node_name, &err.to_string());
            return Err(err);
        }
        applied(&events, &node_name, e);
    }
    for e in pods {
        tasks.background(
            "node allocatable enforcement",
            enforce(
                cgroups.clone(),
                e,
                node_name.clone(),
                events.clone(),
                cancel.child_token(),
            ),
        );
    }
    Ok(())
}

fn applied(events: &EventRecorder, node_name: &str, e: &Enforcement) {
    let cgroup = e.cgroup.as_deref().unwrap_or("the pods' cgroup");
    info!(cgroup, limits = ?e.limits, "Node allocatable limits applied");
    events.node(
        node_name,
        None,
        EventType::Normal,
        "NodeAllocatableEnforced",
        &e.done,
    );
}

fn failed(events: &EventRecorder, node_name: &str, message: &str) {
    warn!("{message}");
    events.node(
        node_name,
        None,
        EventType::Warning,
        "FailedNodeAllocatableEnforcement",
        message,
    );
}

/// Applies the pods' cgroup limits, retrying every minute until they take, and says so with
/// upstream's node events.
pub async fn enforce(
    cgroups: std::sync::Arc<CgroupManager>,
    pods: Enforcement,
    node_name: String,
    events: EventRecorder,
    cancel: CancellationToken,
) {
    loop {
        // cgroupfs writes block; they go where the pod cgroup writes go.
        let (c, limits) = (cgroups.clone(), pods.limits.clone());
        let result = match tokio::task::spawn_blocking(move || c.apply_node_limits(&limits)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(format!("cgroup task: {e}")),
        };
        match result {
            Ok(()) => return applied(&events, &node_name, &pods),
            Err(err) => failed(&events, &node_name, &format!("{}: {err}", pods.failed)),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PID_MAX: Option<i64> = Some(4_194_304);

    /// 4 cpus and 8Gi of memory.
    fn cap() -> Resources {
        [
            (CPU.to_string(), Amount::from_units(4)),
            (MEMORY.to_string(), Amount::from_units(8 << 30)),
        ]
        .into()
    }

    fn reserved(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn settings(
        enforce: &str,
        system: BTreeMap<String, String>,
        kube: BTreeMap<String, String>,
    ) -> AllocatableSettings {
        AllocatableSettings {
            system_reserved: system,
            kube_reserved: kube,
            enforce_node_allocatable: vec![enforce.into()],
            ..Default::default()
        }
    }

    #[test]
    fn huge_pages_and_reserved_cgroups() {
        let mut capacity = cap();
        capacity.insert("hugepages-2Mi".into(), Amount::from_units(16 << 20));
        let system = reserved(&[("cpu", "500m"), ("memory", "1Gi"), ("hugepages-2Mi", "4Mi")]);
        let mut s = settings("pods", system.clone(), reserved(&[("cpu", "100m")]));
        // The pods' cgroup gets each huge page size less what is reserved.
        let pods = pods_limits(&capacity, PID_MAX, &s);
        assert_eq!(pods.hugepage_limits, BTreeMap::from([(2 << 20, 12 << 20)]));
        assert_eq!(pods.hugepage_default, None);

        s.enforce_node_allocatable = vec![
            "pods".into(),
            "system-reserved".into(),
            "kube-reserved-compressible".into(),
        ];
        s.system_reserved_cgroup = "/system.slice".into();
        s.kube_reserved_cgroup = "/kube.slice".into();
        let all = enforcements(&capacity, PID_MAX, &s);
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].cgroup, None);
        assert_eq!(all[0].done, "Updated Node Allocatable limit across pods");
        let sys = &all[1];
        assert_eq!(sys.cgroup.as_deref(), Some("/system.slice"));
        assert_eq!(sys.limits.cpu_shares, Some(milli_cpu_to_shares(500)));
        assert_eq!(sys.limits.memory_limit, Some(1 << 30));
        assert_eq!(sys.limits.pids_limit, None, "no pid reserved");
        assert_eq!(
            sys.limits.hugepage_limits,
            BTreeMap::from([(2 << 20, 4 << 20)])
        );
        assert_eq!(
            sys.done,
            "Updated limits on system reserved cgroup /system.slice"
        );
        assert_eq!(
            sys.failed,
            "Failed to enforce System Reserved Cgroup Limits on \"/system.slice\""
        );
        // Compressible only: the cpu, nothing else.
        let kube = &all[2];
        assert_eq!(kube.cgroup.as_deref(), Some("/kube.slice"));
        assert_eq!(
            kube.limits,
            PodResources {
                cpu_shares: Some(milli_cpu_to_shares(100)),
                ..Default::default()
            }
        );

        // Nothing reserved, nothing to enforce; a key without its cgroup (refused by the
        // validation) is skipped.
        s.system_reserved = BTreeMap::new();
        s.kube_reserved_cgroup = String::new();
        assert_eq!(enforcements(&capacity, PID_MAX, &s).len(), 1);
        assert_eq!(
            reserved_limits(&system, false).unwrap().memory_limit,
            Some(1 << 30)
        );
    }

    #[test]
    fn reserved_system_cpus_replace_the_cpu_of_both_reservations() {
        let system = reserved(&[("cpu", "500m"), ("memory", "1Gi")]);
        let kube = reserved(&[("cpu", "1")]);
        let (s, k) = with_reserved_cpus(&system, &kube, "0,2-3");
        assert_eq!(s, reserved(&[("cpu", "3"), ("memory", "1Gi")]));
        assert_eq!(k, reserved(&[]));
        assert_eq!(with_reserved_cpus(&system, &kube, ""), (system, kube));
    }

    #[test]
    fn enforced_pods_get_capacity_minus_reservations() {
        let system = reserved(&[("cpu", "500m"), ("memory", "1Gi"), ("pid", "1000")]);
        let kube = reserved(&[("cpu", "250m"), ("memory", "512Mi")]);
        let r = pods_limits(&cap(), PID_MAX, &settings("pods", system, kube));
        assert_eq!(r.cpu_shares, Some(milli_cpu_to_shares(3250)));
        assert_eq!(r.memory_limit, Some((8 << 30) - (1 << 30) - (512 << 20)));
        assert_eq!(r.pids_limit, Some(4_194_304 - 1000));
    }

    #[test]
    fn not_enforced_means_whole_capacity() {
        let system = reserved(&[("cpu", "1"), ("memory", "1Gi")]);
        let r = pods_limits(&cap(), PID_MAX, &settings("none", system, BTreeMap::new()));
        assert_eq!(r.cpu_shares, Some(milli_cpu_to_shares(4000)));
        assert_eq!(r.memory_limit, Some(8 << 30));
        assert_eq!(r.pids_limit, Some(4_194_304));
    }

    /// Moved from the node status tests: the amounts are in `Amount`s now.
    #[test]
    fn threshold_amounts() {
        const GI: i64 = 1 << 30;
        let cap = Amount::from_units(100 * GI);
        assert_eq!(threshold_amount("0%", cap), None);
        assert_eq!(threshold_amount("100%", cap), None);
        assert_eq!(
            threshold_amount("10%", cap),
            Some(Amount::from_units(10_737_418_400))
        );
        assert_eq!(threshold_amount("1Gi", cap), Some(Amount::from_units(GI)));
        assert_eq!(threshold_amount("-1Gi", cap), None);
        assert_eq!(threshold_amount("lots", cap), None);
    }
}
