//! Facts about the machine: processors, memory, huge pages, the size
//! of the filesystem holding the kubelet's root directory, and identity strings. Everything is
//! read from procfs/sysfs; a fact that cannot be read is left empty rather than failing the
//! whole status, as upstream does with cAdvisor's machine info.

use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HugePages {
    pub page_size_bytes: u64,
    pub pages: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineFacts {
    /// Online logical processors.
    pub num_cpus: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub hugepages: Vec<HugePages>,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    /// Size of the filesystem holding the kubelet root directory.
    pub root_fs_bytes: Option<u64>,
}

/// Where the facts live; tests point this at a temporary tree.
#[derive(Clone, Debug)]
pub struct FactSources {
    pub meminfo: PathBuf,
    pub hugepages_dir: PathBuf,
    pub machine_id: Vec<PathBuf>,
    pub product_uuid: PathBuf,
    pub boot_id: PathBuf,
    pub os_release: Vec<PathBuf>,
}

impl Default for FactSources {
    fn default() -> Self {
        Self {
            meminfo: "/proc/meminfo".into(),
            hugepages_dir: "/sys/kernel/mm/hugepages".into(),
            machine_id: vec!["/etc/machine-id".into(), "/var/lib/dbus/machine-id".into()],
            product_uuid: "/sys/class/dmi/id/product_uuid".into(),
            boot_id: "/proc/sys/kernel/random/boot_id".into(),
            os_release: vec!["/etc/os-release".into(), "/usr/lib/os-release".into()],
        }
    }
}

/// Reads every fact. Blocking (small file reads and one statvfs): run it off the runtime.
pub fn read_machine_facts(sources: &FactSources, root_dir: &Path) -> MachineFacts {
    let (memory_bytes, swap_bytes) = std::fs::read_to_string(&sources.meminfo)
        .map(|t| parse_meminfo(&t))
        .unwrap_or((None, None));
    MachineFacts {
        num_cpus: crate::sys::online_cpus(),
        memory_bytes,
        swap_bytes,
        hugepages: read_hugepages(&sources.hugepages_dir),
        machine_id: sources
            .machine_id
            .iter()
            .find_map(|p| read_trimmed(p).filter(|s| !s.is_empty()))
            .unwrap_or_default(),
        system_uuid: read_trimmed(&sources.product_uuid).unwrap_or_default(),
        boot_id: read_trimmed(&sources.boot_id).unwrap_or_default(),
        kernel_version: crate::sys::kernel_release().unwrap_or_default(),
        os_image: sources
            .os_release
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|t| parse_os_release(&t))
            .unwrap_or_else(|| "Linux".to_string()),
        root_fs_bytes: filesystem_size(root_dir),
    }
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// MemTotal and SwapTotal in bytes.
pub fn parse_meminfo(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .and_then(|kb| kb.checked_mul(1024))
    };
    (field("MemTotal:"), field("SwapTotal:"))
}

/// PRETTY_NAME, unquoted; "Linux" when the file has none (cAdvisor's default).
pub fn parse_os_release(text: &str) -> String {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "Linux".to_string())
}

/// One entry per `hugepages-<N>kB` directory, sorted by page size.
pub fn read_hugepages(dir: &Path) -> Vec<HugePages> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<HugePages> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            let kb: u64 = name
                .to_str()?
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let pages = read_trimmed(&e.path().join("nr_hugepages"))
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            Some(HugePages {
                page_size_bytes: kb.checked_mul(1024)?,
                pages,
            })
        })
        .collect();
    out.sort_by_key(|h| h.page_size_bytes);
    out
}

/// Total size in bytes of the filesystem holding `path`.
pub fn filesystem_size(path: &Path) -> Option<u64> {
    crate::sys::statvfs(path).ok().map(|s| s.capacity)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> tempfile::TempDir {
        match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("tempdir: {e}"),
        }
    }

    fn write(path: &Path, body: &str) {
        if let Some(parent) = path.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            panic!("mkdir {}: {e}", parent.display());
        }
        if let Err(e) = std::fs::write(path, body) {
            panic!("write {}: {e}", path.display());
        }
    }

    #[test]
    fn meminfo_fields_in_bytes() {
        let text = "MemTotal:       16283436 kB\nMemFree:  1 kB\nSwapTotal:       2097148 kB\n";
        assert_eq!(
            parse_meminfo(text),
            (Some(16_283_436 * 1024), Some(2_097_148 * 1024))
        );
        assert_eq!(parse_meminfo("garbage"), (None, None));
    }

    #[test]
    fn os_release_pretty_name() {
        let text = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(parse_os_release(text), "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(parse_os_release("NAME=x\n"), "Linux");
    }

    #[test]
    fn facts_from_a_fake_tree() {
        let d = tmp();
        let root = d.path();
        write(
            &root.join("meminfo"),
            "MemTotal: 1024 kB\nSwapTotal: 0 kB\n",
        );
        write(&root.join("hp/hugepages-1048576kB/nr_hugepages"), "2\n");
        write(&root.join("hp/hugepages-2048kB/nr_hugepages"), "0\n");
        write(&root.join("hp/not-hugepages/nr_hugepages"), "9\n");
        write(&root.join("machine-id"), "abc123\n");
        write(&root.join("boot_id"), "b-1\n");
        write(&root.join("os-release"), "PRETTY_NAME=Test OS\n");
        let sources = FactSources {
            meminfo: root.join("meminfo"),
            hugepages_dir: root.join("hp"),
            machine_id: vec![root.join("missing"), root.join("machine-id")],
            product_uuid: root.join("no-uuid"),
            boot_id: root.join("boot_id"),
            os_release: vec![root.join("os-release")],
        };
        let f = read_machine_facts(&sources, root);
        assert_eq!(f.memory_bytes, Some(1024 * 1024));
        assert_eq!(f.swap_bytes, Some(0));
        assert_eq!(
            f.hugepages,
            vec![
                HugePages {
                    page_size_bytes: 2048 * 1024,
                    pages: 0
                },
                HugePages {
                    page_size_bytes: 1 << 30,
                    pages: 2
                },
            ]
        );
        assert_eq!(f.machine_id, "abc123");
        assert_eq!(f.system_uuid, "", "unreadable product_uuid is empty");
        assert_eq!(f.boot_id, "b-1");
        assert_eq!(f.os_image, "Test OS");
        assert!(f.num_cpus.unwrap_or(0) >= 1);
        assert!(!f.kernel_version.is_empty());
        assert!(f.root_fs_bytes.unwrap_or(0) > 0);
    }
}
