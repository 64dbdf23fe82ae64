use std::time::Duration;

use super::*;
use crate::stats::cgroup::{MemorySample, Pressure, PsiLine, PsiSet};

const SEC: i64 = 1_000_000_000;

fn at(s: u64) -> Option<SystemTime> {
    Some(UNIX_EPOCH + Duration::from_secs(s))
}

fn u(v: u64) -> Option<api::UInt64Value> {
    Some(api::UInt64Value { value: v })
}

fn view() -> RuntimeView {
    let sandbox = api::PodSandbox {
        id: "sb1".into(),
        metadata: Some(api::PodSandboxMetadata {
            name: "web".into(),
            uid: "uid1".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        state: api::PodSandboxState::SandboxReady as i32,
        created_at: 1_000 * SEC,
        ..Default::default()
    };
    let container = api::Container {
        id: "c1".into(),
        pod_sandbox_id: "sb1".into(),
        metadata: Some(api::ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: "sha256:abc".into(),
            ..Default::default()
        }),
        state: api::ContainerState::ContainerRunning as i32,
        created_at: 1_001 * SEC,
        ..Default::default()
    };
    let stats = api::ContainerStats {
        attributes: Some(api::ContainerAttributes {
            id: "c1".into(),
            ..Default::default()
        }),
        cpu: Some(api::CpuUsage {
            timestamp: 2_000 * SEC,
            usage_core_nano_seconds: u(5 * SEC as u64),
            // containerd's own rate, over whatever window its last caller left.
            usage_nano_cores: u(42),
            ..Default::default()
        }),
        memory: Some(api::MemoryUsage {
            timestamp: 2_000 * SEC,
            working_set_bytes: u(4096),
            available_bytes: u(0),
            ..Default::default()
        }),
        writable_layer: Some(api::FilesystemUsage {
            timestamp: 2_000 * SEC,
            fs_id: Some(api::FilesystemIdentifier {
                mountpoint: "/var/lib/containerd/snap".into(),
            }),
            used_bytes: u(100),
            inodes_used: u(3),
        }),
        ..Default::default()
    };
    RuntimeView {
        sandboxes: vec![sandbox],
        containers: vec![container],
        stats: HashMap::from([("c1".to_string(), stats)]),
        sandbox_stats: HashMap::new(),
    }
}

fn mem(usage: u64, ws: u64) -> MemorySample {
    MemorySample {
        usage,
        working_set: ws,
        rss: 10,
        page_faults: 20,
        major_page_faults: 1,
        limit: None,
    }
}

fn local() -> LocalSample {
    LocalSample {
        at: at(2_000),
        boot_time: at(10),
        node_cpu_ns: Some(100 * SEC as u64),
        node_memory: Some(MemorySample {
            limit: Some(1 << 30),
            ..mem(1 << 29, 1 << 28)
        }),
        node_psi: PsiSet::default(),
        node_swap: Some((0, 0)),
        node_interfaces: vec![InterfaceStats {
            name: "eth0".into(),
            rx_bytes: Some(1),
            ..Default::default()
        }],
        max_pid: Some(4096),
        processes: Some(100),
        kubelet: CgroupSample {
            cpu_usage_ns: Some(7),
            memory: Some(mem(50, 40)),
            ..Default::default()
        },
        kubepods: None,
        pods: HashMap::from([(
            "uid1".to_string(),
            CgroupSample {
                cpu_usage_ns: Some(6 * SEC as u64),
                memory: Some(mem(9000, 8000)),
                ..Default::default()
            },
        )]),
        containers: HashMap::from([(
            "c1".to_string(),
            CgroupSample {
                cpu_usage_ns: Some(1),
                memory: Some(mem(5000, 4000)),
                ..Default::default()
            },
        )]),
        sandbox_interfaces: HashMap::from([(
            "sb1".to_string(),
            vec![InterfaceStats {
                name: "eth0".into(),
                rx_bytes: Some(77),
                tx_bytes: Some(88),
                ..Default::default()
            }],
        )]),
    }
}

fn fs_view() -> FsView {
    let info = FsInfo {
        capacity: 1000,
        available: 600,
        used: 400,
        inodes: 50,
        inodes_free: 40,
    };
    FsView {
        at: at(2_000),
        root: Some(info),
        image_fs: Some(FsStats {
            used_bytes: Some(123),
            ..Default::default()
        }),
        container_fs: None,
        mounts: HashMap::from([("/var/lib/containerd/snap".to_string(), info)]),
        logs: HashMap::from([(
            "c1".to_string(),
            DiskUsage {
                bytes: 10,
                inodes: 2,
            },
        )]),
        volumes: HashMap::from([(
            "uid1".to_string(),
            vec![
                VolumeReading {
                    name: "data".into(),
                    fs: info,
                    usage: DiskUsage {
                        bytes: 1000,
                        inodes: 5,
                    },
                    ephemeral: true,
                },
                VolumeReading {
                    name: "token".into(),
                    fs: info,
                    usage: DiskUsage {
                        bytes: 50000,
                        inodes: 9,
                    },
                    ephemeral: false,
                },
            ],
        )]),
        etc_hosts: HashMap::from([(
            "uid1".to_string(),
            DiskUsage {
                bytes: 4096,
                inodes: 1,
            },
        )]),
        claimed: HashMap::from([(
            "uid1".to_string(),
            vec![ClaimedReading {
                name: "db".into(),
                claim: Some(("shop".into(), "db-claim".into())),
                stats: crate::volume::csi::client::VolumeStats {
                    capacity_bytes: Some(5000),
                    used_bytes: Some(700),
                    ..Default::default()
                },
            }],
        )]),
    }
}

fn run(
    view: &RuntimeView,
    local: &LocalSample,
    fs: Option<&FsView>,
    rates: &mut Rates,
) -> Collected {
    let pods = HashMap::new();
    let cgroups = HashMap::from([("uid1".to_string(), "/kubepods/poduid1".to_string())]);
    assemble(
        &Inputs {
            node_name: "n1",
            view,
            local,
            fs,
            pods: &pods,
            pod_cgroups: &cgroups,
            container_cgroups: &HashMap::from([(
                "c1".to_string(),
                "/kubepods/poduid1/c1".to_string(),
            )]),
        },
        rates,
    )
}

fn reader(cache: &CpuRates) -> Rates<'_> {
    Rates {
        cache,
        update: false,
        seen: HashSet::new(),
    }
}

#[test]
fn full_summary_takes_each_number_from_its_source() {
    let cache = CpuRates::default();
    let (v, l, f) = (view(), local(), fs_view());
    let out = run(&v, &l, Some(&f), &mut reader(&cache));
    let node = &out.summary.node;
    assert_eq!(node.node_name, "n1");
    assert_eq!(node.start_time, Time(at(10)));
    let cpu = node.cpu.as_ref().unwrap();
    assert_eq!(cpu.usage_core_nano_seconds, Some(100 * SEC as u64));
    assert_eq!(cpu.usage_nano_cores, None, "no sampler round yet");
    let m = node.memory.as_ref().unwrap();
    assert_eq!(m.available_bytes, Some((1 << 30) - (1 << 28)));
    assert_eq!(node.network.as_ref().unwrap().default.name, "eth0");
    assert_eq!(node.fs.as_ref().unwrap().used_bytes, Some(400));
    assert_eq!(node.fs.as_ref().unwrap().inodes_used, Some(10));
    let runtime = node.runtime.as_ref().unwrap();
    assert_eq!(runtime.image_fs.as_ref().unwrap().used_bytes, Some(123));
    assert_eq!(
        runtime.container_fs, runtime.image_fs,
        "shared when not split"
    );
    assert_eq!(node.rlimit.as_ref().unwrap().max_pid, Some(4096));
    assert_eq!(node.system_containers[0].name, "kubelet");

    let pod = &out.summary.pods[0];
    assert_eq!(pod.pod_ref.name, "web");
    assert_eq!(pod.start_time, Time::from_unix_nanos(1_000 * SEC));
    // Pod totals come from the pod cgroup, not the container sum.
    assert_eq!(
        pod.cpu.as_ref().unwrap().usage_core_nano_seconds,
        Some(6 * SEC as u64)
    );
    assert_eq!(pod.memory.as_ref().unwrap().working_set_bytes, Some(8000));
    let net = pod.network.as_ref().unwrap();
    assert_eq!(
        (net.default.rx_bytes, net.default.tx_bytes),
        (Some(77), Some(88))
    );

    let c = &pod.containers[0];
    assert_eq!(c.name, "app");
    assert_eq!(
        c.cpu.as_ref().unwrap().usage_core_nano_seconds,
        Some(5 * SEC as u64)
    );
    let cm = c.memory.as_ref().unwrap();
    assert_eq!(cm.working_set_bytes, Some(4096), "the runtime's value wins");
    assert_eq!(cm.usage_bytes, Some(5000), "the cgroup fills the gaps");
    assert_eq!(
        cm.available_bytes, None,
        "no limit, no availableBytes (not the runtime's 0)"
    );
    assert_eq!(
        c.cpu.as_ref().unwrap().usage_nano_cores,
        Some(42),
        "runtime rate until ours"
    );
    let rootfs = c.rootfs.as_ref().unwrap();
    assert_eq!(
        (rootfs.used_bytes, rootfs.capacity_bytes),
        (Some(100), Some(1000))
    );
    assert_eq!(c.logs.as_ref().unwrap().used_bytes, Some(10));

    assert_eq!(pod.volume_stats.len(), 3);
    // A claim's volume names its claim and does not count as ephemeral storage.
    let db = &pod.volume_stats[2];
    assert_eq!(db.name, "db");
    assert_eq!(
        db.pvc_ref,
        Some(PvcReference {
            name: "db-claim".into(),
            namespace: "shop".into()
        })
    );
    assert_eq!(
        (db.fs.capacity_bytes, db.fs.used_bytes),
        (Some(5000), Some(700))
    );
    assert!(pod.volume_stats[..2].iter().all(|v| v.pvc_ref.is_none()));
    let eph = pod.ephemeral_storage.as_ref().unwrap();
    // rootfs 100 + logs 10 + ephemeral volume 1000 + etc-hosts 4096; the secret-like one is not.
    assert_eq!(eph.used_bytes, Some(100 + 10 + 1000 + 4096));
    assert_eq!(eph.inodes_used, Some(3 + 2 + 5 + 1));
    assert_eq!(eph.capacity_bytes, Some(1000));

    let d = &out.containers[0];
    assert_eq!(d.cgroup.as_deref(), Some("/kubepods/poduid1/c1"));
    assert_eq!(d.image, "sha256:abc", "no spec to name the image");
    assert_eq!(d.rootfs_mount.as_deref(), Some("/var/lib/containerd/snap"));
}

#[test]
fn cpu_and_memory_scope_leaves_the_rest_out() {
    let cache = CpuRates::default();
    let out = run(&view(), &local(), None, &mut reader(&cache));
    let node = &out.summary.node;
    assert!(node.fs.is_none() && node.network.is_none() && node.runtime.is_none());
    assert!(node.rlimit.is_none());
    let pod = &out.summary.pods[0];
    assert!(pod.network.is_none() && pod.ephemeral_storage.is_none());
    assert!(pod.volume_stats.is_empty());
    assert!(pod.containers[0].rootfs.is_none() && pod.containers[0].logs.is_none());
    assert!(pod.containers[0].cpu.is_some());
}

#[test]
fn sampler_rounds_give_rates_and_readers_see_them() {
    let cache = CpuRates::default();
    let v1 = view();
    let l1 = local();
    let mut sampler = Rates {
        cache: &cache,
        update: true,
        seen: HashSet::new(),
    };
    run(&v1, &l1, None, &mut sampler);
    assert!(sampler.seen.contains("node") && sampler.seen.contains("ctr/c1"));
    assert!(sampler.seen.contains("pod/uid1") && sampler.seen.contains("sys/kubelet"));

    // Ten seconds later: node +5 s of CPU, container +1 s.
    let mut v2 = view();
    let st = v2.stats.get_mut("c1").unwrap();
    st.cpu = Some(api::CpuUsage {
        timestamp: 2_010 * SEC,
        usage_core_nano_seconds: u(6 * SEC as u64),
        ..Default::default()
    });
    let mut l2 = local();
    l2.at = at(2_010);
    l2.node_cpu_ns = Some(105 * SEC as u64);
    let mut sampler = Rates {
        cache: &cache,
        update: true,
        seen: HashSet::new(),
    };
    run(&v2, &l2, None, &mut sampler);

    let out = run(&v2, &l2, None, &mut reader(&cache));
    let node_cpu = out.summary.node.cpu.unwrap();
    assert_eq!(node_cpu.usage_nano_cores, Some(500_000_000));
    let c_cpu = out.summary.pods[0].containers[0].cpu.clone().unwrap();
    assert_eq!(
        c_cpu.usage_nano_cores,
        Some(100_000_000),
        "our 10 s rate wins"
    );
}

#[test]
fn pod_without_cgroup_sums_its_containers() {
    let cache = CpuRates::default();
    let mut l = local();
    l.pods.clear();
    let out = run(&view(), &l, None, &mut reader(&cache));
    let pod = &out.summary.pods[0];
    assert_eq!(
        pod.cpu.as_ref().unwrap().usage_core_nano_seconds,
        Some(5 * SEC as u64)
    );
    assert_eq!(pod.memory.as_ref().unwrap().working_set_bytes, Some(4096));
}

#[test]
fn runtime_sandbox_network_is_preferred() {
    let cache = CpuRates::default();
    let mut v = view();
    v.sandbox_stats.insert(
        "sb1".into(),
        api::PodSandboxStats {
            linux: Some(api::LinuxPodSandboxStats {
                network: Some(api::NetworkUsage {
                    timestamp: 0,
                    default_interface: Some(api::NetworkInterfaceUsage {
                        name: "eth0".into(),
                        rx_bytes: u(5),
                        tx_bytes: u(6),
                        ..Default::default()
                    }),
                    interfaces: vec![],
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    let out = run(&v, &local(), Some(&fs_view()), &mut reader(&cache));
    let net = out.summary.pods[0].network.clone().unwrap();
    assert_eq!(net.default.rx_bytes, Some(5));
    assert_eq!(
        net.time,
        Time(at(2_000)),
        "collection time when the runtime gives none"
    );
    assert_eq!(net.interfaces.len(), 1);
}

fn pressure(total_us: u64) -> Option<Pressure> {
    let line = |total_us| PsiLine {
        total_us,
        avg10: 1.5,
        avg60: 0.5,
        avg300: 0.25,
    };
    Some(Pressure {
        some: line(total_us),
        full: line(total_us / 2),
    })
}

#[test]
fn pressure_goes_where_upstream_puts_it() {
    let cache = CpuRates::default();
    let mut l = local();
    let all = |base| PsiSet {
        cpu: pressure(base),
        memory: pressure(base + 2),
        io: pressure(base + 4),
    };
    l.node_psi = all(100);
    l.pods.get_mut("uid1").unwrap().psi = all(200);
    l.containers.get_mut("c1").unwrap().psi = PsiSet {
        io: None,
        ..all(300)
    };
    let out = run(&view(), &l, None, &mut reader(&cache));
    let node = &out.summary.node;
    let cpu_psi = node.cpu.as_ref().unwrap().psi.unwrap();
    assert_eq!((cpu_psi.some.total, cpu_psi.full.total), (100, 50));
    assert_eq!(cpu_psi.some.avg10, 1.5);
    assert_eq!(node.memory.as_ref().unwrap().psi.unwrap().some.total, 102);
    let io = node.io.as_ref().unwrap();
    assert_eq!(
        (io.time, io.psi.unwrap().some.total),
        (Time(at(2_000)), 104)
    );

    let pod = &out.summary.pods[0];
    assert_eq!(pod.cpu.as_ref().unwrap().psi.unwrap().some.total, 200);
    assert_eq!(pod.memory.as_ref().unwrap().psi.unwrap().full.total, 101);
    assert_eq!(pod.io.as_ref().unwrap().psi.unwrap().some.total, 204);

    // The container's CPU and memory come from the runtime; its pressure from its cgroup.
    let c = &pod.containers[0];
    assert_eq!(c.cpu.as_ref().unwrap().psi.unwrap().some.total, 300);
    assert_eq!(c.memory.as_ref().unwrap().psi.unwrap().some.total, 302);
    assert!(c.io.is_none(), "no io.pressure, no io stats");

    // Without PSI (v1, or the gate off) nothing changes.
    let out = run(&view(), &local(), None, &mut reader(&cache));
    let node = &out.summary.node;
    assert!(node.io.is_none() && node.cpu.as_ref().unwrap().psi.is_none());
    assert!(out.summary.pods[0].memory.as_ref().unwrap().psi.is_none());
}
