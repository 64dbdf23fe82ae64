//! process_* metrics of the kubelet itself, read at scrape time like the Go client's process
//! collector (same names and help texts, no stability prefix).

use std::time::{Duration, UNIX_EPOCH};

use crate::metrics::text::{Family, Kind, Sample};
use crate::stats::procfs;

fn gauge(name: &str, help: &str, kind: Kind, v: Option<f64>) -> Option<Family> {
    Some(Family {
        name: name.into(),
        help: help.into(),
        kind,
        samples: vec![Sample::new(vec![], v?)],
    })
}

fn open_fds() -> Option<f64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as f64)
}

fn max_fds() -> Option<f64> {
    crate::sys::max_open_files().map(|n| n as f64)
}

/// The families that could be read; a missing /proc file drops only its own metric.
pub fn families() -> Vec<Family> {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|t| procfs::proc_stat(&t));
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| procfs::boot_time(&t));
    let hz = procfs::clock_ticks() as f64;
    let cpu = stat
        .as_ref()
        .map(|s| (s.utime_ticks + s.stime_ticks) as f64 / hz);
    let start = match (&stat, boot) {
        (Some(s), Some(b)) => {
            let t = UNIX_EPOCH
                + Duration::from_secs(b)
                + Duration::from_secs_f64(s.start_ticks as f64 / hz);
            t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs_f64())
        }
        _ => None,
    };
    let rss = stat
        .as_ref()
        .map(|s| (s.rss_pages * procfs::page_size()) as f64);
    [
        gauge(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            Kind::Counter,
            cpu,
        ),
        gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            Kind::Gauge,
            rss,
        ),
        gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            Kind::Gauge,
            stat.as_ref().map(|s| s.vsize_bytes as f64),
        ),
        gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            Kind::Gauge,
            start,
        ),
        gauge(
            "process_open_fds",
            "Number of open file descriptors.",
            Kind::Gauge,
            open_fds(),
        ),
        gauge(
            "process_max_fds",
            "Maximum number of open file descriptors.",
            Kind::Gauge,
            max_fds(),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_stat_fields_count_from_the_last_parenthesis() {
        let text = "77 (a (b) c) R 1 77 77 0 -1 4194560 10 0 0 0 31 9 0 0 20 0 4 0 4242 5000 12 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        assert_eq!(
            procfs::proc_stat(text),
            Some(procfs::ProcStat {
                utime_ticks: 31,
                stime_ticks: 9,
                start_ticks: 4242,
                vsize_bytes: 5000,
                rss_pages: 12,
            })
        );
        assert_eq!(procfs::proc_stat("77 (short) R 1 2"), None);
        assert_eq!(procfs::proc_stat("no parenthesis"), None);
        assert_eq!(
            procfs::boot_time("cpu  1 2 3 4\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(procfs::boot_time("cpu  1 2 3 4\n"), None);
    }

    #[test]
    fn this_process_has_its_basics() {
        let fams = families();
        let get = |n: &str| {
            fams.iter()
                .find(|f| f.name == n)
                .map(|f| f.samples[0].value)
        };
        assert!(get("process_resident_memory_bytes").unwrap() > 0.0);
        assert!(get("process_cpu_seconds_total").is_some());
        let start = get("process_start_time_seconds").unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(start > 1.0e9 && start <= now + 1.0, "{start}");
        assert!(get("process_open_fds").unwrap() >= 1.0);
    }
}
