//! The few system calls the crate makes that std does not offer, through rustix: each wrapper
//! returns owned Rust values, and the crate has no `unsafe` of its own.

use std::io;
use std::path::Path;

use rustix::mount::{MountFlags, UnmountFlags};
use rustix::process::{Pid, Resource, Signal};

/// Clock ticks per second, the unit of /proc/stat and /proc/<pid>/stat times.
pub fn clock_ticks() -> u64 {
    Some(rustix::param::clock_ticks_per_second())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

pub fn page_size() -> u64 {
    u64::try_from(rustix::param::page_size())
        .ok()
        .filter(|p| *p > 0)
        .unwrap_or(4096)
}

/// Logical processors online now, as the kernel lists them (what glibc's
/// `sysconf(_SC_NPROCESSORS_ONLN)` reads).
pub fn online_cpus() -> Option<u64> {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    Some(count_cpu_list(list.trim())?).filter(|n| *n > 0)
}

/// The number of CPUs in a kernel CPU list such as `0-3,8,10-11`.
fn count_cpu_list(list: &str) -> Option<u64> {
    let mut count = 0u64;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        count += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<u64>().ok()?;
                1
            }
        };
    }
    Some(count)
}

/// The machine's hostname, as the kernel has it.
pub fn hostname() -> Option<String> {
    let uts = rustix::system::uname();
    Some(uts.nodename().to_string_lossy().into_owned())
}

/// The kernel release (`uname -r`).
pub fn kernel_release() -> Option<String> {
    let uts = rustix::system::uname();
    Some(uts.release().to_string_lossy().into_owned())
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
    let s = rustix::fs::statvfs(path)?;
    Ok(FsStats {
        capacity: s.f_blocks.saturating_mul(s.f_frsize),
        free: s.f_bfree.saturating_mul(s.f_frsize),
        available: s.f_bavail.saturating_mul(s.f_frsize),
        inodes: s.f_files,
        inodes_free: s.f_ffree,
    })
}

/// The filesystem type (statfs(2)'s f_type magic) of the filesystem holding `path`.
pub fn fs_magic(path: &Path) -> Option<i64> {
    let s = rustix::fs::statfs(path).ok()?;
    #[allow(clippy::unnecessary_cast)]
    Some(s.f_type as i64)
}

/// The number of processes the kernel runs now (sysinfo(2)).
pub fn process_count() -> Option<i64> {
    Some(i64::from(rustix::system::sysinfo().procs))
}

/// The soft limit on this process's open files (`u64::MAX` when unlimited).
pub fn max_open_files() -> Option<u64> {
    Some(
        rustix::process::getrlimit(Resource::Nofile)
            .current
            .unwrap_or(u64::MAX),
    )
}

/// Sends `signal` to `pid`; signal 0 only checks that the process exists.
pub fn kill(pid: i32, signal: i32) -> io::Result<()> {
    let invalid = || io::Error::from(rustix::io::Errno::INVAL);
    let pid = Pid::from_raw(pid).ok_or_else(invalid)?;
    if signal == 0 {
        return Ok(rustix::process::test_kill_process(pid)?);
    }
    let signal = Signal::from_named_raw(signal).ok_or_else(invalid)?;
    Ok(rustix::process::kill_process(pid, signal)?)
}

/// A file in memory only (memfd), closed on exec: a child's output can be written to it
/// without a pipe that a process it leaves behind could hold open.
pub fn memory_file(name: &str) -> io::Result<std::fs::File> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?;
    Ok(std::fs::File::from(fd))
}

/// Kills every process of the process group `group` (SIGKILL).
pub fn kill_group(group: u32) -> io::Result<()> {
    let invalid = || io::Error::from(rustix::io::Errno::INVAL);
    let group = i32::try_from(group).map_err(|_| invalid())?;
    let group = Pid::from_raw(group).ok_or_else(invalid)?;
    Ok(rustix::process::kill_process_group(group, Signal::KILL)?)
}

/// Mounts a fresh tmpfs on `target`, of `size_bytes` when given (else the kernel's default,
/// half the memory).
pub fn mount_tmpfs(target: &Path, size_bytes: Option<u64>) -> io::Result<()> {
    let options = size_bytes
        .map(|b| std::ffi::CString::new(format!("size={b}")))
        .transpose()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    Ok(rustix::mount::mount(
        "tmpfs",
        target,
        "tmpfs",
        MountFlags::empty(),
        options.as_deref(),
    )?)
}

/// Bind-mounts `source` on `target`, read-only when asked (a bind mount takes the read-only
/// flag only on a remount).
pub fn bind_mount(source: &Path, target: &Path, read_only: bool) -> io::Result<()> {
    rustix::mount::mount_bind(source, target)?;
    if read_only {
        let flags = MountFlags::BIND | MountFlags::RDONLY;
        if let Err(e) = rustix::mount::mount_remount(target, flags, "") {
            let _ = rustix::mount::unmount(target, UnmountFlags::DETACH);
            return Err(e.into());
        }
    }
    Ok(())
}

/// Detaches the mount on `target` (umount2 with MNT_DETACH).
pub fn unmount_detach(target: &Path) -> io::Result<()> {
    Ok(rustix::mount::unmount(target, UnmountFlags::DETACH)?)
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
    fn cpu_lists() {
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list(""), Some(0));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
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
