//! NFS volumes (`volumes[].nfs` and nfs PersistentVolumes), mounted as upstream's nfs plugin
//! mounts them: `mount -t nfs [-o options] server:path` at
//! `<pod>/volumes/kubernetes.io~nfs/<name>` through the node's helper (mount.nfs, from
//! nfs-common). A failure reads as upstream's mounter words it, with the command's output,
//! which on a node without the helper names the missing `mount.<type>` program; nothing of a
//! failed mount stays.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::empty_dir::is_mount_point;

/// The plugin's folder under `<pod>/volumes/`, upstream's name.
pub const NFS: &str = "kubernetes.io~nfs";

/// A mount that does not answer (an unreachable server) is given up after this; the next
/// sync tries again.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NfsMount {
    pub server: String,
    pub path: String,
    pub read_only: bool,
    /// The PersistentVolume's mountOptions.
    pub options: Vec<String>,
}

/// `mount`'s arguments, in upstream's order.
fn mount_args(m: &NfsMount, dir: &Path) -> Vec<String> {
    let mut options = m.options.clone();
    if m.read_only {
        options.push("ro".to_string());
    }
    let mut args = vec!["-t".to_string(), "nfs".to_string()];
    if !options.is_empty() {
        args.push("-o".to_string());
        args.push(options.join(","));
    }
    args.push(format!("{}:{}", m.server, m.path));
    args.push(dir.to_string_lossy().into_owned());
    args
}

/// Mounts `m` at `dir` unless it is mounted there already.
pub fn set_up(dir: &Path, m: &NfsMount) -> Result<(), String> {
    if is_mount_point(dir) {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let args = mount_args(m, dir);
    if let Err(failure) = run("mount", &args, MOUNT_TIMEOUT) {
        if is_mount_point(dir) {
            let _ = crate::sys::unmount_detach(dir);
        }
        let _ = std::fs::remove_dir(dir);
        return Err(format!(
            "mount failed: {}\nMounting command: mount\nMounting arguments: {}\nOutput: {}",
            failure.status,
            args.join(" "),
            failure.output
        ));
    }
    Ok(())
}

struct Failed {
    /// As Go's exec error reads ("exit status 32").
    status: String,
    output: String,
}

/// Runs `program` with `args`, its output combined, within `timeout`: after it, the program
/// and whatever it started are killed (its own process group). The output goes to a file in
/// memory, not a pipe, so a process the program leaves behind cannot hold the read open.
fn run(program: &str, args: &[String], timeout: Duration) -> Result<(), Failed> {
    use std::os::unix::process::CommandExt;
    let failed = |e: std::io::Error| Failed {
        status: e.to_string(),
        output: String::new(),
    };
    let mut out = crate::sys::memory_file("mount-output").map_err(failed)?;
    let mut child = Command::new(program)
        .args(args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(failed)?)
        .stderr(out.try_clone().map_err(failed)?)
        .spawn()
        .map_err(failed)?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) | Err(_) => {
                let _ = crate::sys::kill_group(child.id());
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failed {
                    status: format!("timed out after {timeout:?}"),
                    output: String::new(),
                });
            }
        }
    };
    if status.success() {
        return Ok(());
    }
    // Bounded: a helper's complaint is a line or two.
    let mut raw = Vec::new();
    let _ = out.seek(SeekFrom::Start(0));
    let _ = out.take(64 * 1024).read_to_end(&mut raw);
    Err(Failed {
        status: status
            .code()
            .map_or_else(|| format!("{status}"), |c| format!("exit status {c}")),
        output: String::from_utf8_lossy(&raw).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_in_upstreams_order() {
        let m = NfsMount {
            server: "10.0.0.5".into(),
            path: "/exports/a".into(),
            read_only: true,
            options: vec!["nfsvers=4.1".into()],
        };
        assert_eq!(
            mount_args(&m, Path::new("/v/kubernetes.io~nfs/data")).join(" "),
            "-t nfs -o nfsvers=4.1,ro 10.0.0.5:/exports/a /v/kubernetes.io~nfs/data"
        );
        let plain = NfsMount {
            read_only: false,
            options: vec![],
            ..m
        };
        assert_eq!(
            mount_args(&plain, Path::new("/d")).join(" "),
            "-t nfs 10.0.0.5:/exports/a /d"
        );
    }

    #[test]
    fn a_failed_command_reads_as_go_words_it() {
        let args = ["-c".to_string(), "echo no helper >&2; exit 32".to_string()];
        let f = run("sh", &args, Duration::from_secs(10)).unwrap_err();
        assert_eq!(f.status, "exit status 32");
        assert_eq!(f.output, "no helper\n");
        let slow = ["-c".to_string(), "sleep 5".to_string()];
        let f = run("sh", &slow, Duration::from_millis(100)).unwrap_err();
        assert!(f.status.starts_with("timed out"), "{}", f.status);
        assert!(run("true", &[], Duration::from_secs(10)).is_ok());
    }
}
