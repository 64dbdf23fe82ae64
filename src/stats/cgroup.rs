//! CPU and memory of one cgroup, read the way cadvisor does for cgroup v1 and v2: cumulative
//! CPU time, usage, working set (usage minus inactive file pages), RSS and page faults; on v2
//! also the pressure stall information (PSI) of CPU, memory and IO, which v1 does not keep per
//! cgroup.

use std::path::{Path, PathBuf};

use crate::cm::layout::Layout;

use super::procfs::flat_keyed;

/// v1 reports "no limit" as a page-rounded i64::MAX; anything this large is unlimited.
const UNLIMITED: u64 = 1 << 62;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemorySample {
    pub usage: u64,
    pub working_set: u64,
    pub rss: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    pub limit: Option<u64>,
}

/// One line of a PSI file: how long some (or all) tasks stalled on the resource.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PsiLine {
    /// Cumulative stall time in microseconds, as the kernel counts it.
    pub total_us: u64,
    /// Percent of the last 10 s, 60 s and 300 s.
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
}

/// A PSI file (`cpu.pressure`, /proc/pressure/io, ...): the `some` and `full` lines.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pressure {
    pub some: PsiLine,
    pub full: PsiLine,
}

/// The pressure of each resource, where the kernel keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PsiSet {
    pub cpu: Option<Pressure>,
    pub memory: Option<Pressure>,
    pub io: Option<Pressure>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CgroupSample {
    pub cpu_usage_ns: Option<u64>,
    pub memory: Option<MemorySample>,
    pub psi: PsiSet,
}

impl CgroupSample {
    pub fn is_empty(&self) -> bool {
        self.cpu_usage_ns.is_none() && self.memory.is_none()
    }
}

/// Where a cgroup's files are: one directory per v1 controller, or the single v2 directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupDirs {
    V1 {
        cpuacct: Option<PathBuf>,
        memory: Option<PathBuf>,
    },
    V2(PathBuf),
}

fn join(base: &Path, name: &str) -> PathBuf {
    name.split('/')
        .filter(|c| !c.is_empty())
        .fold(base.to_path_buf(), |p, c| p.join(c))
}

/// The directories of the cgroup called `name` ("/kubepods/pod<uid>", cgroupfs style).
pub fn dirs(layout: &Layout, name: &str) -> CgroupDirs {
    match layout {
        Layout::V1(hs) => {
            let find = |c: &str| hs.iter().find(|h| h.has(c)).map(|h| join(&h.path, name));
            CgroupDirs::V1 {
                cpuacct: find("cpuacct"),
                memory: find("memory"),
            }
        }
        Layout::V2(root) => CgroupDirs::V2(join(root, name)),
    }
}

/// Like [`dirs`] with a separate name per resource, for a process whose v1 controllers sit in
/// different cgroups.
pub fn dirs_split(layout: &Layout, cpu_name: &str, memory_name: &str) -> CgroupDirs {
    match (dirs(layout, cpu_name), dirs(layout, memory_name)) {
        (CgroupDirs::V1 { cpuacct, .. }, CgroupDirs::V1 { memory, .. }) => {
            CgroupDirs::V1 { cpuacct, memory }
        }
        (v2, _) => v2,
    }
}

fn read(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

fn read_u64(dir: &Path, file: &str) -> Option<u64> {
    read(dir, file)?.trim().parse().ok()
}

/// Reads the cgroup; `psi` also reads its pressure files (v2 only: v1 has none per cgroup).
pub fn sample(dirs: &CgroupDirs, psi: bool) -> CgroupSample {
    match dirs {
        CgroupDirs::V1 { cpuacct, memory } => CgroupSample {
            cpu_usage_ns: cpuacct
                .as_deref()
                .and_then(|d| read_u64(d, "cpuacct.usage")),
            memory: memory.as_deref().and_then(|d| {
                let stat = read(d, "memory.stat")?;
                memory_v1(
                    read_u64(d, "memory.usage_in_bytes")?,
                    &stat,
                    read_u64(d, "memory.limit_in_bytes"),
                )
            }),
            psi: PsiSet::default(),
        },
        CgroupDirs::V2(d) => CgroupSample {
            cpu_usage_ns: read(d, "cpu.stat").and_then(|s| cpu_v2(&s)),
            memory: read_u64(d, "memory.current").and_then(|usage| {
                let stat = read(d, "memory.stat")?;
                let limit = read(d, "memory.max").and_then(|m| m.trim().parse().ok());
                memory_v2(usage, &stat, limit)
            }),
            psi: if psi {
                psi_set(|resource| read(d, &format!("{resource}.pressure")))
            } else {
                PsiSet::default()
            },
        },
    }
}

/// The three pressure files, read by `read("cpu" | "memory" | "io")`.
pub fn psi_set(read: impl Fn(&str) -> Option<String>) -> PsiSet {
    let get = |resource: &str| read(resource).and_then(|t| pressure(&t));
    PsiSet {
        cpu: get("cpu"),
        memory: get("memory"),
        io: get("io"),
    }
}

/// Parses a PSI file: "some avg10=0.12 avg60=0.05 avg300=0.01 total=12345" and the same for
/// "full". A kernel before 5.13 has no `full` line in cpu.pressure; it reads as zeros, as in
/// upstream. Without a well-formed `some` line there is nothing to report.
pub fn pressure(text: &str) -> Option<Pressure> {
    let mut some = None;
    let mut full = None;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let slot = match words.next() {
            Some("some") => &mut some,
            Some("full") => &mut full,
            _ => continue,
        };
        *slot = psi_line(words);
    }
    Some(Pressure {
        some: some?,
        full: full.unwrap_or_default(),
    })
}

fn psi_line<'a>(fields: impl Iterator<Item = &'a str>) -> Option<PsiLine> {
    let (mut avg10, mut avg60, mut avg300, mut total) = (None, None, None, None);
    for field in fields {
        let (key, value) = field.split_once('=')?;
        match key {
            "avg10" => avg10 = value.parse::<f64>().ok().filter(|v| v.is_finite()),
            "avg60" => avg60 = value.parse::<f64>().ok().filter(|v| v.is_finite()),
            "avg300" => avg300 = value.parse::<f64>().ok().filter(|v| v.is_finite()),
            "total" => total = value.parse().ok(),
            _ => {}
        }
    }
    Some(PsiLine {
        total_us: total?,
        avg10: avg10?,
        avg60: avg60?,
        avg300: avg300?,
    })
}

/// Cumulative CPU nanoseconds from a v2 cpu.stat (`usage_usec`).
pub fn cpu_v2(cpu_stat: &str) -> Option<u64> {
    flat_keyed(cpu_stat)
        .get("usage_usec")
        .map(|us| us.saturating_mul(1000))
}

fn working_set(usage: u64, inactive_file: u64) -> u64 {
    usage.saturating_sub(inactive_file)
}

fn limit(l: Option<u64>) -> Option<u64> {
    l.filter(|l| *l < UNLIMITED)
}

/// v1 memory.stat: the `total_` keys count the subtree (pod cgroups hold their containers).
pub fn memory_v1(usage: u64, stat: &str, raw_limit: Option<u64>) -> Option<MemorySample> {
    let s = flat_keyed(stat);
    let get = |k: &str| {
        s.get(&format!("total_{k}"))
            .or_else(|| s.get(k))
            .copied()
            .unwrap_or(0)
    };
    Some(MemorySample {
        usage,
        working_set: working_set(usage, get("inactive_file")),
        rss: get("rss"),
        page_faults: get("pgfault"),
        major_page_faults: get("pgmajfault"),
        limit: limit(raw_limit),
    })
}

pub fn memory_v2(usage: u64, stat: &str, raw_limit: Option<u64>) -> Option<MemorySample> {
    let s = flat_keyed(stat);
    let get = |k: &str| s.get(k).copied().unwrap_or(0);
    Some(MemorySample {
        usage,
        working_set: working_set(usage, get("inactive_file")),
        rss: get("anon"),
        page_faults: get("pgfault"),
        major_page_faults: get("pgmajfault"),
        limit: limit(raw_limit),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::layout::Hierarchy;
    use std::collections::BTreeSet;

    const V1_STAT: &str = "\
cache 1000
rss 500
inactive_file 300
pgfault 7
pgmajfault 1
total_cache 4000
total_rss 2000
total_inactive_file 1500
total_pgfault 70
total_pgmajfault 3
";

    const V2_STAT: &str = "\
anon 2097152
file 1048576
inactive_file 524288
active_file 524288
pgfault 1234
pgmajfault 5
";

    #[test]
    fn v1_uses_subtree_totals() {
        let m = memory_v1(10_000, V1_STAT, Some(9223372036854771712)).unwrap();
        assert_eq!(m.usage, 10_000);
        assert_eq!(m.working_set, 8_500);
        assert_eq!(m.rss, 2000);
        assert_eq!(m.page_faults, 70);
        assert_eq!(m.major_page_faults, 3);
        assert_eq!(m.limit, None);
        let limited = memory_v1(1000, "inactive_file 2000\n", Some(4096)).unwrap();
        assert_eq!(limited.working_set, 0, "never below zero");
        assert_eq!(limited.limit, Some(4096));
    }

    #[test]
    fn v2_memory_and_cpu() {
        let m = memory_v2(4_194_304, V2_STAT, Some(8_388_608)).unwrap();
        assert_eq!(m.working_set, 4_194_304 - 524_288);
        assert_eq!(m.rss, 2_097_152);
        assert_eq!(m.page_faults, 1234);
        assert_eq!(m.major_page_faults, 5);
        assert_eq!(m.limit, Some(8_388_608));
        assert_eq!(
            cpu_v2("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n"),
            Some(1_500_000)
        );
        assert_eq!(cpu_v2("nr_periods 0\n"), None);
    }

    #[test]
    fn reads_fake_trees() {
        let tmp = tempfile::tempdir().unwrap();
        let cpu = tmp.path().join("cpu,cpuacct");
        let mem = tmp.path().join("memory");
        let layout = Layout::V1(vec![
            Hierarchy {
                path: cpu.clone(),
                controllers: BTreeSet::from(["cpu".into(), "cpuacct".into()]),
            },
            Hierarchy {
                path: mem.clone(),
                controllers: BTreeSet::from(["memory".into()]),
            },
        ]);
        let pod = "/kubepods/podabc";
        std::fs::create_dir_all(cpu.join("kubepods/podabc")).unwrap();
        std::fs::create_dir_all(mem.join("kubepods/podabc")).unwrap();
        std::fs::write(cpu.join("kubepods/podabc/cpuacct.usage"), "123456789\n").unwrap();
        std::fs::write(mem.join("kubepods/podabc/memory.usage_in_bytes"), "10000\n").unwrap();
        std::fs::write(mem.join("kubepods/podabc/memory.stat"), V1_STAT).unwrap();
        let s = sample(&dirs(&layout, pod), true);
        assert_eq!(s.cpu_usage_ns, Some(123456789));
        assert_eq!(s.memory.unwrap().working_set, 8_500);
        assert_eq!(s.psi, PsiSet::default(), "v1 keeps no PSI per cgroup");
        assert!(sample(&dirs(&layout, "/kubepods/podgone"), true).is_empty());

        let v2 = Layout::V2(tmp.path().join("unified"));
        let d = tmp.path().join("unified/kubepods/podabc");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpu.stat"), "usage_usec 42\n").unwrap();
        std::fs::write(d.join("memory.current"), "4194304\n").unwrap();
        std::fs::write(d.join("memory.stat"), V2_STAT).unwrap();
        std::fs::write(d.join("memory.max"), "max\n").unwrap();
        std::fs::write(d.join("cpu.pressure"), CPU_PRESSURE).unwrap();
        std::fs::write(d.join("io.pressure"), "some garbage\n").unwrap();
        let s = sample(&dirs(&v2, pod), true);
        assert_eq!(s.cpu_usage_ns, Some(42_000));
        assert_eq!(s.memory.unwrap().limit, None);
        assert_eq!(s.psi.cpu.unwrap().full.total_us, 7_000);
        assert_eq!(s.psi.memory, None, "no file");
        assert_eq!(s.psi.io, None, "unreadable file");
        assert_eq!(sample(&dirs(&v2, pod), false).psi, PsiSet::default());
    }

    const CPU_PRESSURE: &str = "\
some avg10=1.50 avg60=0.25 avg300=0.00 total=123456
full avg10=0.10 avg60=0.00 avg300=0.00 total=7000
";

    #[test]
    fn pressure_files() {
        let p = pressure(CPU_PRESSURE).unwrap();
        assert_eq!(
            p.some,
            PsiLine {
                total_us: 123_456,
                avg10: 1.5,
                avg60: 0.25,
                avg300: 0.0
            }
        );
        assert_eq!(p.full.total_us, 7000);
        // A kernel before 5.13: cpu.pressure has no full line.
        let old = pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=9\n").unwrap();
        assert_eq!((old.some.total_us, old.full), (9, PsiLine::default()));
        for bad in [
            "",
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=1\n",
            "some avg10=0.00 avg60=0.00 total=1\n",
            "some avg10=x avg60=0.00 avg300=0.00 total=1\n",
            "some avg10=NaN avg60=0.00 avg300=0.00 total=1\n",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n",
            "some avg10 avg60=0.00 avg300=0.00 total=1\n",
        ] {
            assert_eq!(pressure(bad), None, "{bad:?}");
        }
    }
}
