//! The topology manager's policies: how the providers' hints become one, and whether the pod
//! may run with it. `best-effort` always admits, `restricted` admits only a preferred hint,
//! `single-numa-node` only a preferred hint on one node (or no preference at all).

use std::collections::BTreeMap;

use crate::cm::numa::{Hint, NumaMask, ResourceHints};

pub const NONE: &str = "none";
pub const BEST_EFFORT: &str = "best-effort";
pub const RESTRICTED: &str = "restricted";
pub const SINGLE_NUMA_NODE: &str = "single-numa-node";

pub const PREFER_CLOSEST_NUMA_NODES: &str = "prefer-closest-numa-nodes";
pub const MAX_ALLOWABLE_NUMA_NODES: &str = "max-allowable-numa-nodes";
pub const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: usize = 8;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OptionError {
    #[error("unknown Topology Manager Policy option: {0:?}")]
    Unknown(String),
    #[error("Topology Manager Policy Beta-level Options not enabled, but option {0:?} provided")]
    BetaDisabled(String),
    #[error("bad value for option {name:?}: {value:?} is not a boolean")]
    Bool { name: String, value: String },
    #[error("unable to convert policy option to integer {name:?}: {value:?}")]
    Int { name: String, value: String },
    #[error(
        "the minimum value of {0:?} should not be less than {DEFAULT_MAX_ALLOWABLE_NUMA_NODES}"
    )]
    TooFew(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub prefer_closest: bool,
    pub max_allowable_numa_nodes: usize,
}

/// Upstream v1.34's options: prefer-closest-numa-nodes is GA, max-allowable-numa-nodes beta
/// (TopologyManagerPolicyBetaOptions, on by default).
pub fn options(
    given: &BTreeMap<String, String>,
    gates: &BTreeMap<String, bool>,
) -> Result<Options, OptionError> {
    let mut out = Options {
        prefer_closest: false,
        max_allowable_numa_nodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
    };
    let beta = gates
        .get("TopologyManagerPolicyBetaOptions")
        .copied()
        .unwrap_or(true);
    for (name, value) in given {
        match name.as_str() {
            PREFER_CLOSEST_NUMA_NODES => {
                out.prefer_closest =
                    crate::config::parse_go_bool(value).ok_or_else(|| OptionError::Bool {
                        name: name.clone(),
                        value: value.clone(),
                    })?;
            }
            MAX_ALLOWABLE_NUMA_NODES => {
                if !beta {
                    return Err(OptionError::BetaDisabled(name.clone()));
                }
                let n: usize = value.trim().parse().map_err(|_| OptionError::Int {
                    name: name.clone(),
                    value: value.clone(),
                })?;
                if n < DEFAULT_MAX_ALLOWABLE_NUMA_NODES {
                    return Err(OptionError::TooFew(name.clone()));
                }
                out.max_allowable_numa_nodes = n;
            }
            _ => return Err(OptionError::Unknown(name.clone())),
        }
    }
    Ok(out)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    None,
    BestEffort,
    Restricted,
    SingleNumaNode,
}

impl Policy {
    pub fn parse(name: &str) -> Option<Policy> {
        Some(match name {
            NONE | "" => Policy::None,
            BEST_EFFORT => Policy::BestEffort,
            RESTRICTED => Policy::Restricted,
            SINGLE_NUMA_NODE => Policy::SingleNumaNode,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::None => NONE,
            Policy::BestEffort => BEST_EFFORT,
            Policy::Restricted => RESTRICTED,
            Policy::SingleNumaNode => SINGLE_NUMA_NODE,
        }
    }
}

/// The machine's NUMA nodes and, for prefer-closest-numa-nodes, their distances
/// (`distances[a][b]`, sysfs' node<a>/distance).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NumaInfo {
    pub nodes: Vec<u32>,
    pub distances: BTreeMap<u32, Vec<u64>>,
}

impl NumaInfo {
    pub fn default_mask(&self) -> NumaMask {
        NumaMask::of(self.nodes.iter().copied())
    }

    fn average_distance(&self, mask: NumaMask) -> f64 {
        let nodes = mask.nodes();
        if nodes.is_empty() {
            return 0.0;
        }
        let mut sum = 0.0;
        for a in &nodes {
            for b in &nodes {
                let d = self
                    .distances
                    .get(a)
                    .and_then(|row| row.get(*b as usize))
                    .copied()
                    .unwrap_or(0);
                sum += d as f64;
            }
        }
        sum / (nodes.len() * nodes.len()) as f64
    }

    /// Of two masks as wide, the one whose nodes are closest together (then the lower one).
    fn closest(&self, a: NumaMask, b: NumaMask) -> NumaMask {
        if a.count() != b.count() {
            return if a.is_narrower_than(b) { a } else { b };
        }
        let (da, db) = (self.average_distance(a), self.average_distance(b));
        if da == db {
            return if a.is_less_than(b) { a } else { b };
        }
        if da < db { a } else { b }
    }
}

/// One list of hints per resource of each provider: a provider with no resource, or a
/// resource with no preference, is one preferred any-node hint; a resource no placement can
/// hold is one unpreferred any-node hint.
pub fn filter_providers_hints(providers: &[BTreeMap<String, ResourceHints>]) -> Vec<Vec<Hint>> {
    let any = |preferred| Hint {
        affinity: None,
        preferred,
    };
    let mut out = Vec::new();
    for hints in providers {
        if hints.is_empty() {
            out.push(vec![any(true)]);
            continue;
        }
        for resource_hints in hints.values() {
            match resource_hints {
                None => out.push(vec![any(true)]),
                Some(list) if list.is_empty() => out.push(vec![any(false)]),
                Some(list) => out.push(list.clone()),
            }
        }
    }
    out
}

/// One hint from one of each resource's: the nodes they share; preferred only when every
/// hint is and every one that names nodes names the same.
fn merge_permutation(default: NumaMask, permutation: &[Hint]) -> Hint {
    let mut preferred = true;
    let mut merged = default;
    let mut first: Option<NumaMask> = None;
    for hint in permutation {
        if let Some(mask) = hint.affinity {
            merged = merged.and(mask);
            match first {
                None => first = Some(mask),
                Some(f) if f != mask => preferred = false,
                Some(_) => {}
            }
        }
        if !hint.preferred {
            preferred = false;
        }
    }
    Hint {
        affinity: Some(merged),
        preferred,
    }
}

struct Merger<'a> {
    numa: &'a NumaInfo,
    closest: bool,
    /// The widest of each resource's narrowest hint: among unpreferred merges, the one as
    /// close to this width as possible without going over is best.
    best_unpreferred_count: u32,
}

impl Merger<'_> {
    fn fitter(&self, current: Hint, candidate: Hint) -> Hint {
        let (Some(c), Some(n)) = (current.affinity, candidate.affinity) else {
            return current;
        };
        if c == n {
            return current;
        }
        let best = if self.closest {
            self.numa.closest(c, n)
        } else if c.is_narrower_than(n) {
            c
        } else {
            n
        };
        if best == c { current } else { candidate }
    }

    fn compare(&self, current: Option<Hint>, candidate: Hint) -> Option<Hint> {
        let count = |h: Hint| h.affinity.map_or(0, |m| m.count());
        if count(candidate) == 0 {
            return current;
        }
        let Some(current) = current else {
            return Some(candidate);
        };
        let best = self.best_unpreferred_count;
        let (cur, cand) = (count(current), count(candidate));
        Some(match (current.preferred, candidate.preferred) {
            (false, true) => candidate,
            (true, false) => current,
            (true, true) => self.fitter(current, candidate),
            (false, false) => {
                if cur > best {
                    self.fitter(current, candidate)
                } else if cur == best {
                    if cand != best {
                        current
                    } else {
                        self.fitter(current, candidate)
                    }
                } else if cand > best {
                    current
                } else if cand == best || cand > cur {
                    candidate
                } else if cand < cur {
                    current
                } else {
                    self.fitter(current, candidate)
                }
            }
        })
    }
}

fn narrowest_count(hints: &[Hint]) -> Option<u32> {
    let mut narrowest: Option<NumaMask> = None;
    for mask in hints.iter().filter_map(|h| h.affinity) {
        if narrowest.is_none_or(|n| mask.is_narrower_than(n)) {
            narrowest = Some(mask);
        }
    }
    narrowest.map(NumaMask::count)
}

/// Calls `f` with every way of taking one hint of each resource.
fn each_permutation(hints: &[Vec<Hint>], taken: &mut Vec<Hint>, f: &mut impl FnMut(&[Hint])) {
    let Some(next) = hints.get(taken.len()) else {
        f(taken);
        return;
    };
    for hint in next {
        taken.push(*hint);
        each_permutation(hints, taken, f);
        taken.pop();
    }
}

/// The best hint over every way of taking one hint per resource; all nodes and unpreferred
/// when there is none.
pub fn merge_filtered(
    numa: &NumaInfo,
    hints: &[Vec<Hint>],
    policy: Policy,
    opts: &Options,
) -> Hint {
    let default = numa.default_mask();
    let merger = Merger {
        numa,
        closest: policy != Policy::SingleNumaNode && opts.prefer_closest,
        best_unpreferred_count: hints
            .iter()
            .filter_map(|h| narrowest_count(h))
            .max()
            .unwrap_or(0),
    };
    let mut best: Option<Hint> = None;
    // Each resource has at most 2^nodes - 1 hints (255 at the bound) and there are few
    // resources; upstream walks the same product.
    each_permutation(hints, &mut Vec::with_capacity(hints.len()), &mut |p| {
        best = merger.compare(best, merge_permutation(default, p));
    });
    best.unwrap_or(Hint {
        affinity: Some(default),
        preferred: false,
    })
}

/// The policy's merge of the providers' hints and whether the pod may run with it.
pub fn merge(
    policy: Policy,
    numa: &NumaInfo,
    opts: &Options,
    providers: &[BTreeMap<String, ResourceHints>],
) -> (Hint, bool) {
    let filtered = filter_providers_hints(providers);
    match policy {
        Policy::None => (
            Hint {
                affinity: None,
                preferred: true,
            },
            true,
        ),
        Policy::BestEffort => (merge_filtered(numa, &filtered, policy, opts), true),
        Policy::Restricted => {
            let best = merge_filtered(numa, &filtered, policy, opts);
            (best, best.preferred)
        }
        Policy::SingleNumaNode => {
            let single: Vec<Vec<Hint>> = filtered
                .into_iter()
                .map(|hints| {
                    hints
                        .into_iter()
                        .filter(|h| h.preferred && h.affinity.is_none_or(|m| m.count() == 1))
                        .collect()
                })
                .collect();
            let mut best = merge_filtered(numa, &single, policy, opts);
            if best.affinity == Some(numa.default_mask()) {
                best.affinity = None;
            }
            (best, best.preferred)
        }
    }
}
