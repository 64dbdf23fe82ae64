//! The cgroup settings of a pod cgroup, following upstream's pod resource config rules.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;

use crate::pod::qos::{
    CPU, HUGEPAGES_PREFIX, MEMORY, QosClass, limit_declared_everywhere, pod_limits, pod_requests,
    qos_class,
};
use crate::quantity::{Amount, QuantityError, parse_bytes};

/// Lowest cpu.shares the kernel accepts; also what BestEffort pods get.
pub const MIN_SHARES: u64 = 2;
pub const MAX_SHARES: u64 = 262_144;
pub const SHARES_PER_CPU: i64 = 1024;
pub const MILLI_CPU_TO_CPU: i64 = 1000;
/// Default CFS period (100 ms) in microseconds.
pub const DEFAULT_CFS_PERIOD_US: u64 = 100_000;
/// CFS quota cannot be below 1 ms.
pub const MIN_QUOTA_US: i64 = 1000;

/// Desired values for a pod cgroup; `None` leaves the kernel default (unlimited).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodResources {
    pub cpu_shares: Option<u64>,
    /// CFS quota in microseconds; -1 means unlimited.
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub memory_limit: Option<i64>,
    pub pids_limit: Option<i64>,
    /// Page size in bytes -> limit in bytes, for hugepages the pod requests.
    pub hugepage_limits: BTreeMap<i64, i64>,
    /// The limit for every other page size the kernel offers: 0 for a pod (it may use only
    /// what it asked for), none for the cgroups above pods, which keep whatever they have.
    pub hugepage_default: Option<i64>,
}

/// Knobs from the kubelet configuration that shape pod cgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodCgroupOptions {
    /// --cpu-cfs-quota: when false, cpu limits are not enforced (quota -1).
    pub enforce_cpu_limits: bool,
    /// --cpu-cfs-quota-period in microseconds.
    pub cpu_cfs_period_us: u64,
    /// --pod-max-pids: applied when positive.
    pub pids_limit: Option<i64>,
}

impl Default for PodCgroupOptions {
    fn default() -> Self {
        PodCgroupOptions {
            enforce_cpu_limits: true,
            cpu_cfs_period_us: DEFAULT_CFS_PERIOD_US,
            pids_limit: None,
        }
    }
}

/// cpu.shares for a cpu request in millicores: 1024 per cpu, clamped to the kernel range.
pub fn milli_cpu_to_shares(milli_cpu: i64) -> u64 {
    if milli_cpu <= 0 {
        return MIN_SHARES;
    }
    let shares = milli_cpu.saturating_mul(SHARES_PER_CPU) / MILLI_CPU_TO_CPU;
    (shares.max(0) as u64).clamp(MIN_SHARES, MAX_SHARES)
}

/// CFS quota in microseconds for a cpu limit over `period_us`; 0 when there is no limit.
pub fn milli_cpu_to_quota(milli_cpu: i64, period_us: u64) -> i64 {
    if milli_cpu <= 0 {
        return 0;
    }
    let period = i64::try_from(period_us).unwrap_or(i64::MAX);
    (milli_cpu.saturating_mul(period) / MILLI_CPU_TO_CPU).max(MIN_QUOTA_US)
}

/// cgroup v2 cpu.weight for v1 cpu.shares, mapping [2, 262144] linearly onto [1, 10000] as
/// the OCI runtimes and upstream's cgroup v2 manager do.
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    let shares = shares.clamp(MIN_SHARES, MAX_SHARES);
    1 + ((shares - 2) * 9999) / 262_142
}

/// Whole units of an amount a pod asks for; too large for the cgroup files is an error naming
/// what it was.
fn units(amount: Amount, what: &str) -> Result<i64, QuantityError> {
    amount
        .units()
        .ok_or_else(|| QuantityError::Overflow(what.to_string()))
}

fn millis(amount: Amount, what: &str) -> Result<i64, QuantityError> {
    amount
        .millis()
        .ok_or_else(|| QuantityError::Overflow(what.to_string()))
}

/// Parses "2Mi" out of "hugepages-2Mi" into a page size in bytes.
pub fn hugepage_size(resource: &str) -> Option<i64> {
    let size = resource.strip_prefix(HUGEPAGES_PREFIX)?;
    parse_bytes(&k8s_openapi::apimachinery::pkg::api::resource::Quantity(
        size.to_string(),
    ))
    .ok()
}

/// The settings for a pod's cgroup. Guaranteed pods get shares, quota and memory limit;
/// Burstable pods get shares, and quota / memory limit only when every container declares
/// that limit; BestEffort pods get the minimum shares.
pub fn pod_resources(
    spec: &PodSpec,
    opts: &PodCgroupOptions,
) -> Result<PodResources, QuantityError> {
    let requests = pod_requests(spec)?;
    let limits = pod_limits(spec)?;
    let cpu_request = requests.get(CPU).copied().unwrap_or_default();
    let cpu_limit = limits.get(CPU).copied().unwrap_or_default();
    let memory_limit = limits.get(MEMORY).copied().unwrap_or_default();

    let shares = milli_cpu_to_shares(millis(cpu_request, "cpu request")?);
    let mut quota = milli_cpu_to_quota(millis(cpu_limit, "cpu limit")?, opts.cpu_cfs_period_us);
    if !opts.enforce_cpu_limits {
        quota = -1;
    }
    let memory = units(memory_limit, "memory limit")?;

    let mut out = PodResources::default();
    match qos_class(spec) {
        QosClass::Guaranteed => {
            out.cpu_shares = Some(shares);
            out.cpu_quota = Some(quota);
            out.cpu_period = Some(opts.cpu_cfs_period_us);
            out.memory_limit = Some(memory);
        }
        QosClass::Burstable => {
            out.cpu_shares = Some(shares);
            if limit_declared_everywhere(spec, CPU) {
                out.cpu_quota = Some(quota);
                out.cpu_period = Some(opts.cpu_cfs_period_us);
            }
            if limit_declared_everywhere(spec, MEMORY) {
                out.memory_limit = Some(memory);
            }
        }
        QosClass::BestEffort => out.cpu_shares = Some(MIN_SHARES),
    }
    for (name, amount) in &requests {
        if let Some(size) = hugepage_size(name) {
            out.hugepage_limits.insert(size, units(*amount, name)?);
        }
    }
    out.hugepage_default = Some(0);
    out.pids_limit = opts.pids_limit.filter(|p| *p > 0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn container(req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let list = |items: &[(&str, &str)]| {
            (!items.is_empty()).then(|| {
                items
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: list(req),
                limits: list(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn spec(containers: Vec<Container>) -> PodSpec {
        PodSpec {
            containers,
            ..Default::default()
        }
    }

    #[test]
    fn shares_math() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1500), 1536);
        assert_eq!(milli_cpu_to_shares(1_000_000), MAX_SHARES);
    }

    #[test]
    fn quota_math() {
        assert_eq!(milli_cpu_to_quota(0, 100_000), 0);
        assert_eq!(milli_cpu_to_quota(5, 100_000), 1000);
        assert_eq!(milli_cpu_to_quota(250, 100_000), 25_000);
        assert_eq!(milli_cpu_to_quota(2000, 100_000), 200_000);
        assert_eq!(milli_cpu_to_quota(500, 50_000), 25_000);
    }

    #[test]
    fn weight_math() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(shares_to_weight(102), 4);
    }

    #[test]
    fn guaranteed_pod() {
        let both = [("cpu", "500m"), ("memory", "128Mi")];
        let r = pod_resources(
            &spec(vec![container(&both, &both)]),
            &PodCgroupOptions::default(),
        )
        .unwrap();
        assert_eq!(
            r,
            PodResources {
                cpu_shares: Some(512),
                cpu_quota: Some(50_000),
                cpu_period: Some(100_000),
                memory_limit: Some(134_217_728),
                hugepage_default: Some(0),
                ..Default::default()
            }
        );
    }

    #[test]
    fn burstable_pod_partial_limits() {
        let a = container(&[("cpu", "100m")], &[("cpu", "200m"), ("memory", "64Mi")]);
        let b = container(&[("cpu", "100m")], &[("memory", "64Mi")]);
        let opts = PodCgroupOptions {
            pids_limit: Some(1024),
            ..Default::default()
        };
        let r = pod_resources(&spec(vec![a, b]), &opts).unwrap();
        assert_eq!(r.cpu_shares, Some(204));
        // b has no cpu limit: the pod may not be capped.
        assert_eq!(r.cpu_quota, None);
        assert_eq!(r.cpu_period, None);
        assert_eq!(r.memory_limit, Some(128 * 1024 * 1024));
        assert_eq!(r.pids_limit, Some(1024));
    }

    #[test]
    fn best_effort_pod_and_hugepages() {
        let r = pod_resources(
            &spec(vec![container(&[], &[])]),
            &PodCgroupOptions::default(),
        )
        .unwrap();
        assert_eq!(
            r,
            PodResources {
                cpu_shares: Some(2),
                // Sizes it did not ask for: none.
                hugepage_default: Some(0),
                ..Default::default()
            }
        );
        let c = container(
            &[("memory", "1Gi"), ("hugepages-2Mi", "4Mi")],
            &[("memory", "1Gi"), ("hugepages-2Mi", "4Mi")],
        );
        let r = pod_resources(&spec(vec![c]), &PodCgroupOptions::default()).unwrap();
        assert_eq!(
            r.hugepage_limits,
            BTreeMap::from([(2 * 1024 * 1024, 4 * 1024 * 1024)])
        );
    }

    #[test]
    fn runtime_class_overhead_sizes_the_pod_cgroup() {
        let both = [("cpu", "500m"), ("memory", "128Mi")];
        let mut s = spec(vec![container(&both, &both)]);
        s.overhead = Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("250m".into())),
            ("memory".to_string(), Quantity("64Mi".into())),
        ]));
        let r = pod_resources(&s, &PodCgroupOptions::default()).unwrap();
        assert_eq!(r.cpu_shares, Some(768));
        assert_eq!(r.cpu_quota, Some(75_000));
        assert_eq!(r.memory_limit, Some(192 * 1024 * 1024));
        // Burstable without a memory limit: the overhead raises the shares, adds no limit.
        let mut s = spec(vec![container(&[("cpu", "100m")], &[])]);
        s.overhead = Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("100m".into())),
            ("memory".to_string(), Quantity("64Mi".into())),
        ]));
        let r = pod_resources(&s, &PodCgroupOptions::default()).unwrap();
        assert_eq!(r.cpu_shares, Some(204));
        assert_eq!(r.memory_limit, None);
        assert_eq!(r.cpu_quota, None);
    }

    #[test]
    fn quota_disabled() {
        let both = [("cpu", "1"), ("memory", "1Gi")];
        let opts = PodCgroupOptions {
            enforce_cpu_limits: false,
            ..Default::default()
        };
        let r = pod_resources(&spec(vec![container(&both, &both)]), &opts).unwrap();
        assert_eq!(r.cpu_quota, Some(-1));
    }
}
