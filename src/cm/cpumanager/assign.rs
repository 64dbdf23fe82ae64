//! Which free CPUs an exclusive request gets: packed best fit, as upstream's static policy
//! does. Whole sockets or NUMA nodes when the request is at least that big, then whole cores,
//! then single threads that fill cores already partly taken, on the sockets the request
//! already uses, so that exclusive containers share as few caches as possible and the
//! fragments left are small. With `distribute-cpus-across-numa`, a request no single NUMA node
//! can hold is split evenly across the fewest nodes that can.

use super::cpuset::CpuSet;
use super::topology::Topology;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TakeError {
    #[error(
        "not enough cpus available to satisfy request: requested={requested}, available={available}"
    )]
    NotEnough { requested: usize, available: usize },
}

struct Accumulator {
    free: CpuSet,
    result: CpuSet,
    needed: usize,
}

impl Accumulator {
    fn take(&mut self, cpus: &CpuSet) {
        self.result = self.result.union(cpus);
        self.free = self.free.difference(cpus);
        self.needed -= cpus.len();
    }

    /// Takes every group of `groups` that is wholly free, in id order, while the request
    /// still needs a whole group.
    fn take_whole(&mut self, groups: Vec<CpuSet>) {
        for group in groups {
            if self.needed >= group.len() && !group.is_empty() && group.is_subset(&self.free) {
                self.take(&group);
            }
        }
    }

    fn free_in(&self, group: &CpuSet) -> usize {
        group.intersection(&self.free).len()
    }
}

/// Takes `n` of `available` by topology; `NotEnough` when there are fewer.
pub fn take_by_topology(
    topo: &Topology,
    available: &CpuSet,
    n: usize,
) -> Result<CpuSet, TakeError> {
    let available = available.intersection(&topo.all());
    if n > available.len() {
        return Err(TakeError::NotEnough {
            requested: n,
            available: available.len(),
        });
    }
    let mut acc = Accumulator {
        free: available,
        result: CpuSet::new(),
        needed: n,
    };
    // The bigger of socket and NUMA node first (a socket may hold several nodes, or a node
    // several sockets).
    let sockets: Vec<CpuSet> = topo
        .sockets()
        .into_iter()
        .map(|s| topo.cpus_in_socket(s))
        .collect();
    let nodes: Vec<CpuSet> = topo
        .numa_nodes()
        .into_iter()
        .map(|n| topo.cpus_in_numa(n))
        .collect();
    if topo.cpus_per_numa() > topo.cpus_per_socket() {
        acc.take_whole(nodes);
        acc.take_whole(sockets);
    } else {
        acc.take_whole(sockets);
        acc.take_whole(nodes);
    }
    if acc.needed == 0 {
        return Ok(acc.result);
    }

    // Whole cores, on the sockets with the fewest free CPUs first (best fit).
    let mut cores: Vec<(usize, u32, u32)> = topo
        .cores()
        .into_iter()
        .filter(|&c| {
            let cpus = topo.cpus_in_core(c);
            cpus.is_subset(&acc.free)
        })
        .filter_map(|c| {
            let socket = topo.cpus.get(&c)?.socket;
            Some((acc.free_in(&topo.cpus_in_socket(socket)), socket, c))
        })
        .collect();
    cores.sort();
    let per_core = topo.cpus_per_core();
    for (_, _, core) in cores {
        if acc.needed < per_core {
            break;
        }
        let cpus = topo.cpus_in_core(core);
        if cpus.is_subset(&acc.free) && acc.needed >= cpus.len() {
            acc.take(&cpus);
        }
    }

    // Single threads: fill partly taken cores, near what the request already holds.
    while acc.needed > 0 {
        let pick = acc
            .free
            .iter()
            .min_by_key(|cpu| {
                let info = topo.cpus[cpu];
                let socket_cpus = topo.cpus_in_socket(info.socket);
                (
                    std::cmp::Reverse(socket_cpus.intersection(&acc.result).len()),
                    acc.free_in(&topo.cpus_in_core(info.core)),
                    acc.free_in(&socket_cpus),
                    info.socket,
                    info.core,
                    *cpu,
                )
            })
            .expect("enough CPUs were checked above");
        acc.take(&std::iter::once(pick).collect());
    }
    Ok(acc.result)
}

/// `distribute-cpus-across-numa`: when no NUMA node alone has `n` free CPUs, the fewest nodes
/// that can hold an even share each (in steps of `group` CPUs, a whole core with
/// `full-pcpus-only`), the combination leaving the most even remainder; None when one node
/// suffices, the machine has one node, or no split fits.
pub fn take_distributed(
    topo: &Topology,
    available: &CpuSet,
    n: usize,
    group: usize,
) -> Option<Result<CpuSet, TakeError>> {
    let nodes: Vec<(u32, CpuSet)> = topo
        .numa_nodes()
        .into_iter()
        .map(|id| (id, topo.cpus_in_numa(id).intersection(available)))
        .collect();
    if nodes.len() < 2 || nodes.iter().any(|(_, free)| free.len() >= n) {
        return None;
    }
    let group = group.max(1);
    for k in 2..=nodes.len() {
        let mut best: Option<(usize, Vec<(usize, usize)>)> = None;
        for combo in combinations(nodes.len(), k) {
            let Some(shares) = split(n, group, combo.iter().map(|&i| nodes[i].1.len()).collect())
            else {
                continue;
            };
            let left: Vec<usize> = combo
                .iter()
                .zip(&shares)
                .map(|(&i, s)| nodes[i].1.len() - s)
                .collect();
            let spread = left.iter().max().unwrap_or(&0) - left.iter().min().unwrap_or(&0);
            if best.as_ref().is_none_or(|(b, _)| spread < *b) {
                best = Some((spread, combo.into_iter().zip(shares).collect()));
            }
        }
        if let Some((_, plan)) = best {
            let mut result = CpuSet::new();
            for (i, share) in plan {
                match take_by_topology(topo, &nodes[i].1, share) {
                    Ok(cpus) => result = result.union(&cpus),
                    Err(e) => return Some(Err(e)),
                }
            }
            return Some(Ok(result));
        }
    }
    None
}

/// Even shares of `n` over nodes with `free` CPUs each, in steps of `group`; what does not
/// divide evenly goes, a group at a time, to the nodes with the most room left.
fn split(n: usize, group: usize, free: Vec<usize>) -> Option<Vec<usize>> {
    let k = free.len();
    let base = n / k / group * group;
    let mut shares = vec![base; k];
    if free.iter().any(|&f| f < base) {
        return None;
    }
    let mut rest = n - base * k;
    while rest > 0 {
        let step = group.min(rest);
        let i = (0..k)
            .filter(|&i| free[i] - shares[i] >= step)
            .max_by_key(|&i| (free[i] - shares[i], std::cmp::Reverse(i)))?;
        shares[i] += step;
        rest -= step;
    }
    Some(shares)
}

/// Index combinations of `k` out of `n`, in lexical order.
fn combinations(n: usize, k: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        out.push(idx.clone());
        let Some(i) = (0..k).rev().find(|&i| idx[i] != i + n - k) else {
            return out;
        };
        idx[i] += 1;
        for j in i + 1..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::topology::{Topology, two_sockets_ht};
    use super::*;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    fn take(t: &Topology, avail: &str, n: usize) -> String {
        take_by_topology(t, &set(avail), n).unwrap().to_string()
    }

    #[test]
    fn whole_cores_and_sockets_come_first() {
        let t = two_sockets_ht();
        // One CPU: a thread of the lowest core; two: a whole core, not two cores' threads.
        assert_eq!(take(&t, "0-7", 1), "0");
        assert_eq!(take(&t, "0-7", 2), "0,4");
        // A socket's worth: the whole socket.
        assert_eq!(take(&t, "0-7", 4), "0-1,4-5");
        assert_eq!(take(&t, "0-7", 6), "0-2,4-6");
        // Best fit: the socket with fewer free CPUs is filled first (cpu 0 is gone).
        assert_eq!(take(&t, "1-7", 2), "1,5");
        // A lone thread whose sibling is taken goes before splitting a whole core.
        assert_eq!(take(&t, "1-3,5-7", 1), "1");
        assert_eq!(take(&t, "2-7", 1), "4");
    }

    #[test]
    fn a_request_beyond_the_free_cpus_is_refused_with_upstreams_words() {
        let t = two_sockets_ht();
        let err = take_by_topology(&t, &set("1-2"), 3).unwrap_err();
        assert_eq!(
            err.to_string(),
            "not enough cpus available to satisfy request: requested=3, available=2"
        );
    }

    #[test]
    fn distribution_across_numa_splits_evenly_only_when_one_node_cannot_hold_it() {
        let t = two_sockets_ht();
        assert_eq!(take_distributed(&t, &set("0-7"), 4, 1), None);
        let got = take_distributed(&t, &set("0-7"), 6, 1).unwrap().unwrap();
        assert_eq!(got.intersection(&t.cpus_in_numa(0)).len(), 3);
        assert_eq!(got.intersection(&t.cpus_in_numa(1)).len(), 3);
        // In whole cores: 6 = 2 + 4 is not even by cores of 2, so 4 + 2 is the split.
        let got = take_distributed(&t, &set("0-7"), 6, 2).unwrap().unwrap();
        assert_eq!(got.len(), 6);
        let on0 = got.intersection(&t.cpus_in_numa(0)).len();
        assert!(on0 == 2 || on0 == 4, "{got}");
        // An even split of 5 gives each node 2 first: a node with 1 free CPU cannot take part.
        assert_eq!(split(5, 1, vec![1, 4]), None);
        assert_eq!(split(5, 1, vec![3, 4]), Some(vec![2, 3]));
        assert_eq!(combinations(3, 2), vec![vec![0, 1], vec![0, 2], vec![1, 2]]);
    }
}
