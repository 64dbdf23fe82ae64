//! What upstream's checkpoint files share: the FNV-1a (32 bit) hash its checksums are taken
//! with, and a write that leaves the old file or the new one whole after a crash.

use std::io::Write;
use std::path::Path;

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
