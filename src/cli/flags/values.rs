//! Flag value syntax: Go's strconv for numbers and booleans, pflag's and component-base's
//! list and map flags, and the kubelet's own compound values (taints, NUMA reservations).
//!
//! Messages copy Go's wording, which scripts and operators already know.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Taint;

use crate::config::duration::{DurationError, GoDuration, parse_go_duration};
use crate::config::{MemoryReservation, VModuleItem};
use crate::names;
use crate::quantity::{Amount, QuantityError};

/// Why a flag value was refused; the flag and the value are added by
/// [`super::FlagError::InvalidValue`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("strconv.ParseBool: parsing {0:?}: invalid syntax")]
    Bool(String),
    #[error("strconv.ParseInt: parsing {0:?}: invalid syntax")]
    IntSyntax(String),
    #[error("strconv.ParseInt: parsing {0:?}: value out of range")]
    IntRange(String),
    #[error("strconv.ParseUint: parsing {input:?}: {reason}")]
    Uint { input: String, reason: String },
    #[error(transparent)]
    Duration(#[from] DurationError),
    #[error(transparent)]
    Quantity(#[from] QuantityError),
    #[error("{0:?} is not a valid IP address")]
    Ip(String),
    #[error("malformed pair, expect string{0}string")]
    Pair(char),
    #[error("malformed pair, expect string:string, got {0}")]
    Header(String),
    #[error("missing bool value for {0}")]
    GateMissingValue(String),
    #[error("invalid value of {gate}: {value}, err: {reason}")]
    GateValue {
        gate: String,
        value: String,
        reason: Box<ValueError>,
    },
    #[error("could not parse {0:?}")]
    NodeIp(String),
    #[error("dual-stack --node-ip {0:?} must include one IPv4 address and one IPv6 address")]
    NodeIpFamilies(String),
    #[error("must contain either a single IP or a dual-stack pair of IPs, got {0:?}")]
    NodeIpCount(String),
    #[error("invalid taint spec: {0}")]
    TaintSpec(String),
    #[error("invalid taint effect: {0}, unsupported taint effect")]
    TaintEffect(String),
    #[error("invalid taint spec: {spec}, invalid key {key:?}")]
    TaintKey { spec: String, key: String },
    #[error("invalid taint spec: {spec}, invalid value {value:?}")]
    TaintValue { spec: String, value: String },
    #[error(
        "the reserved memory has incorrect format, expected numaNodeID:type=quantity[,type=quantity...], got {0}"
    )]
    ReservedMemory(String),
    #[error("failed to parse the NUMA node ID {0:?}")]
    NumaNode(String),
    #[error("the reserved limit has incorrect value, expected type=quantity, got {0}")]
    ReservedLimit(String),
    #[error("failed to parse the quantity {quantity:?}: {reason}")]
    ReservedQuantity {
        quantity: String,
        reason: QuantityError,
    },
    #[error("{0:?} does not have the pattern=N format")]
    ModulePattern(String),
    #[error("parsing verbosity in {0:?}")]
    ModuleLevel(String),
}

/// Stores a parsed value; the setters in the flag table are one call of this each.
pub(crate) fn assign<T>(field: &mut T, parsed: Result<T, ValueError>) -> Result<(), ValueError> {
    *field = parsed?;
    Ok(())
}

/// Go's strconv.ParseBool.
pub(crate) fn parse_bool(s: &str) -> Result<bool, ValueError> {
    crate::config::parse_go_bool(s).ok_or_else(|| ValueError::Bool(s.to_string()))
}

/// Go's strconv.ParseInt with base 0 (0x, 0o, 0b and leading-0 octal prefixes).
pub(crate) fn parse_int(s: &str, bits: u32) -> Result<i64, ValueError> {
    let syntax = || ValueError::IntSyntax(s.to_string());
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let body = body.replace('_', "");
    let (radix, digits) =
        if let Some(d) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, d.to_string())
        } else if let Some(d) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
            (8, d.to_string())
        } else if let Some(d) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
            (2, d.to_string())
        } else if body.len() > 1 && body.starts_with('0') {
            (8, body[1..].to_string())
        } else {
            (10, body.clone())
        };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return Err(syntax());
    }
    let magnitude = i128::from_str_radix(&digits, radix).map_err(|_| syntax())?;
    let v = if neg { -magnitude } else { magnitude };
    let max = (1i128 << (bits - 1)) - 1;
    let min = -(1i128 << (bits - 1));
    if v > max || v < min {
        return Err(ValueError::IntRange(s.to_string()));
    }
    Ok(v as i64)
}

pub(crate) fn boolean(v: &str) -> Result<bool, ValueError> {
    parse_bool(v)
}

pub(crate) fn int32(v: &str) -> Result<i32, ValueError> {
    parse_int(v, 32).map(|n| n as i32)
}

pub(crate) fn int64(v: &str) -> Result<i64, ValueError> {
    parse_int(v, 64)
}

/// klog's `-v` level, a Go `uint32`.
pub(crate) fn level(v: &str) -> Result<u32, ValueError> {
    v.trim().parse::<u32>().map_err(|e| ValueError::Uint {
        input: v.to_string(),
        reason: e.to_string(),
    })
}

pub(crate) fn duration(v: &str) -> Result<GoDuration, ValueError> {
    Ok(GoDuration(parse_go_duration(v)?))
}

/// An IP address, kept in its canonical text form.
pub(crate) fn ip(v: &str) -> Result<String, ValueError> {
    v.trim()
        .parse::<IpAddr>()
        .map(|ip| ip.to_string())
        .map_err(|_| ValueError::Ip(v.to_string()))
}

pub(crate) fn text(v: &str) -> Result<String, ValueError> {
    Ok(v.to_string())
}

/// An empty value unsets an optional setting.
pub(crate) fn optional_text(v: &str) -> Result<Option<String>, ValueError> {
    Ok(Some(v.to_string()).filter(|s| !s.is_empty()))
}

pub(crate) fn path(v: &str) -> Result<PathBuf, ValueError> {
    Ok(PathBuf::from(v))
}

/// An empty value unsets an optional path.
pub(crate) fn optional_path(v: &str) -> Result<Option<PathBuf>, ValueError> {
    Ok(Some(PathBuf::from(v)).filter(|p| !p.as_os_str().is_empty()))
}

/// A quantity, kept as written once it parses.
pub(crate) fn quantity_text(v: &str) -> Result<String, ValueError> {
    Amount::parse(v)?;
    Ok(v.to_string())
}

/// pflag StringSlice: comma separated; the first use replaces, later uses append.
pub(crate) fn strings(target: &mut Vec<String>, v: &str, first: bool) -> Result<(), ValueError> {
    if first {
        target.clear();
    }
    if !v.is_empty() {
        target.extend(v.split(',').map(|s| s.trim().to_string()));
    }
    Ok(())
}

/// component-base MapStringString: comma-separated `k<sep>v` pairs; the first use replaces
/// the map, later uses merge into it.
pub(crate) fn string_map(
    target: &mut BTreeMap<String, String>,
    v: &str,
    sep: char,
    first: bool,
) -> Result<(), ValueError> {
    if first {
        target.clear();
    }
    v.split(',')
        .try_for_each(|pair| insert_pair(target, pair, sep))
}

/// MapStringString without comma splitting, for option values that may contain commas.
pub(crate) fn unsplit_string_map(
    target: &mut BTreeMap<String, String>,
    v: &str,
    first: bool,
) -> Result<(), ValueError> {
    if first {
        target.clear();
    }
    insert_pair(target, v, '=')
}

fn insert_pair(
    target: &mut BTreeMap<String, String>,
    pair: &str,
    sep: char,
) -> Result<(), ValueError> {
    let pair = pair.trim();
    if pair.is_empty() {
        return Ok(());
    }
    let (k, val) = pair.split_once(sep).ok_or(ValueError::Pair(sep))?;
    target.insert(k.trim().to_string(), val.trim().to_string());
    Ok(())
}

/// `--node-labels`: labels accumulate across uses; a key without '=' gets an empty value.
pub(crate) fn label_pairs(
    target: &mut BTreeMap<String, String>,
    v: &str,
) -> Result<(), ValueError> {
    for pair in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, val) = pair.split_once('=').unwrap_or((pair, ""));
        target.insert(k.trim().to_string(), val.trim().to_string());
    }
    Ok(())
}

/// component-base ColonSeparatedMultimapStringString (`--manifest-url-header`).
pub(crate) fn header_map(
    target: &mut BTreeMap<String, Vec<String>>,
    v: &str,
    first: bool,
) -> Result<(), ValueError> {
    if first {
        target.clear();
    }
    for pair in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, val) = pair
            .split_once(':')
            .ok_or_else(|| ValueError::Header(pair.to_string()))?;
        target
            .entry(k.trim().to_string())
            .or_default()
            .push(val.trim().to_string());
    }
    Ok(())
}

/// `--feature-gates`: gates merge key by key over the file's gates, flag values winning.
pub(crate) fn bool_map(target: &mut BTreeMap<String, bool>, v: &str) -> Result<(), ValueError> {
    for pair in v.split(',') {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let (k, val) = pair
            .split_once('=')
            .ok_or_else(|| ValueError::GateMissingValue(pair.to_string()))?;
        let b = parse_bool(val.trim()).map_err(|e| ValueError::GateValue {
            gate: k.to_string(),
            value: val.to_string(),
            reason: Box::new(e),
        })?;
        target.insert(k.trim().to_string(), b);
    }
    Ok(())
}

/// `key=value:Effect` or `key:Effect`, comma separated.
pub(crate) fn taints(v: &str) -> Result<Vec<Taint>, ValueError> {
    let mut out = Vec::new();
    for spec in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (kv, effect) = spec
            .rsplit_once(':')
            .ok_or_else(|| ValueError::TaintSpec(spec.to_string()))?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(ValueError::TaintEffect(effect.to_string()));
        }
        let (key, value) = match kv.split_once('=') {
            Some((k, val)) => (k, Some(val.to_string())),
            None => (kv, None),
        };
        if !names::is_qualified_name(key) {
            return Err(ValueError::TaintKey {
                spec: spec.to_string(),
                key: key.to_string(),
            });
        }
        if let Some(val) = &value
            && !names::is_label_value(val)
        {
            return Err(ValueError::TaintValue {
                spec: spec.to_string(),
                value: val.clone(),
            });
        }
        out.push(Taint {
            key: key.to_string(),
            value,
            effect: effect.to_string(),
            time_added: None,
        });
    }
    Ok(out)
}

/// `<numa>:<resource>=<quantity>,...`.
pub(crate) fn reserved_memory(v: &str) -> Result<MemoryReservation, ValueError> {
    let (node, limits) = v
        .split_once(':')
        .ok_or_else(|| ValueError::ReservedMemory(v.to_string()))?;
    let numa_node: i32 = node
        .trim()
        .parse()
        .map_err(|_| ValueError::NumaNode(node.to_string()))?;
    let mut r = MemoryReservation {
        numa_node,
        limits: BTreeMap::new(),
    };
    for pair in limits.split(',') {
        let (k, q) = pair
            .split_once('=')
            .ok_or_else(|| ValueError::ReservedLimit(pair.to_string()))?;
        Amount::parse(q).map_err(|reason| ValueError::ReservedQuantity {
            quantity: q.to_string(),
            reason,
        })?;
        r.limits.insert(k.trim().to_string(), q.trim().to_string());
    }
    Ok(r)
}

/// klog's `--vmodule`: comma-separated `pattern=N`.
pub(crate) fn vmodule(v: &str) -> Result<Vec<VModuleItem>, ValueError> {
    let mut out = Vec::new();
    for part in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (pattern, level) = part
            .split_once('=')
            .ok_or_else(|| ValueError::ModulePattern(part.to_string()))?;
        let verbosity: u32 = level
            .parse()
            .map_err(|_| ValueError::ModuleLevel(part.to_string()))?;
        out.push(VModuleItem {
            file_pattern: pattern.to_string(),
            verbosity,
        });
    }
    Ok(out)
}

/// `--node-ip`: one address, or an IPv4 and an IPv6 address.
pub(crate) fn node_ips(v: &str) -> Result<Vec<IpAddr>, ValueError> {
    if v.trim().is_empty() {
        return Ok(Vec::new());
    }
    let ips = v
        .split(',')
        .map(|s| {
            s.trim()
                .parse::<IpAddr>()
                .map_err(|_| ValueError::NodeIp(s.trim().to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    match ips.as_slice() {
        [_] => Ok(ips),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(ips),
        [_, _] => Err(ValueError::NodeIpFamilies(v.to_string())),
        _ => Err(ValueError::NodeIpCount(v.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_parsers() {
        assert_eq!(parse_int("0x10", 32), Ok(16));
        assert_eq!(parse_int("-5", 32), Ok(-5));
        assert_eq!(parse_int("010", 32), Ok(8));
        assert!(parse_int("70000000000", 32).is_err());
        assert!(parse_int("abc", 32).is_err());
        assert_eq!(parse_bool("T"), Ok(true));
        assert!(parse_bool("yes").is_err());
        let t = taints("a=b:NoSchedule,c:NoExecute").unwrap_or_default();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].key, "a");
        assert_eq!(t[0].value.as_deref(), Some("b"));
        assert_eq!(t[1].value, None);
        assert_eq!(t[1].effect, "NoExecute");
        assert!(taints("a=b:Sometimes").is_err());
        assert!(taints("a=b").is_err());
        assert_eq!(node_ips("10.0.0.1,fd00::1").map(|v| v.len()), Ok(2));
        assert!(node_ips("10.0.0.1,10.0.0.2").is_err());
        assert!(node_ips("nope").is_err());
        assert!(node_ips("1.1.1.1,::1,2.2.2.2").is_err());
    }
}
