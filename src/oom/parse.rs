//! Pure parsing of the kernel log: /dev/kmsg records into messages, and the messages of one
//! OOM kill into an [`OomKill`]. No I/O here, so every format is tested with real lines.
//!
//! One OOM kill spans many records: it opens with "<comm> invoked oom-killer: ...", goes on
//! with a stack, memory counters and a task table (one line per task in scope, which can be
//! thousands of lines on a global OOM), and ends with the kill itself. Kernels since 5.0 print
//! a one-line summary "oom-kill:constraint=...,oom_memcg=<cgroup>,task_memcg=<cgroup>,
//! task=<comm>,pid=<pid>,uid=<uid>" (",global_oom" in place of oom_memcg when no memory
//! cgroup limit was the cause), then "... Killed process <pid> (<comm>) ...". Older kernels
//! print "Task in <task cgroup> killed as a result of limit of <oom cgroup>" before the
//! "Killed process" line. Like upstream's parser, a kill is complete at the summary line or,
//! without one, at the "Killed process" line; only one kill is in progress at a time, so a
//! new "invoked oom-killer" line simply starts over and memory stays bounded.

/// One process the kernel's OOM killer killed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OomKill {
    pub pid: u32,
    /// The victim's command name (at most 15 bytes, as the kernel keeps it).
    pub comm: String,
    /// The memory cgroup whose limit was hit; None for a node-level (global) OOM.
    pub oom_memcg: Option<String>,
    /// The victim's own memory cgroup, when the kernel names it.
    pub task_memcg: Option<String>,
}

impl OomKill {
    /// A node-level OOM: no memory cgroup limit caused it (upstream: the OOM's cgroup is "/").
    pub fn is_system_oom(&self) -> bool {
        self.oom_memcg.as_deref().is_none_or(|m| m == "/")
    }

    /// The container whose process was killed, from the victim's cgroup.
    pub fn container_id(&self) -> Option<&str> {
        self.task_memcg
            .as_deref()
            .and_then(container_id_from_cgroup)
    }
}

/// The message text of one /dev/kmsg record: "<prio>,<seq>,<usec>,<flags>[,...];<text>\n"
/// followed by optional " KEY=value" dictionary lines, which carry nothing we need.
pub fn record_message(record: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(record).ok()?;
    let (_header, rest) = text.split_once(';')?;
    Some(rest.split('\n').next().unwrap_or_default())
}

/// Assembles OOM kills from consecutive kernel log messages.
#[derive(Debug, Default)]
pub struct OomParser {
    current: Option<OomKill>,
}

impl OomParser {
    /// Feeds one message; returns the kill it completes, if any.
    pub fn push(&mut self, message: &str) -> Option<OomKill> {
        if message.contains("invoked oom-killer:") {
            self.current = Some(OomKill::default());
            return None;
        }
        let kill = self.current.as_mut()?;
        if let Some(summary) = message.strip_prefix("oom-kill:") {
            if parse_summary(summary, kill) {
                return self.current.take();
            }
        } else if let Some((task, oom)) = legacy_cgroups(message) {
            kill.task_memcg = Some(task);
            kill.oom_memcg = Some(oom);
        } else if let Some((pid, comm)) = killed_process(message) {
            kill.pid = pid;
            kill.comm = comm.to_string();
            return self.current.take();
        }
        None
    }
}

/// Fills `kill` from the text after "oom-kill:"; false when the pid is missing, so the
/// "Killed process" line still gets its chance. Cgroup paths and task names may contain
/// commas, so each value runs up to the next known key rather than to the next comma.
fn parse_summary(summary: &str, kill: &mut OomKill) -> bool {
    let between = |start: &str, end: &str| -> Option<&str> {
        let from = summary.find(start)? + start.len();
        let len = summary[from..].find(end)?;
        Some(&summary[from..from + len])
    };
    kill.oom_memcg = between(",oom_memcg=", ",task_memcg=").map(str::to_string);
    kill.task_memcg = between(",task_memcg=", ",task=").map(str::to_string);
    // The task name sits between ",task=" and the last ",pid=": a name may hold ",pid=" too.
    let Some(task_at) = summary.find(",task=").map(|i| i + ",task=".len()) else {
        return false;
    };
    let Some(pid_at) = summary.rfind(",pid=").filter(|&i| i >= task_at) else {
        return false;
    };
    let pid_text = &summary[pid_at + ",pid=".len()..];
    let pid_text = pid_text.split(',').next().unwrap_or_default();
    let Ok(pid) = pid_text.parse() else {
        return false;
    };
    kill.pid = pid;
    kill.comm = summary[task_at..pid_at].to_string();
    true
}

/// "Task in <task cgroup> killed as a result of limit of <oom cgroup>" (kernels before 5.0).
fn legacy_cgroups(message: &str) -> Option<(String, String)> {
    let rest = &message[message.find("Task in ")? + "Task in ".len()..];
    let (task, oom) = rest.split_once(" killed as a result of limit of ")?;
    Some((absolute(task), absolute(oom.trim_end())))
}

fn absolute(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

/// The longest command name the kernel keeps (TASK_COMM_LEN less its NUL).
const COMM_MAX: usize = 15;

/// "... Killed process <pid> (<comm>) ...": the pid and the name in parentheses.
fn killed_process(message: &str) -> Option<(u32, &str)> {
    let rest = &message[message.find("Killed process ")? + "Killed process ".len()..];
    let (pid, rest) = rest.split_once(' ')?;
    let pid = pid.trim_end_matches(',').parse().ok()?;
    let rest = rest.strip_prefix('(')?;
    // The name may itself hold ") ", but the kernel keeps at most 15 bytes of it: the last
    // ") " within that reach closes it, or a parenthesis that ends the line.
    let end = rest
        .match_indices(") ")
        .map(|(i, _)| i)
        .take_while(|&i| i <= COMM_MAX)
        .last()
        .or_else(|| rest.strip_suffix(')').map(str::len))?;
    Some((pid, &rest[..end]))
}

/// The container ID in a cgroup path: a 64-hex-digit last name, bare (cgroupfs driver) or as
/// "<runtime>-<id>.scope" (systemd driver). A container that made cgroups of its own puts the
/// victim below its cgroup, so the nearest matching ancestor counts.
pub fn container_id_from_cgroup(path: &str) -> Option<&str> {
    path.rsplit('/').find_map(|name| {
        let name = name.strip_suffix(".scope").unwrap_or(name);
        let id = name.rsplit('-').next().unwrap_or(name);
        (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
    })
}

/// Upstream's SystemOOM event message for a node-level OOM kill.
pub fn system_oom_message(kill: &OomKill) -> String {
    let mut message = String::from("System OOM encountered");
    if !kill.comm.is_empty() && kill.pid != 0 {
        message.push_str(&format!(
            ", victim process: {}, pid: {}",
            kill.comm, kill.pid
        ));
    }
    message
}

#[cfg(test)]
mod tests;
