//! Node allocatable enforcement on the reserved cgroups: with `system-reserved` among the
//! enforcement keys the kubelet limits `systemReservedCgroup` to what is reserved (cpu as
//! shares or weight, memory as a limit) besides the pods' cgroup; a reserved cgroup that does
//! not exist stops the kubelet at start with upstream's message, as upstream does.

mod common;

use std::time::Duration;

use common::*;

const RESERVED: &str = "/krs-it-sysres";

/// Makes the reserved cgroup as an administrator (or systemd) would: the kubelet only limits it.
fn make_reserved_cgroup() -> Vec<std::path::PathBuf> {
    let dirs: Vec<_> = if cgroup_v2_host() {
        vec![cgroup::named("", RESERVED)]
    } else {
        vec![
            cgroup::named("cpu", RESERVED),
            cgroup::named("memory", RESERVED),
        ]
    };
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    }
    dirs
}

#[test]
fn system_reserved_cgroup_is_limited_or_refused() {
    let _serial = serial();
    let dirs = make_reserved_cgroup();
    let mut k = Kubelet::new("allocatable");
    let flags = |cgroup: &str| {
        vec![
            "--enforce-node-allocatable=pods,system-reserved".to_string(),
            "--system-reserved=cpu=100m,memory=100Mi".to_string(),
            format!("--system-reserved-cgroup={cgroup}"),
        ]
    };
    let args = flags(RESERVED);
    k.start_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let mem = if cgroup_v2_host() { &dirs[0] } else { &dirs[1] };
    assert_eq!(cgroup::memory_limit(mem), 100 << 20, "{}", mem.display());
    // 100m is 102 shares; upstream's conversion makes that weight 4 on v2.
    let (file, want) = if cgroup_v2_host() {
        ("cpu.weight", "4")
    } else {
        ("cpu.shares", "102")
    };
    let cpu = std::fs::read_to_string(dirs[0].join(file)).unwrap_or_default();
    assert_eq!(cpu.trim(), want, "{}", dirs[0].join(file).display());
    assert!(
        k.log().contains("Node allocatable limits applied") && k.log().contains(RESERVED),
        "{}",
        tail(&k.log(), 30)
    );
    k.stop();

    // A reserved cgroup that is not there: the kubelet says why and exits.
    let missing = "/krs-it-sysres-missing";
    let args = flags(missing);
    k.spawn_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let status = k.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| !s.success()),
        "{status:?}\n{}",
        tail(&k.log(), 30)
    );
    let want = format!(
        "Failed to enforce System Reserved Cgroup Limits on \"{missing}\": \"{missing}\" cgroup does not exist"
    );
    assert!(
        k.log().contains(&want.replace('"', "\\\"")) || k.log().contains(&want),
        "no {want:?} in\n{}",
        tail(&k.log(), 30)
    );
    assert!(
        !cgroup::named("memory", missing).exists(),
        "made, not refused"
    );

    k.start();
    k.cleanup();
    remove_reserved_cgroup(&dirs);
}

/// Its directory in every hierarchy: on v1 limiting it made it in the others too.
fn remove_reserved_cgroup(dirs: &[std::path::PathBuf]) {
    let mut all = dirs.to_vec();
    if !cgroup_v2_host() {
        let hierarchies = std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten();
        let leaf = RESERVED.trim_start_matches('/');
        all.extend(hierarchies.flatten().map(|h| h.path().join(leaf)));
    }
    for d in all {
        let _ = std::fs::remove_dir(&d);
    }
}
