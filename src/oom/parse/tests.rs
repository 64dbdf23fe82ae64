use super::*;

/// /dev/kmsg records of a container OOM kill on this test bed (kernel 6.18, cgroup v1, a
/// busybox hog limited to 32Mi whose pod cgroup hit its limit), trimmed of most of the stack
/// and memory statistics lines.
const MEMCG_OOM_6_18: &str = include_str!("../testdata/memcg_oom_6.18.kmsg");

const CONTAINER: &str = "41519d73d7f2c6304496ff6877812b746c555719f98186e5ccd6836bec6ab84a";
const POD_CGROUP: &str = "/krs-it/kubepods/burstable/pod18b862da9c0df8b733c0aa67cc503b75";

fn feed(parser: &mut OomParser, messages: &[&str]) -> Vec<OomKill> {
    messages.iter().filter_map(|m| parser.push(m)).collect()
}

fn kmsg_messages(records: &str) -> Vec<&str> {
    records
        .lines()
        .map(|l| record_message(l.as_bytes()).expect("a kmsg record"))
        .collect()
}

#[test]
fn record_message_strips_header_and_dictionary() {
    let rec = b"3,16270,26178954909,-;Memory cgroup out of memory: Killed process 9469 (sh)\n SUBSYSTEM=x\n DEVICE=y\n";
    assert_eq!(
        record_message(rec),
        Some("Memory cgroup out of memory: Killed process 9469 (sh)")
    );
    assert_eq!(record_message(b"no header here"), None);
    assert_eq!(record_message(&[0xff, b';', b'a']), None);
}

#[test]
fn container_oom_on_this_kernel() {
    let mut parser = OomParser::default();
    let kills = feed(&mut parser, &kmsg_messages(MEMCG_OOM_6_18));
    assert_eq!(
        kills,
        vec![OomKill {
            pid: 9469,
            comm: "sh".into(),
            oom_memcg: Some(POD_CGROUP.into()),
            task_memcg: Some(format!("{POD_CGROUP}/{CONTAINER}")),
        }]
    );
    // The pod cgroup hit its limit, but the victim ran in the container's cgroup.
    assert_eq!(kills[0].container_id(), Some(CONTAINER));
    assert!(!kills[0].is_system_oom());
}

#[test]
fn the_killed_process_line_after_the_summary_is_not_a_second_kill() {
    let mut parser = OomParser::default();
    let mut messages = kmsg_messages(MEMCG_OOM_6_18);
    messages.push("oom_reaper: reaped process 9469 (sh), now anon-rss:0kB, file-rss:0kB");
    assert_eq!(feed(&mut parser, &messages).len(), 1);
}

#[test]
fn two_kills_in_a_row() {
    let mut parser = OomParser::default();
    let mut messages = kmsg_messages(MEMCG_OOM_6_18);
    messages.extend(kmsg_messages(MEMCG_OOM_6_18));
    assert_eq!(feed(&mut parser, &messages).len(), 2);
}

#[test]
fn lines_outside_an_oom_are_ignored() {
    let mut parser = OomParser::default();
    let messages = [
        "krs62: port 1(vetha2b303a2) entered forwarding state",
        "Killed process 1 (init) total-vm:1kB",
        "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=x,pid=2,uid=0",
    ];
    assert!(feed(&mut parser, &messages).is_empty());
}

/// A node-level OOM, in the format of mm/oom_kill.c since 5.0 (",global_oom" where a memcg
/// OOM names its cgroup); it cannot be provoked safely on a shared test machine.
#[test]
fn global_oom_is_a_system_oom() {
    let mut parser = OomParser::default();
    let kills = feed(
        &mut parser,
        &[
            "stress invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
            "Mem-Info:",
            "Tasks state (memory values in pages):",
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice/user-0.slice/session-1.scope,task=stress,pid=4242,uid=0",
            "Out of memory: Killed process 4242 (stress) total-vm:8000000kB, anon-rss:7900000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:15000kB oom_score_adj:0",
        ],
    );
    assert_eq!(kills.len(), 1);
    let kill = &kills[0];
    assert!(kill.is_system_oom());
    assert_eq!((kill.pid, kill.comm.as_str()), (4242, "stress"));
    assert_eq!(kill.container_id(), None);
    assert_eq!(
        system_oom_message(kill),
        "System OOM encountered, victim process: stress, pid: 4242"
    );
}

/// A global OOM that kills a container's process still names the container: its status says
/// OOMKilled, and the node gets SystemOOM.
#[test]
fn global_oom_of_a_container_process_names_the_container() {
    let mut parser = OomParser::default();
    let summary = format!(
        "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset={CONTAINER},mems_allowed=0,global_oom,task_memcg={POD_CGROUP}/{CONTAINER},task=java,pid=77,uid=1000"
    );
    let kills = feed(
        &mut parser,
        &[
            "java invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=1000",
            &summary,
        ],
    );
    assert!(kills[0].is_system_oom());
    assert_eq!(kills[0].container_id(), Some(CONTAINER));
}

/// Kernels before 5.0: the cgroups in a "Task in" line, the victim in "Killed process".
#[test]
fn legacy_memcg_format() {
    let mut parser = OomParser::default();
    let kills = feed(
        &mut parser,
        &[
            "sh invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=999",
            "Task in /kubepods/burstable/pod1/abc killed as a result of limit of /kubepods/burstable/pod1",
            "memory: usage 32768kB, limit 32768kB, failcnt 53",
            "Memory cgroup out of memory: Kill process 31 (sh) score 1999 or sacrifice child",
            "Killed process 31 (sh) total-vm:51428kB, anon-rss:32136kB, file-rss:624kB",
        ],
    );
    assert_eq!(
        kills,
        vec![OomKill {
            pid: 31,
            comm: "sh".into(),
            oom_memcg: Some("/kubepods/burstable/pod1".into()),
            task_memcg: Some("/kubepods/burstable/pod1/abc".into()),
        }]
    );
    assert!(!kills[0].is_system_oom());
}

#[test]
fn legacy_global_format_is_a_system_oom() {
    let mut parser = OomParser::default();
    let kills = feed(
        &mut parser,
        &[
            "stress invoked oom-killer: gfp_mask=0x24280ca, order=0, oom_score_adj=0",
            "Out of memory: Kill process 99 (stress) score 900 or sacrifice child",
            "Killed process 99 (stress) total-vm:8000000kB, anon-rss:7900000kB, file-rss:0kB",
        ],
    );
    assert!(kills[0].is_system_oom());
    assert_eq!((kills[0].pid, kills[0].comm.as_str()), (99, "stress"));
}

#[test]
fn names_with_commas_and_parentheses() {
    let mut parser = OomParser::default();
    let summary = "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=/a,b,task_memcg=/a,b/c,task=we,ird,pid=1,pid=5,uid=0";
    let kill = feed(&mut parser, &["x invoked oom-killer: order=0", summary]);
    assert_eq!(
        kill[0],
        OomKill {
            pid: 5,
            comm: "we,ird,pid=1".into(),
            oom_memcg: Some("/a,b".into()),
            task_memcg: Some("/a,b/c".into()),
        }
    );
    assert_eq!(
        killed_process("Killed process 7 (a) b) total-vm:1kB"),
        Some((7, "a) b"))
    );
    assert_eq!(killed_process("Killed process 7 (tail)"), Some((7, "tail")));
    assert_eq!(killed_process("Killed process x (tail)"), None);
}

#[test]
fn a_summary_without_pid_waits_for_the_killed_process_line() {
    let mut parser = OomParser::default();
    let kills = feed(
        &mut parser,
        &[
            "x invoked oom-killer: order=0",
            "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/p,task_memcg=/p/c,task=x,pid=?,uid=0",
            "Memory cgroup out of memory: Killed process 12 (x) total-vm:1kB",
        ],
    );
    assert_eq!(kills.len(), 1);
    assert_eq!(kills[0].pid, 12);
    assert_eq!(kills[0].oom_memcg.as_deref(), Some("/p"));
}

#[test]
fn container_ids_from_cgroup_paths() {
    let cgroupfs = format!("{POD_CGROUP}/{CONTAINER}");
    assert_eq!(container_id_from_cgroup(&cgroupfs), Some(CONTAINER));
    let systemd = format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod18b862da_9c0d_f8b7.slice/cri-containerd-{CONTAINER}.scope"
    );
    assert_eq!(container_id_from_cgroup(&systemd), Some(CONTAINER));
    let crio = format!("/kubepods.slice/crio-{CONTAINER}.scope");
    assert_eq!(container_id_from_cgroup(&crio), Some(CONTAINER));
    // A cgroup the container made for itself.
    let nested = format!("{cgroupfs}/worker");
    assert_eq!(container_id_from_cgroup(&nested), Some(CONTAINER));
    assert_eq!(container_id_from_cgroup(POD_CGROUP), None);
    assert_eq!(container_id_from_cgroup("/"), None);
    assert_eq!(container_id_from_cgroup(&CONTAINER[1..]), None);
}

#[test]
fn system_oom_message_without_victim() {
    assert_eq!(
        system_oom_message(&OomKill::default()),
        "System OOM encountered"
    );
}
