//! exec probes: the command through the CRI's ExecSync, with the probe's timeout. Exit code 0
//! is success; anything else, a timeout or an error is failure.

use std::time::Duration;

use super::{Outcome, cap_output};
use crate::cri::RuntimeClient;

pub async fn run(
    cri: &RuntimeClient,
    container_id: &str,
    cmd: Vec<String>,
    timeout: Duration,
) -> (Outcome, String) {
    let shown = format!("{cmd:?}");
    match cri.exec_sync(container_id, cmd, timeout).await {
        Ok(resp) => {
            let mut out = resp.stdout;
            out.extend_from_slice(&resp.stderr);
            let output = cap_output(&out);
            if resp.exit_code == 0 {
                (Outcome::Success, output)
            } else if output.is_empty() {
                (
                    Outcome::Failure,
                    format!("command {shown} exited with {}", resp.exit_code),
                )
            } else {
                (Outcome::Failure, output)
            }
        }
        Err(e) if e.is_timeout() => (
            Outcome::Failure,
            format!(
                "command {shown} timed out after {}",
                crate::config::GoDuration(timeout)
            ),
        ),
        Err(e) => (Outcome::Failure, e.to_string()),
    }
}
