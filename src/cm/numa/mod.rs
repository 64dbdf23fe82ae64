//! NUMA affinity as the topology manager and its hint providers (the CPU and device managers)
//! speak it: a mask of NUMA nodes, a hint (a mask, or none for "no preference", and whether it
//! is a preferred allocation), and the hints a request of N items gets from where the items
//! sit. Kept apart from the topology manager so the providers do not depend on it.

use std::fmt;
use std::path::Path;

/// The NUMA node ids under `<sysfs>/devices/system/node`, ascending; empty on a machine
/// without the folder.
pub fn node_ids(sysfs: &Path) -> Vec<u32> {
    let mut nodes: Vec<u32> = std::fs::read_dir(sysfs.join("devices/system/node"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse::<u32>()
                .ok()
        })
        .collect();
    nodes.sort_unstable();
    nodes
}

/// A set of NUMA node ids below 64 (upstream's bitmask; the topology manager refuses machines
/// with more nodes than it allows, 8 by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NumaMask(u64);

impl NumaMask {
    /// Nodes at or above 64 are left out: no machine the topology manager admits has them.
    pub fn of(nodes: impl IntoIterator<Item = u32>) -> Self {
        NumaMask(
            nodes
                .into_iter()
                .filter(|&n| n < 64)
                .fold(0, |m, n| m | (1 << n)),
        )
    }

    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    pub fn is_set(self, node: u32) -> bool {
        node < 64 && self.0 & (1 << node) != 0
    }

    /// Whether any of `nodes` is in the mask.
    pub fn any_set(self, nodes: &[u32]) -> bool {
        nodes.iter().any(|&n| self.is_set(n))
    }

    pub fn and(self, other: NumaMask) -> NumaMask {
        NumaMask(self.0 & other.0)
    }

    pub fn nodes(self) -> Vec<u32> {
        (0..64).filter(|&n| self.is_set(n)).collect()
    }

    /// Upstream's order: the one with more lower-numbered nodes set is less.
    pub fn is_less_than(self, other: NumaMask) -> bool {
        self.0 < other.0
    }

    /// Fewer nodes, or as many and lower-numbered ones.
    pub fn is_narrower_than(self, other: NumaMask) -> bool {
        if self.count() == other.count() {
            self.is_less_than(other)
        } else {
            self.count() < other.count()
        }
    }

    /// Every non-empty mask of `nodes`, the single nodes first, then pairs and so on, each
    /// size in ascending order (upstream's iteration).
    pub fn all_of(nodes: &[u32]) -> Vec<NumaMask> {
        let mut nodes = nodes.to_vec();
        nodes.sort_unstable();
        nodes.dedup();
        let mut out = Vec::new();
        for size in 1..=nodes.len() {
            combinations(&nodes, size, 0, &mut Vec::new(), &mut out);
        }
        out
    }
}

fn combinations(
    nodes: &[u32],
    size: usize,
    start: usize,
    picked: &mut Vec<u32>,
    out: &mut Vec<NumaMask>,
) {
    if picked.len() == size {
        out.push(NumaMask::of(picked.iter().copied()));
        return;
    }
    for i in start..nodes.len() {
        picked.push(nodes[i]);
        combinations(nodes, size, i + 1, picked, out);
        picked.pop();
    }
}

/// Upstream prints masks as binary digits, node 0 rightmost.
impl fmt::Display for NumaMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02b}", self.0)
    }
}

/// One possible placement: on `affinity`'s nodes (None: anywhere, no preference), and whether
/// it is among the narrowest that can hold the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hint {
    pub affinity: Option<NumaMask>,
    pub preferred: bool,
}

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.affinity {
            Some(m) => write!(f, "{{{m} {}}}", self.preferred),
            None => write!(f, "{{<nil> {}}}", self.preferred),
        }
    }
}

/// A provider's hints for one resource: None is "no preference" (not aligned, or nothing
/// asked); an empty list is "no placement can hold it".
pub type ResourceHints = Option<Vec<Hint>>;

/// The hints for `request` items over the machine's `nodes`, as upstream's CPU and device
/// managers make them. Each item is given by the NUMA nodes it sits on (empty: no topology).
/// `all` is every item of the kind, `available` the free ones, `reusable` those the pod
/// hands on from its finished init containers: a mask must hold all of these that have a
/// topology. Masks that can hold the request are hints; the narrowest of the masks that could
/// hold it on an empty machine are preferred.
pub fn hints_for(
    nodes: &[u32],
    request: usize,
    all: &[Vec<u32>],
    available: &[Vec<u32>],
    reusable: &[Vec<u32>],
) -> Vec<Hint> {
    let mut min_affinity = nodes.len() as u32;
    let mut hints = Vec::new();
    for mask in NumaMask::all_of(nodes) {
        let in_mask = all.iter().filter(|n| mask.any_set(n)).count();
        if in_mask >= request && mask.count() < min_affinity {
            min_affinity = mask.count();
        }
        let mut matching = 0;
        let mut holds_reusable = true;
        for item in reusable.iter().filter(|n| !n.is_empty()) {
            if !mask.any_set(item) {
                holds_reusable = false;
                break;
            }
            matching += 1;
        }
        if !holds_reusable {
            continue;
        }
        matching += available.iter().filter(|n| mask.any_set(n)).count();
        if matching >= request {
            hints.push(Hint {
                affinity: Some(mask),
                preferred: false,
            });
        }
    }
    for h in &mut hints {
        h.preferred = h.affinity.is_some_and(|m| m.count() == min_affinity);
    }
    hints
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_come_single_nodes_first_then_wider() {
        let masks: Vec<String> = NumaMask::all_of(&[1, 0, 2])
            .iter()
            .map(|m| m.to_string())
            .collect();
        assert_eq!(
            masks,
            ["01", "10", "100", "11", "101", "110", "111"].map(String::from)
        );
    }

    #[test]
    fn narrower_is_fewer_nodes_then_lower_ones() {
        let (n0, n1, n01) = (NumaMask::of([0]), NumaMask::of([1]), NumaMask::of([0, 1]));
        assert!(n0.is_narrower_than(n1));
        assert!(!n1.is_narrower_than(n0));
        assert!(n1.is_narrower_than(n01));
        assert!(!n01.is_narrower_than(n01));
    }

    /// Two nodes of 4 CPUs each; node 0 has 1 free, node 1 has 4 free.
    #[test]
    fn a_request_one_node_can_hold_prefers_single_nodes_that_have_room() {
        let all: Vec<Vec<u32>> = [0, 0, 0, 0, 1, 1, 1, 1].map(|n| vec![n]).to_vec();
        let available: Vec<Vec<u32>> = [0, 1, 1, 1, 1].map(|n| vec![n]).to_vec();
        let hints = hints_for(&[0, 1], 3, &all, &available, &[]);
        let shown: Vec<String> = hints.iter().map(|h| h.to_string()).collect();
        assert_eq!(shown, ["{10 true}", "{11 false}"]);
        // Five free CPUs: only both nodes hold them, and no single node could.
        let hints = hints_for(&[0, 1], 5, &all, &available, &[]);
        let shown: Vec<String> = hints.iter().map(|h| h.to_string()).collect();
        assert_eq!(shown, ["{11 true}"]);
        // More than are free: no hint at all.
        assert!(hints_for(&[0, 1], 6, &all, &available, &[]).is_empty());
    }

    #[test]
    fn reusable_items_pin_the_mask_and_items_without_topology_count_nowhere() {
        let all = vec![vec![0], vec![1], vec![]];
        let hints = hints_for(&[0, 1], 1, &all, &[vec![0]], &[vec![1]]);
        let shown: Vec<String> = hints.iter().map(|h| h.to_string()).collect();
        assert_eq!(shown, ["{10 true}", "{11 false}"]);
        let hints = hints_for(&[0, 1], 1, &all, &[vec![]], &[vec![]]);
        assert!(hints.is_empty());
    }
}
