//! What upstream's checkpoint files share: the FNV-1a (32 bit) hash its checksums are taken
//! with, a read where a missing file is no error, and a write that leaves the old file or the
//! new one whole after a crash.

use std::io::Write;
use std::path::{Path, PathBuf};

/// What can go wrong with a checkpoint file of the CPU or memory manager.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("checkpoint is corrupted")]
    Corrupt,
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// FNV-1a (32 bit) offset basis: the hash of nothing.
pub const FNV_OFFSET: u32 = 0x811c_9dc5;

/// Goes on hashing `bytes` from `hash` (start from [`FNV_OFFSET`]).
pub fn fnv1a(mut hash: u32, bytes: &[u8]) -> u32 {
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// The file's bytes; None when there is no file (a first start).
pub fn read_if_present(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A JSON checkpoint read back and checked against its checksum (`sums` gives the stored one
/// and the one its content has); None when there is no file. A stored 0 is accepted, as
/// upstream does for files of its old backend.
pub fn read_checked<T: serde::de::DeserializeOwned>(
    path: &Path,
    sums: impl Fn(&T) -> (u64, u64),
) -> Result<Option<T>, CheckpointError> {
    let read = read_if_present(path).map_err(|source| CheckpointError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let Some(text) = read else {
        return Ok(None);
    };
    let cp: T = serde_json::from_slice(&text).map_err(|source| CheckpointError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let (stored, computed) = sums(&cp);
    if stored != 0 && stored != computed {
        return Err(CheckpointError::Corrupt);
    }
    Ok(Some(cp))
}

/// Writes a JSON checkpoint through [`replace_synced`].
pub fn write_json<T: serde::Serialize>(path: &Path, cp: &T) -> Result<(), CheckpointError> {
    let err = |source| CheckpointError::Write {
        path: path.to_path_buf(),
        source,
    };
    let body = serde_json::to_vec(cp).map_err(|e| err(std::io::Error::other(e)))?;
    replace_synced(path, &body).map_err(err)
}

/// Writes `body` beside `path`, syncs it and renames it over `path`.
pub fn replace_synced(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(body)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    #[test]
    fn fnv1a_is_the_published_function() {
        assert_eq!(super::fnv1a(super::FNV_OFFSET, b""), 0x811c_9dc5);
        assert_eq!(super::fnv1a(super::FNV_OFFSET, b"a"), 0xe40c_292c);
        let split = super::fnv1a(super::fnv1a(super::FNV_OFFSET, b"fo"), b"o");
        assert_eq!(split, super::fnv1a(super::FNV_OFFSET, b"foo"));
    }
}
