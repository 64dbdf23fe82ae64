//! Eviction thresholds as the configuration states them (`evictionHard`, `evictionSoft` with
//! `evictionSoftGracePeriod`, `evictionMinimumReclaim`), and whether an observation meets them.
//! Pure: the monitor feeds observations in.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::quantity::{Amount, NANO, Style};

/// An eviction signal: upstream's names, with the resource each one starves and the node
/// condition it raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    MemoryAvailable,
    AllocatableMemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    ContainerFsAvailable,
    ContainerFsInodesFree,
    PidAvailable,
}

/// Which node condition a met threshold raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Condition {
    Memory,
    Disk,
    Pid,
}

impl Signal {
    pub const ALL: [Signal; 9] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub fn parse(name: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The resource named in eviction messages ("The node was low on resource: memory").
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
                "ephemeral-storage"
            }
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    pub fn condition(self) -> Condition {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Condition::Memory,
            Signal::PidAvailable => Condition::Pid,
            _ => Condition::Disk,
        }
    }

    pub fn is_memory(self) -> bool {
        self.condition() == Condition::Memory
    }

    /// Bytes print in the binary style, counts (inodes, pids) in the decimal one.
    pub fn style(self) -> Style {
        match self.resource() {
            "memory" | "ephemeral-storage" => Style::Binary,
            _ => Style::Decimal,
        }
    }
}

/// An amount, or a share of the signal's capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Quantity(i64),
    Percentage(f32),
}

/// Why a threshold value cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("invalid percentage {0:?}")]
    Percentage(String),
    #[error("{0}")]
    Quantity(#[from] crate::quantity::QuantityError),
    #[error("must be positive: {0}")]
    Negative(String),
}

/// Why the eviction thresholds cannot be read, in upstream's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThresholdError {
    #[error("unsupported eviction signal {0}")]
    Signal(String),
    #[error("eviction threshold {name}: {source}")]
    Value {
        name: String,
        #[source]
        source: ValueError,
    },
    #[error("grace period must be specified for the soft eviction threshold {0}")]
    NoGrace(String),
    #[error("evictionSoftGracePeriod {signal}: {reason}")]
    Grace { signal: String, reason: String },
}

impl Value {
    /// In the signal's unit, given its capacity (upstream rounds a share down).
    pub fn resolve(self, capacity: i64) -> i64 {
        match self {
            Value::Quantity(q) => q,
            Value::Percentage(p) => (capacity as f64 * f64::from(p)) as i64,
        }
    }

    /// `None` for a threshold that is switched off ("0%" or "100%", as upstream reads them).
    fn parse(raw: &str) -> Result<Option<Value>, ValueError> {
        let raw = raw.trim();
        if let Some(p) = raw.strip_suffix('%') {
            if raw == "0%" || raw == "100%" {
                return Ok(None);
            }
            let pct: f32 = p
                .trim()
                .parse()
                .map_err(|_| ValueError::Percentage(raw.to_string()))?;
            if !(0.0..=100.0).contains(&pct) {
                return Err(ValueError::Percentage(raw.to_string()));
            }
            return Ok(Some(Value::Percentage(pct / 100.0)));
        }
        let amount = Amount::parse(raw)?;
        if amount < Amount::ZERO {
            return Err(ValueError::Negative(raw.to_string()));
        }
        let units = amount.nano().div_euclid(NANO) + i128::from(amount.nano() % NANO != 0);
        Ok(Some(Value::Quantity(
            i64::try_from(units).unwrap_or(i64::MAX),
        )))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: Value,
    /// Zero for a hard threshold.
    pub grace: Duration,
    pub min_reclaim: Option<Value>,
}

impl Threshold {
    pub fn is_hard(&self) -> bool {
        self.grace.is_zero()
    }

    /// Thresholds are told apart by signal, value and grace period (as upstream's map key).
    pub fn same(&self, other: &Threshold) -> bool {
        self.signal == other.signal && self.value == other.value && self.grace == other.grace
    }
}

/// What one signal reads now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observation {
    pub available: i64,
    pub capacity: i64,
}

pub type Observations = BTreeMap<Signal, Observation>;

/// Whether `t` is met by what was observed; with `min_reclaim`, whether it is still met once
/// the minimum reclaim is added to the threshold (a pressure is resolved only past it).
pub fn met(t: &Threshold, observations: &Observations, min_reclaim: bool) -> bool {
    let Some(o) = observations.get(&t.signal) else {
        return false;
    };
    let mut quantity = t.value.resolve(o.capacity);
    if min_reclaim && let Some(m) = t.min_reclaim {
        quantity = quantity.saturating_add(m.resolve(o.capacity));
    }
    quantity > o.available
}

/// Parses the configuration into thresholds; upstream's rules: every soft threshold needs a
/// grace period, a minimum reclaim applies to the hard and soft thresholds of its signal, and
/// with `enforceNodeAllocatable` naming `pods`, the hard `memory.available` is also applied to
/// the pods' cgroup (`allocatableMemory.available`).
pub fn parse(
    hard: &BTreeMap<String, String>,
    soft: &BTreeMap<String, String>,
    soft_grace: &BTreeMap<String, Duration>,
    min_reclaim: &BTreeMap<String, String>,
    enforce_pods: bool,
) -> Result<Vec<Threshold>, ThresholdError> {
    let statement =
        |name: &String, raw: &String| -> Result<Option<(Signal, Value)>, ThresholdError> {
            let signal = Signal::parse(name).ok_or_else(|| ThresholdError::Signal(name.clone()))?;
            let value = Value::parse(raw).map_err(|source| ThresholdError::Value {
                name: name.clone(),
                source,
            })?;
            Ok(value.map(|v| (signal, v)))
        };
    let mut out = Vec::new();
    for (name, raw) in hard {
        if let Some((signal, value)) = statement(name, raw)? {
            out.push(Threshold {
                signal,
                value,
                grace: Duration::ZERO,
                min_reclaim: None,
            });
        }
    }
    for (name, raw) in soft {
        if let Some((signal, value)) = statement(name, raw)? {
            let grace = *soft_grace
                .get(name)
                .ok_or_else(|| ThresholdError::NoGrace(name.clone()))?;
            out.push(Threshold {
                signal,
                value,
                grace,
                min_reclaim: None,
            });
        }
    }
    for (name, raw) in min_reclaim {
        if let Some((signal, value)) = statement(name, raw)? {
            for t in out.iter_mut().filter(|t| t.signal == signal) {
                t.min_reclaim = Some(value);
            }
        }
    }
    if enforce_pods {
        let extra: Vec<Threshold> = out
            .iter()
            .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
            .map(|t| Threshold {
                signal: Signal::AllocatableMemoryAvailable,
                ..t.clone()
            })
            .collect();
        out.extend(extra);
    }
    Ok(out)
}

/// The containerfs thresholds follow the filesystem containers write to: nodefs's when the
/// images share it, else imagefs's (upstream ignores configured containerfs thresholds).
pub fn with_containerfs(
    mut thresholds: Vec<Threshold>,
    dedicated_image_fs: bool,
) -> Vec<Threshold> {
    thresholds.retain(|t| {
        !matches!(
            t.signal,
            Signal::ContainerFsAvailable | Signal::ContainerFsInodesFree
        )
    });
    let (bytes, inodes) = if dedicated_image_fs {
        (Signal::ImageFsAvailable, Signal::ImageFsInodesFree)
    } else {
        (Signal::NodeFsAvailable, Signal::NodeFsInodesFree)
    };
    let copies: Vec<Threshold> = thresholds
        .iter()
        .filter_map(|t| {
            let signal = if t.signal == bytes {
                Signal::ContainerFsAvailable
            } else if t.signal == inodes {
                Signal::ContainerFsInodesFree
            } else {
                return None;
            };
            Some(Threshold {
                signal,
                ..t.clone()
            })
        })
        .collect();
    thresholds.extend(copies);
    thresholds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_hard_soft_and_minimum_reclaim() {
        let grace = BTreeMap::from([("memory.available".to_string(), Duration::from_secs(30))]);
        let t = parse(
            &map(&[("memory.available", "100Mi"), ("nodefs.available", "10%")]),
            &map(&[("memory.available", "1Gi")]),
            &grace,
            &map(&[("memory.available", "50Mi")]),
            true,
        )
        .unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t[0].signal, Signal::MemoryAvailable);
        assert_eq!(t[0].value, Value::Quantity(100 << 20));
        assert_eq!(t[0].min_reclaim, Some(Value::Quantity(50 << 20)));
        assert_eq!(t[1].value, Value::Percentage(0.1));
        assert_eq!(t[2].grace, Duration::from_secs(30));
        assert_eq!(t[3].signal, Signal::AllocatableMemoryAvailable);
        assert!(t[3].is_hard());
    }

    #[test]
    fn soft_thresholds_need_a_grace_period_and_zero_percent_is_off() {
        let err = parse(
            &BTreeMap::new(),
            &map(&[("nodefs.available", "10%")]),
            &BTreeMap::new(),
            &BTreeMap::new(),
            false,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "grace period must be specified for the soft eviction threshold nodefs.available"
        );
        let t = parse(
            &map(&[("nodefs.available", "0%"), ("pid.available", "100%")]),
            &BTreeMap::new(),
            &BTreeMap::new(),
            &BTreeMap::new(),
            false,
        )
        .unwrap();
        assert!(t.is_empty());
        assert!(
            parse(
                &map(&[("foo.available", "1")]),
                &BTreeMap::new(),
                &BTreeMap::new(),
                &BTreeMap::new(),
                false
            )
            .is_err()
        );
    }

    #[test]
    fn met_compares_available_with_the_threshold_and_the_minimum_reclaim() {
        let t = Threshold {
            signal: Signal::MemoryAvailable,
            value: Value::Percentage(0.1),
            grace: Duration::ZERO,
            min_reclaim: Some(Value::Quantity(50)),
        };
        let obs = |available| {
            Observations::from([(
                Signal::MemoryAvailable,
                Observation {
                    available,
                    capacity: 1000,
                },
            )])
        };
        assert!(met(&t, &obs(99), false));
        assert!(!met(&t, &obs(100), false));
        assert!(met(&t, &obs(120), true));
        assert!(!met(&t, &obs(150), true));
        assert!(!met(&t, &Observations::new(), false));
    }

    #[test]
    fn containerfs_follows_nodefs_or_imagefs() {
        let base = parse(
            &map(&[("nodefs.available", "10%"), ("imagefs.available", "15%")]),
            &BTreeMap::new(),
            &BTreeMap::new(),
            &BTreeMap::new(),
            false,
        )
        .unwrap();
        let shared = with_containerfs(base.clone(), false);
        let c = shared
            .iter()
            .find(|t| t.signal == Signal::ContainerFsAvailable)
            .unwrap();
        assert_eq!(c.value, Value::Percentage(0.1));
        let split = with_containerfs(base, true);
        let c = split
            .iter()
            .find(|t| t.signal == Signal::ContainerFsAvailable)
            .unwrap();
        assert_eq!(c.value, Value::Percentage(0.15));
    }
}
