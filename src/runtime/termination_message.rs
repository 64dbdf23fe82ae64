//! The message an exited container leaves: its termination-message file, or the end of its
//! log.

use crate::cri::api;

/// Upstream caps the termination message at 4 KiB.
pub const MAX_TERMINATION_MESSAGE: u64 = 4096;

/// The termination message a container left in its mounted file, if any.
pub fn read_termination_message(status: &api::ContainerStatus, target: &str) -> Option<String> {
    use std::io::Read;
    let mount = status.mounts.iter().find(|m| m.container_path == target)?;
    let mut buf = Vec::new();
    std::fs::File::open(&mount.host_path)
        .ok()?
        .take(MAX_TERMINATION_MESSAGE)
        .read_to_end(&mut buf)
        .ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    (!text.is_empty()).then_some(text)
}

/// Upstream's fallback: the end of the container's log (at most 80 lines, 2 KiB), used as the
/// message when the container failed without writing one and asked for FallbackToLogsOnError.
pub fn message_from_log(log_path: &str) -> Option<String> {
    const MAX_BYTES: usize = 2048;
    const MAX_LINES: usize = 80;
    let text = std::fs::read_to_string(log_path).ok()?;
    let lines: Vec<&str> = text
        .lines()
        // CRI log lines: <time> <stream> <P|F> <content>
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect();
    let mut out = lines[lines.len().saturating_sub(MAX_LINES)..].join("\n");
    if out.len() > MAX_BYTES {
        let mut cut = out.len() - MAX_BYTES;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = out[cut..].to_string();
    }
    (!out.is_empty()).then_some(out)
}
