//! Parsers for the /proc files node statistics come from. Pure functions over the file text,
//! so they are tested with fixtures; the reads themselves happen in [`super::local`].

use std::collections::HashMap;

use super::types::InterfaceStats;

/// Interfaces cadvisor leaves out of node and pod network stats (loopback and the host ends
/// of container links), by name prefix.
const IGNORED_INTERFACE_PREFIXES: &[&str] = &["lo", "veth", "docker", "nerdctl"];

/// The interface upstream inlines as the "default" one in NetworkStats.
pub const DEFAULT_INTERFACE: &str = "eth0";

/// Busy CPU time of the whole machine in clock ticks from /proc/stat's aggregate `cpu` line:
/// everything but idle and iowait (guest time is already part of user time).
pub fn busy_cpu_ticks(proc_stat: &str) -> Option<u64> {
    let line = proc_stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse::<u64>().ok())
        .collect::<Option<Vec<u64>>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    if f.len() < 4 {
        return None;
    }
    Some(at(0) + at(1) + at(2) + at(5) + at(6) + at(7))
}

/// Boot time (seconds since the epoch) from /proc/stat's `btime`.
pub fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// `key value` lines (cgroup memory.stat, cpu.stat, /proc/vmstat) as a map; lines that do not
/// fit are skipped.
pub fn flat_keyed(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let k = it.next()?;
            let v = it.next()?.parse().ok()?;
            Some((k.to_string(), v))
        })
        .collect()
}

/// /proc/meminfo in bytes (its `kB` values are KiB).
pub fn meminfo(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, rest) = l.split_once(':')?;
            let mut it = rest.split_whitespace();
            let v: u64 = it.next()?.parse().ok()?;
            let scale = if it.next() == Some("kB") { 1024 } else { 1 };
            Some((k.trim().to_string(), v.saturating_mul(scale)))
        })
        .collect()
}

/// Interfaces from /proc/<pid>/net/dev, without the ignored ones, in file order.
pub fn net_dev(text: &str) -> Vec<InterfaceStats> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            if IGNORED_INTERFACE_PREFIXES
                .iter()
                .any(|p| name.starts_with(p))
            {
                return None;
            }
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|v| v.parse().ok())
                .collect::<Option<Vec<u64>>>()?;
            // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs ...
            if f.len() < 11 {
                return None;
            }
            Some(InterfaceStats {
                name: name.to_string(),
                rx_bytes: Some(f[0]),
                rx_errors: Some(f[2]),
                tx_bytes: Some(f[8]),
                tx_errors: Some(f[10]),
            })
        })
        .collect()
}

/// A process's cgroups from /proc/<pid>/cgroup: the v2 path and the v1 path per controller.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProcCgroups {
    pub unified: Option<String>,
    pub v1: HashMap<String, String>,
}

pub fn proc_cgroups(text: &str) -> ProcCgroups {
    let mut out = ProcCgroups::default();
    for line in text.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if controllers.is_empty() {
            out.unified = Some(path.to_string());
            continue;
        }
        for c in controllers.split(',') {
            out.v1.insert(c.to_string(), path.to_string());
        }
    }
    out
}

/// The fields of /proc/<pid>/stat the kubelet reports about itself.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProcStat {
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    /// Clock ticks after boot.
    pub start_ticks: u64,
    pub vsize_bytes: u64,
    pub rss_pages: u64,
}

/// The command name may hold spaces and parentheses, so fields are counted after the last ')'.
pub fn proc_stat(text: &str) -> Option<ProcStat> {
    let (_, rest) = text.rsplit_once(')')?;
    // rest starts at field 3 (state).
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |field: usize| -> Option<u64> { f.get(field - 3)?.parse().ok() };
    Some(ProcStat {
        utime_ticks: get(14)?,
        stime_ticks: get(15)?,
        start_ticks: get(22)?,
        vsize_bytes: get(23)?,
        rss_pages: get(24)?,
    })
}

/// Clock ticks per second, for /proc/stat and /proc/<pid>/stat.
pub fn clock_ticks() -> u64 {
    crate::sys::clock_ticks()
}

pub fn page_size() -> u64 {
    crate::sys::page_size()
}

pub fn ticks_to_nanos(ticks: u64, per_second: u64) -> u64 {
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(per_second.max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_STAT: &str = "\
cpu  4705 356 584 3699176 23060 0 277 9 7 0
cpu0 1393 280 283 1847213 11603 0 100 5 0 0
intr 114930548 113199788 3 0 5 263 0 4 [...]
ctxt 1990473
btime 1062191376
processes 2915
";

    #[test]
    fn proc_stat_busy_ticks_and_boot_time() {
        // user+nice+system+irq+softirq+steal
        assert_eq!(busy_cpu_ticks(PROC_STAT), Some(4705 + 356 + 584 + 277 + 9));
        assert_eq!(boot_time(PROC_STAT), Some(1062191376));
        assert_eq!(busy_cpu_ticks("intr 1\n"), None);
        assert_eq!(busy_cpu_ticks("cpu 1 x 3 4\n"), None);
        assert_eq!(ticks_to_nanos(250, 100), 2_500_000_000);
    }

    #[test]
    fn meminfo_is_in_bytes() {
        let m = meminfo(
            "MemTotal:       16303012 kB\nMemFree:          811580 kB\nInactive(file):  100 kB\nHugePages_Total:       0\n",
        );
        assert_eq!(m["MemTotal"], 16303012 * 1024);
        assert_eq!(m["Inactive(file)"], 102400);
        assert_eq!(m["HugePages_Total"], 0);
    }

    #[test]
    fn net_dev_skips_loopback_and_veths() {
        let text = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  123456     100    0    0    0     0          0         0   123456     100    0    0    0     0       0          0
  eth0: 9876543   54321    7    1    0     0          0        12  1234567    4321    3    0    0     0       0          0
vethab12:     10       1    0    0    0     0          0         0       20       2    0    0    0     0       0          0
";
        let ifs = net_dev(text);
        assert_eq!(ifs.len(), 1);
        assert_eq!(
            ifs[0],
            InterfaceStats {
                name: "eth0".into(),
                rx_bytes: Some(9876543),
                rx_errors: Some(7),
                tx_bytes: Some(1234567),
                tx_errors: Some(3),
            }
        );
    }

    #[test]
    fn proc_cgroup_v1_and_v2() {
        let c = proc_cgroups(
            "12:cpu,cpuacct:/system.slice/kubelet.service\n4:memory:/system.slice/kubelet.service\n0::/system.slice/kubelet.service\n",
        );
        assert_eq!(c.v1["cpuacct"], "/system.slice/kubelet.service");
        assert_eq!(c.v1["cpu"], "/system.slice/kubelet.service");
        assert_eq!(c.v1["memory"], "/system.slice/kubelet.service");
        assert_eq!(c.unified.as_deref(), Some("/system.slice/kubelet.service"));
        // name=systemd style hierarchies are kept by their name too, harmlessly.
        assert_eq!(proc_cgroups("1:name=systemd:/\n").v1["name=systemd"], "/");
    }

    #[test]
    fn proc_self_stat_with_odd_command_name() {
        let text = "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 8 0 12345 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        let s = proc_stat(text).unwrap();
        assert_eq!(s.utime_ticks, 250);
        assert_eq!(s.stime_ticks, 50);
        assert_eq!(s.start_ticks, 12345);
        assert_eq!(s.vsize_bytes, 104857600);
        assert_eq!(s.rss_pages, 2560);
        assert!(proc_stat("garbage").is_none());
    }

    #[test]
    fn flat_keyed_skips_bad_lines() {
        let m =
            flat_keyed("cache 10\nrss 20\nweird\nhierarchical_memory_limit 9223372036854771712\n");
        assert_eq!(m["cache"], 10);
        assert_eq!(m["rss"], 20);
        assert_eq!(m.len(), 3);
    }
}
