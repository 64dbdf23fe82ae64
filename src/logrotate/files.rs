//! The files of one container log on disk: `<log>` (the runtime writes it), rotated
//! `<log>.<YYYYMMDD-hhmmss>` and compressed `<log>.<YYYYMMDD-hhmmss>.gz` ones, and the
//! `.tmp` leftovers of a compression that did not finish. Names and ordering are upstream's,
//! so log shippers and tools that read these folders see the same thing.
//!
//! Everything here is blocking file-system work, for the blocking pool.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// Suffix of a compressed rotated log.
pub const COMPRESS_SUFFIX: &str = ".gz";
/// Suffix of a compression in progress (or abandoned).
pub const TMP_SUFFIX: &str = ".tmp";
/// Upstream's rotation timestamp layout (Go's `20060102-150405`), in local time as Go's clock.
const TIMESTAMP: &str = "%Y%m%d-%H%M%S";

/// `<log>.<suffix>`: a sibling of `log` whose name extends it.
pub fn with_suffix(log: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(log.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// The name `log` gets when it is rotated at `now`.
pub fn rotated_path(log: &Path, now: &jiff::Zoned) -> PathBuf {
    with_suffix(log, &format!(".{}", now.strftime(TIMESTAMP)))
}

/// The `<log>.*` files next to `log`, oldest first (the timestamps sort by name, as
/// upstream's sorted glob does).
pub fn list_rotated(log: &Path) -> io::Result<Vec<PathBuf>> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let mut prefix = name.as_encoded_bytes().to_vec();
    prefix.push(b'.');
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().as_encoded_bytes().starts_with(&prefix) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// What to do with a log's rotated files before the log is rotated once more.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Leftovers of earlier rotations: `.tmp` files, and plain files whose `.gz` exists.
    pub unused: Vec<PathBuf>,
    /// The oldest rotated files, beyond what `max_files` leaves room for.
    pub excess: Vec<PathBuf>,
    /// The rotated files that stay, oldest first.
    pub kept: Vec<PathBuf>,
}

impl Plan {
    /// `rotated` sorted oldest first. After the rotation the current log and the one just
    /// rotated join the kept files, so `max_files - 2` of them may stay.
    pub fn new(rotated: &[PathBuf], max_files: usize) -> Plan {
        let mut plan = Plan::default();
        let mut in_use = Vec::new();
        for f in rotated {
            if is_in_use(f, rotated) {
                in_use.push(f.clone());
            } else {
                plan.unused.push(f.clone());
            }
        }
        let excess = in_use.len().saturating_sub(max_files.saturating_sub(2));
        plan.kept = in_use.split_off(excess);
        plan.excess = in_use;
        plan
    }

    /// The kept files still to compress. With the file rotated now left plain, the newest
    /// rotated file is always uncompressed, as upstream leaves it for shippers still reading.
    pub fn to_compress(&self) -> impl Iterator<Item = &PathBuf> {
        self.kept.iter().filter(|f| !ends_with(f, COMPRESS_SUFFIX))
    }
}

fn ends_with(p: &Path, suffix: &str) -> bool {
    p.as_os_str()
        .as_encoded_bytes()
        .ends_with(suffix.as_bytes())
}

fn is_in_use(f: &Path, all: &[PathBuf]) -> bool {
    if ends_with(f, TMP_SUFFIX) {
        return false;
    }
    if ends_with(f, COMPRESS_SUFFIX) {
        return true;
    }
    let compressed = with_suffix(f, COMPRESS_SUFFIX);
    !all.contains(&compressed)
}

/// Removes `f`; one already gone is fine (a shipper or an operator may have removed it).
pub fn remove(f: &Path) -> io::Result<()> {
    match std::fs::remove_file(f) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes a container's log with all its rotated files, as upstream's log manager cleans a
/// removed container; returns the first error after trying every file.
pub fn remove_with_rotated(log: &Path) -> io::Result<()> {
    let mut first = remove(log).err();
    let rotated = match list_rotated(log) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(first.unwrap_or(e)),
    };
    for f in rotated {
        if let Err(e) = remove(&f) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path, files: &[PathBuf]) -> Vec<String> {
        files
            .iter()
            .map(|f| f.strip_prefix(dir).unwrap().to_string_lossy().into_owned())
            .collect()
    }

    fn touch(dir: &Path, names: &[&str]) {
        for n in names {
            std::fs::write(dir.join(n), n).unwrap();
        }
    }

    #[test]
    fn rotated_names_carry_upstreams_timestamp() {
        let now: jiff::Zoned = "2026-11-05T03:04:09[UTC]".parse().unwrap();
        assert_eq!(
            rotated_path(Path::new("/var/log/pods/x/app/0.log"), &now),
            Path::new("/var/log/pods/x/app/0.log.20261105-030409")
        );
    }

    #[test]
    fn listing_finds_only_this_logs_rotated_files_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        touch(
            dir.path(),
            &[
                "0.log",
                "0.log.20260102-000000",
                "0.log.20260101-000000.gz",
                "0.log.20260103-000000.gz.tmp",
                "10.log",
                "10.log.20260101-000000",
                "0.logx",
            ],
        );
        let found = list_rotated(&dir.path().join("0.log")).unwrap();
        assert_eq!(
            names(dir.path(), &found),
            [
                "0.log.20260101-000000.gz",
                "0.log.20260102-000000",
                "0.log.20260103-000000.gz.tmp"
            ]
        );
    }

    #[test]
    fn plan_drops_leftovers_and_the_oldest_beyond_max_files() {
        let d = Path::new("/l");
        let files: Vec<PathBuf> = [
            "0.log.20260101-000000.gz",
            "0.log.20260102-000000.gz",
            "0.log.20260103-000000",
            "0.log.20260103-000000.gz",
            "0.log.20260104-000000",
            "0.log.20260104-000000.gz.tmp",
            "0.log.20260105-000000",
        ]
        .iter()
        .map(|n| d.join(n))
        .collect();
        let plan = Plan::new(&files, 5);
        assert_eq!(
            names(d, &plan.unused),
            ["0.log.20260103-000000", "0.log.20260104-000000.gz.tmp"]
        );
        assert_eq!(
            names(d, &plan.excess),
            ["0.log.20260101-000000.gz", "0.log.20260102-000000.gz"]
        );
        assert_eq!(
            names(d, &plan.kept),
            [
                "0.log.20260103-000000.gz",
                "0.log.20260104-000000",
                "0.log.20260105-000000"
            ]
        );
        let compress: Vec<PathBuf> = plan.to_compress().cloned().collect();
        assert_eq!(
            names(d, &compress),
            ["0.log.20260104-000000", "0.log.20260105-000000"]
        );
    }

    #[test]
    fn two_files_keep_no_rotated_file_before_rotating() {
        let d = Path::new("/l");
        let files = vec![d.join("0.log.20260101-000000")];
        let plan = Plan::new(&files, 2);
        assert_eq!(plan.excess, files);
        assert!(plan.kept.is_empty());
        assert!(Plan::new(&[], 5) == Plan::default());
    }

    #[test]
    fn removal_takes_the_rotated_files_along() {
        let dir = tempfile::tempdir().unwrap();
        touch(
            dir.path(),
            &[
                "0.log",
                "0.log.20260101-000000.gz",
                "0.log.20260102-000000",
                "1.log",
            ],
        );
        remove_with_rotated(&dir.path().join("0.log")).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["1.log"]);
        // Gone already, or never there: nothing to do.
        remove_with_rotated(&dir.path().join("0.log")).unwrap();
        remove_with_rotated(&dir.path().join("missing/0.log")).unwrap();
    }
}
