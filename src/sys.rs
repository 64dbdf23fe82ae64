//! The one module that calls libc directly. Everything else in the crate is safe code
//! (`unsafe_code` is denied in Cargo.toml); each wrapper here checks what the call needs and
//! returns owned Rust values.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A sysconf value, or `fallback` when the system does not say.
fn sysconf(name: libc::c_int, fallback: u64) -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let v = unsafe { libc::sysconf(name) };
    u64::try_from(v).ok().filter(|v| *v > 0).unwrap_or(fallback)
}

/// Clock ticks per second, the unit of /proc/stat and /proc/<pid>/stat times.
pub fn clock_ticks() -> u64 {
    sysconf(libc::_SC_CLK_TCK, 100)
}

pub fn page_size() -> u64 {
    sysconf(libc::_SC_PAGESIZE, 4096)
}

/// Logical processors online now.
pub fn online_cpus() -> Option<u64> {
    Some(sysconf(libc::_SC_NPROCESSORS_ONLN, 0)).filter(|n| *n > 0)
}

/// The machine's hostname, as the kernel has it.
pub fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for writes of its full length, and gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The kernel release (`uname -r`).
pub fn kernel_release() -> Option<String> {
    // SAFETY: utsname is plain old data, so all-zero is a valid value for uname to fill in.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer refers to a live, writable utsname.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    let bytes: Vec<u8> = uts
        .release
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// What statvfs(2) says of a filesystem, in bytes and inodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStats {
    pub capacity: u64,
    pub free: u64,
    /// Free to unprivileged users.
    pub available: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

pub fn statvfs(path: &Path) -> io::Result<FsStats> {
    let c = c_path(path)?;
    // SAFETY: an all-zero statvfs is a valid value; the call fills it from a NUL-terminated path.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `s` a writable statvfs.
    check(unsafe { libc::statvfs(c.as_ptr(), &mut s) })?;
    #[allow(clippy::unnecessary_cast)]
    let (blocks, bfree, bavail, frsize) = (
        s.f_blocks as u64,
        s.f_bfree as u64,
        s.f_bavail as u64,
        s.f_frsize as u64,
    );
    #[allow(clippy::unnecessary_cast)]
    Ok(FsStats {
        capacity: blocks.saturating_mul(frsize),
        free: bfree.saturating_mul(frsize),
        available: bavail.saturating_mul(frsize),
        inodes: s.f_files as u64,
        inodes_free: s.f_ffree as u64,
    })
}

/// The filesystem type (statfs(2)'s f_type magic) of the filesystem holding `path`.
pub fn fs_magic(path: &Path) -> Option<i64> {
    let c = c_path(path).ok()?;
    // SAFETY: statfs(2) writes into the zeroed struct we own; `c` is a valid C string.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut buf) };
    #[allow(clippy::unnecessary_cast)]
    (rc == 0).then_some(buf.f_type as i64)
}

/// The number of processes the kernel runs now (sysinfo(2)).
pub fn process_count() -> Option<i64> {
    // SAFETY: an all-zero sysinfo is valid; the call fills it in.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a writable sysinfo.
    (unsafe { libc::sysinfo(&mut info) } == 0).then(|| i64::from(info.procs))
}

/// The soft limit on this process's open files.
pub fn max_open_files() -> Option<u64> {
    // SAFETY: an all-zero rlimit is valid; getrlimit fills it.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a writable rlimit.
    #[allow(clippy::unnecessary_cast)]
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0).then_some(r.rlim_cur as u64)
}

/// Sends `signal` to `pid`.
pub fn kill(pid: i32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) with a plain pid and signal has no memory-safety requirements.
    check(unsafe { libc::kill(pid, signal) })
}

/// Mounts a fresh tmpfs on `target`, of `size_bytes` when given (else the kernel's default,
/// half the memory).
pub fn mount_tmpfs(target: &Path, size_bytes: Option<u64>) -> io::Result<()> {
    let target = c_path(target)?;
    let fstype = c_path(Path::new("tmpfs"))?;
    let options = size_bytes
        .map(|b| std::ffi::CString::new(format!("size={b}")))
        .transpose()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let data = options
        .as_ref()
        .map_or(std::ptr::null(), |o| o.as_ptr().cast::<libc::c_void>());
    // SAFETY: all pointers are valid NUL-terminated strings (or null data) for the duration
    // of the call.
    check(unsafe { libc::mount(fstype.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, data) })
}

/// Detaches the mount on `target` (umount2 with MNT_DETACH).
pub fn unmount_detach(target: &Path) -> io::Result<()> {
    let target = c_path(target)?;
    // SAFETY: target is a valid NUL-terminated path.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_constants_and_identity() {
        assert!(clock_ticks() > 0 && page_size() >= 4096);
        assert!(online_cpus().unwrap_or(0) >= 1);
        assert!(hostname().is_some_and(|h| !h.is_empty()));
        assert!(kernel_release().is_some_and(|r| !r.is_empty()));
        assert!(max_open_files().unwrap_or(0) > 0);
        assert!(process_count().unwrap_or(0) > 0);
    }

    #[test]
    fn filesystems() {
        let root = statvfs(Path::new("/")).unwrap();
        assert!(root.capacity > 0 && root.capacity >= root.free && root.free >= root.available);
        assert!(statvfs(Path::new("/no/such/path")).is_err());
        assert!(statvfs(Path::new("bad\0path")).is_err());
        // PROC_SUPER_MAGIC.
        assert_eq!(fs_magic(Path::new("/proc")), Some(0x9fa0));
    }

    #[test]
    fn signals_to_a_missing_process_fail_cleanly() {
        // Signal 0 checks existence; pid i32::MAX is beyond pid_max.
        assert!(kill(i32::MAX, 0).is_err());
        assert!(kill(std::process::id() as i32, 0).is_ok());
    }
}
