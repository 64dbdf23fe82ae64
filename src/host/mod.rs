//! Facts about this machine, read in one place: the node's IP and its processors, memory,
//! swap, huge pages and identity. The kubelet reads them once at start and hands the same
//! copy to node status, cgroup allocatable, admission and the runtime, so they never disagree
//! (the node status loop refreshes its own copy with the same reader).

pub mod facts;
mod ip;

use std::net::IpAddr;
use std::path::Path;

pub use facts::{FactSources, MachineFacts, read_machine_facts};
pub use ip::{detect_node_ip, serving_ips};

#[derive(Clone, Debug, Default)]
pub struct Host {
    /// The node's primary IP: `--node-ip`, else the address of the default route's interface.
    pub node_ip: String,
    pub facts: MachineFacts,
}

impl Host {
    /// Blocking: small procfs/sysfs reads and a statvfs of `root_dir`.
    pub fn detect(node_ip_flag: &[IpAddr], root_dir: &Path) -> Host {
        Host {
            node_ip: detect_node_ip(node_ip_flag),
            facts: read_machine_facts(&FactSources::default(), root_dir),
        }
    }

    /// Online processors in millicores (0 when unknown, as the node status reports them).
    pub fn cpu_millis(&self) -> i64 {
        self.facts
            .num_cpus
            .and_then(|n| i64::try_from(n).ok())
            .map_or(0, |n| n.saturating_mul(1000))
    }

    pub fn memory_bytes(&self) -> i64 {
        self.facts
            .memory_bytes
            .and_then(|b| i64::try_from(b).ok())
            .unwrap_or(0)
    }

    /// Whether any swap is active (SwapTotal above zero).
    pub fn swap_on(&self) -> bool {
        self.facts.swap_bytes.unwrap_or(0) > 0
    }
}
