//! The device manager as a topology manager hint provider: where a container's (or a pod's)
//! devices could come from by NUMA node, and, once the topology manager chose the nodes,
//! which devices it gets (upstream's topology_hints.go and devicesToAllocate order).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::state::{self, AllocationError, State};
use crate::cm::numa::{Hint, NumaMask, ResourceHints, hints_for};

impl State {
    /// Whether any device of `resource` names a NUMA node: only then does it take part in
    /// alignment.
    fn has_topology(&self, resource: &str) -> bool {
        self.resources
            .get(resource)
            .is_some_and(|r| r.devices.values().any(|d| d.numa.iter().any(|&n| n >= 0)))
    }

    fn nodes_of<'a>(
        &self,
        resource: &str,
        ids: impl IntoIterator<Item = &'a String>,
    ) -> Vec<Vec<u32>> {
        ids.into_iter()
            .map(|id| {
                self.numa_of(resource, id)
                    .into_iter()
                    .filter_map(|n| u32::try_from(n).ok())
                    .collect()
            })
            .collect()
    }

    fn all_nodes(&self, resource: &str) -> Vec<Vec<u32>> {
        let ids: Vec<&String> = self
            .resources
            .get(resource)
            .map(|r| r.devices.keys().collect())
            .unwrap_or_default();
        self.nodes_of(resource, ids)
    }

    /// Hints per plugin resource in `needs`: none for a resource whose devices name no node,
    /// else `placements(resource, needed, all devices' nodes)`.
    fn hints_per_resource(
        &self,
        needs: BTreeMap<String, usize>,
        placements: impl Fn(&str, usize, &[Vec<u32>]) -> Vec<Hint>,
    ) -> BTreeMap<String, ResourceHints> {
        let mut out = BTreeMap::new();
        for (resource, needed) in needs {
            if !self.is_plugin_resource(&resource) {
                continue;
            }
            let hints = self
                .has_topology(&resource)
                .then(|| placements(&resource, needed, &self.all_nodes(&resource)));
            out.insert(resource, hints);
        }
        out
    }

    /// One container's hints per plugin resource it asks for.
    pub fn hints(
        &self,
        uid: &str,
        pod: &Pod,
        container: &Container,
        nodes: &[u32],
    ) -> BTreeMap<String, ResourceHints> {
        let name = &container.name;
        self.hints_per_resource(
            state::container_needs(container),
            |resource, needed, all| {
                match self.candidates(uid, pod, name, resource, needed) {
                    // Held with another count, or too few free: no placement holds it.
                    Err(_) => Vec::new(),
                    Ok(None) => {
                        let held = self.held(uid, name, resource);
                        let ids: Vec<&String> =
                            held.map(|a| a.ids.iter().collect()).unwrap_or_default();
                        hints_for(nodes, needed, all, &self.nodes_of(resource, ids), &[])
                    }
                    Ok(Some((reusable, free))) => {
                        let reusable = self.nodes_of(resource, &reusable);
                        let free = self.nodes_of(resource, &free);
                        hints_for(nodes, needed, all, &free, &reusable)
                    }
                }
            },
        )
    }

    /// The whole pod's hints per plugin resource (the topology manager's pod scope).
    pub fn pod_hints(
        &self,
        uid: &str,
        pod: &Pod,
        nodes: &[u32],
    ) -> BTreeMap<String, ResourceHints> {
        self.hints_per_resource(state::pod_needs(pod), |resource, needed, all| {
            let held: BTreeSet<&String> = self
                .pods
                .get(uid)
                .into_iter()
                .flat_map(|c| c.values())
                .filter_map(|r| r.get(resource))
                .flat_map(|a| a.ids.iter())
                .collect();
            if !held.is_empty() {
                if held.len() != needed {
                    return Vec::new();
                }
                return hints_for(nodes, needed, all, &self.nodes_of(resource, held), &[]);
            }
            let taken = self.held_by_others(resource, uid);
            let free: Vec<&String> = self
                .resources
                .get(resource)
                .map(|r| r.healthy().filter(|id| !taken.contains(id)).collect())
                .unwrap_or_default();
            if free.len() < needed {
                return Vec::new();
            }
            hints_for(nodes, needed, all, &self.nodes_of(resource, free), &[])
        })
    }

    /// Picks the container's devices now, in upstream's order: those handed on by the pod's
    /// init containers, then free ones on `affinity`'s nodes, then free ones on other nodes,
    /// then those with no node. True when anything was picked.
    pub fn assign_aligned(
        &mut self,
        uid: &str,
        pod: &Pod,
        container: &Container,
        affinity: Option<NumaMask>,
    ) -> Result<bool, AllocationError> {
        let mut picked = false;
        for (resource, needed) in state::container_needs(container) {
            if !self.is_plugin_resource(&resource) {
                continue;
            }
            let Some((reusable, free)) =
                self.candidates(uid, pod, &container.name, &resource, needed)?
            else {
                continue;
            };
            let rank = |id: &String| -> u8 {
                let nodes: Vec<u32> = self
                    .numa_of(&resource, id)
                    .into_iter()
                    .filter_map(|n| u32::try_from(n).ok())
                    .collect();
                match affinity {
                    _ if nodes.is_empty() => 2,
                    Some(mask) if mask.any_set(&nodes) => 0,
                    _ => 1,
                }
            };
            let mut free = free;
            free.sort_by_key(|id| rank(id));
            let ids: BTreeSet<String> = reusable.into_iter().chain(free).take(needed).collect();
            self.assign(uid, &container.name, &resource, ids);
            picked = true;
        }
        Ok(picked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::devicemanager::state::Device;

    const R: &str = "example.com/gpu";

    fn container(name: &str, n: u32) -> Container {
        serde_json::from_value(serde_json::json!({
            "name": name,
            "resources": {"limits": {R: n.to_string()}, "requests": {R: n.to_string()}},
        }))
        .unwrap()
    }

    fn pod(containers: Vec<Container>) -> Pod {
        Pod {
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                containers,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// gpu-a and gpu-b on node 0, gpu-c on node 1, gpu-d with no node.
    fn state(numa: &[(&str, Vec<i64>)]) -> State {
        let mut s = State::default();
        assert!(s.connect(R));
        s.update_devices(
            R,
            numa.iter().map(|(id, numa)| {
                (
                    id.to_string(),
                    Device {
                        healthy: true,
                        numa: numa.clone(),
                    },
                )
            }),
        );
        s
    }

    fn shown(hints: &BTreeMap<String, ResourceHints>) -> Vec<String> {
        hints[R]
            .as_ref()
            .map(|h| h.iter().map(|h| h.to_string()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn devices_with_nodes_give_hints_and_devices_without_give_no_preference() {
        let s = state(&[
            ("gpu-a", vec![0]),
            ("gpu-b", vec![0]),
            ("gpu-c", vec![1]),
            ("gpu-d", vec![]),
        ]);
        let two = pod(vec![container("c", 2)]);
        let hints = s.hints(
            "p",
            &two,
            &two.spec.as_ref().unwrap().containers[0],
            &[0, 1],
        );
        assert_eq!(shown(&hints), ["{01 true}", "{11 false}"]);
        let four = pod(vec![container("c", 4)]);
        let hints = s.pod_hints("p", &four, &[0, 1]);
        // gpu-d sits on no node: no mask holds four.
        assert_eq!(shown(&hints), Vec::<String>::new());

        let plain = state(&[("gpu-a", vec![]), ("gpu-b", vec![])]);
        let hints = plain.hints(
            "p",
            &two,
            &two.spec.as_ref().unwrap().containers[0],
            &[0, 1],
        );
        assert_eq!(hints.get(R), Some(&None));
    }

    #[test]
    fn aligned_picks_take_the_chosen_node_first_then_other_nodes_then_none() {
        let mut s = state(&[
            ("gpu-a", vec![]),
            ("gpu-b", vec![0]),
            ("gpu-c", vec![1]),
            ("gpu-d", vec![1]),
        ]);
        let p = pod(vec![container("c", 3)]);
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        assert!(
            s.assign_aligned("p", &p, &c, Some(NumaMask::of([1])))
                .unwrap()
        );
        let held: Vec<&String> = s.held("p", "c", R).unwrap().ids.iter().collect();
        assert_eq!(held, ["gpu-b", "gpu-c", "gpu-d"]);
        // Held already: nothing more is picked.
        assert!(
            !s.assign_aligned("p", &p, &c, Some(NumaMask::of([0])))
                .unwrap()
        );
        // Another pod gets the one left.
        let q = pod(vec![container("c", 1)]);
        let qc = q.spec.as_ref().unwrap().containers[0].clone();
        assert!(s.assign_aligned("q", &q, &qc, None).unwrap());
        let held: Vec<&String> = s.held("q", "c", R).unwrap().ids.iter().collect();
        assert_eq!(held, ["gpu-a"]);
    }
}
