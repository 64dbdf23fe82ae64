//! Compressing a rotated log to `<file>.gz`. The archive is written as `<file>.gz.tmp` and
//! renamed into place, so a reader never sees half an archive; the plain file goes only once
//! the archive is complete. A failed attempt leaves the plain file, and its `.tmp` is removed
//! (or, after a crash, cleaned up before the next rotation).
//!
//! Blocking: run on the blocking pool.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

use super::files::{COMPRESS_SUFFIX, TMP_SUFFIX, remove, with_suffix};

/// Compresses `log` to `<log>.gz` and removes `log`; returns the archive's path.
pub fn compress(log: &Path) -> io::Result<PathBuf> {
    let archive = with_suffix(log, COMPRESS_SUFFIX);
    let tmp = with_suffix(&archive, TMP_SUFFIX);
    let written = write_archive(log, &tmp).and_then(|()| std::fs::rename(&tmp, &archive));
    if let Err(e) = written {
        // Best effort: a leftover is removed before the next rotation anyway.
        let _ = remove(&tmp);
        return Err(e);
    }
    remove(log)?;
    Ok(archive)
}

fn write_archive(log: &Path, tmp: &Path) -> io::Result<()> {
    let mut src = File::open(log)?;
    // The archive is as readable as the log was, no more.
    let mode = src.metadata()?.permissions().mode() & 0o7777;
    let out = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(tmp)?;
    let mut gz = GzEncoder::new(BufWriter::new(out), Compression::default());
    io::copy(&mut src, &mut gz)?;
    gz.finish()?.flush()
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use flate2::read::GzDecoder;

    use super::*;

    #[test]
    fn archive_replaces_the_file_with_the_same_content_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log.20260101-000000");
        let body = "2026-01-01T00:00:00.000000000Z stdout F hello\n".repeat(1000);
        std::fs::write(&log, &body).unwrap();
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o640)).unwrap();

        let archive = compress(&log).unwrap();
        assert_eq!(archive, dir.path().join("0.log.20260101-000000.gz"));
        assert!(!log.exists());
        assert!(!with_suffix(&archive, TMP_SUFFIX).exists());
        let meta = std::fs::metadata(&archive).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o640);
        assert!(meta.len() < body.len() as u64 / 10);
        let mut back = String::new();
        GzDecoder::new(File::open(&archive).unwrap())
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, body);
    }

    #[test]
    fn a_missing_file_fails_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log.20260101-000000");
        assert!(compress(&log).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
