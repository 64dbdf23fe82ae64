//! process_* metrics of the kubelet itself, read at scrape time like the Go client's process
//! collector (same names and help texts, no stability prefix). The few /proc fields needed are
//! parsed here rather than borrowed from the stats parsers, so metrics depends on nothing else
//! in the crate.

use std::time::{Duration, UNIX_EPOCH};

use super::text::{Family, Kind, Sample};

/// The fields of /proc/self/stat the collector reports.
#[derive(Debug, PartialEq, Eq)]
struct SelfStat {
    utime_ticks: u64,
    stime_ticks: u64,
    /// Clock ticks after boot.
    start_ticks: u64,
    vsize_bytes: u64,
    rss_pages: u64,
}

/// The command name (field 2) may hold spaces and parentheses, so fields are numbered from
/// the last ')', after which field 3 (state) comes.
fn parse_self_stat(text: &str) -> Option<SelfStat> {
    let (_, after_comm) = text.rsplit_once(')')?;
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n.checked_sub(3)?)?.parse().ok() };
    Some(SelfStat {
        utime_ticks: field(14)?,
        stime_ticks: field(15)?,
        start_ticks: field(22)?,
        vsize_bytes: field(23)?,
        rss_pages: field(24)?,
    })
}

/// Boot time in seconds since the epoch, from /proc/stat's `btime` line.
fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    let line = proc_stat.lines().find(|l| l.starts_with("btime "))?;
    line["btime ".len()..].trim().parse().ok()
}

/// A sysconf value, or `fallback` when the system does not say.
fn sysconf(name: libc::c_int, fallback: u64) -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let v = unsafe { libc::sysconf(name) };
    u64::try_from(v).ok().filter(|v| *v > 0).unwrap_or(fallback)
}

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
    // SAFETY: an all-zero rlimit is valid; getrlimit fills it.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a writable rlimit.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0).then_some(r.rlim_cur as f64)
}

/// The families that could be read; a missing /proc file drops only its own metric.
pub fn families() -> Vec<Family> {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|t| parse_self_stat(&t));
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| parse_boot_time(&t));
    let hz = sysconf(libc::_SC_CLK_TCK, 100) as f64;
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
        .map(|s| (s.rss_pages * sysconf(libc::_SC_PAGESIZE, 4096)) as f64);
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
            parse_self_stat(text),
            Some(SelfStat {
                utime_ticks: 31,
                stime_ticks: 9,
                start_ticks: 4242,
                vsize_bytes: 5000,
                rss_pages: 12,
            })
        );
        assert_eq!(parse_self_stat("77 (short) R 1 2"), None);
        assert_eq!(parse_self_stat("no parenthesis"), None);
        assert_eq!(
            parse_boot_time("cpu  1 2 3 4\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_boot_time("cpu  1 2 3 4\n"), None);
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
