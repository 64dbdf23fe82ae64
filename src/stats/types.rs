//! The Summary API (stats/v1alpha1) as JSON: field names, nesting and omission rules are
//! upstream's, because metrics-server, the eviction tooling and dashboards parse it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};

/// A point in time serialized like metav1.Time: RFC 3339 in UTC with whole seconds, and
/// `null` when unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time(pub Option<SystemTime>);

impl Time {
    #[cfg(test)]
    pub fn at(t: SystemTime) -> Self {
        Time(Some(t))
    }

    /// From the nanoseconds since the epoch the CRI uses; zero or negative means unknown.
    pub fn from_unix_nanos(ns: i64) -> Self {
        u64::try_from(ns)
            .ok()
            .filter(|n| *n > 0)
            .map(|n| Time(Some(UNIX_EPOCH + Duration::from_nanos(n))))
            .unwrap_or_default()
    }

    /// Seconds since the epoch with fractions, for metrics; None when unknown.
    pub fn unix_seconds(&self) -> Option<f64> {
        let d = self.0?.duration_since(UNIX_EPOCH).ok()?;
        Some(d.as_secs_f64())
    }

    /// Milliseconds since the epoch, the Prometheus sample timestamp unit.
    pub fn unix_millis(&self) -> Option<i64> {
        let d = self.0?.duration_since(UNIX_EPOCH).ok()?;
        i64::try_from(d.as_millis()).ok()
    }

    pub fn rfc3339(&self) -> Option<String> {
        let d = self.0?.duration_since(UNIX_EPOCH).ok()?;
        let secs = i64::try_from(d.as_secs()).ok()?;
        let ts = jiff::Timestamp::from_second(secs).ok()?;
        Some(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.rfc3339() {
            Some(text) => s.serialize_str(&text),
            None => s.serialize_none(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    pub start_time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RlimitStats {
    pub time: Time,
    #[serde(rename = "maxpid", skip_serializing_if = "Option::is_none")]
    pub max_pid: Option<i64>,
    #[serde(rename = "curproc", skip_serializing_if = "Option::is_none")]
    pub num_of_running_processes: Option<i64>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_fs: Option<FsStats>,
}

/// Names of the system containers upstream reports.
pub const SYSTEM_CONTAINER_KUBELET: &str = "kubelet";
pub const SYSTEM_CONTAINER_PODS: &str = "pods";

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ProcessStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: Time,
    pub containers: Vec<ContainerStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(rename = "volume", skip_serializing_if = "Vec::is_empty")]
    pub volume_stats: Vec<VolumeStats>,
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(rename = "process_stats", skip_serializing_if = "Option::is_none")]
    pub process_stats: Option<ProcessStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct NetworkStats {
    pub time: Time,
    /// The default interface (eth0), inlined as upstream does.
    #[serde(flatten)]
    pub default: InterfaceStats,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// Pressure stall information of one resource (upstream's KubeletPSI). Both lines are always
/// there, zeros where the kernel has no `full` line.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct PsiStats {
    pub full: PsiData,
    pub some: PsiData,
}

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PsiData {
    /// Cumulative stall time, in the kernel's microseconds.
    pub total: u64,
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
}

/// IO has no usage figures in the Summary, only its pressure.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct IoStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SwapStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_usage_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    #[serde(flatten)]
    pub fs: FsStats,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PvcReference>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PvcReference {
    pub name: String,
    pub namespace: String,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(secs: u64) -> Time {
        Time::at(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(999))
    }

    #[test]
    fn time_is_rfc3339_whole_seconds_or_null() {
        assert_eq!(
            serde_json::to_value(t(1_700_000_000)).unwrap(),
            json!("2023-11-14T22:13:20Z")
        );
        assert_eq!(serde_json::to_value(Time::default()).unwrap(), json!(null));
        assert_eq!(Time::from_unix_nanos(0), Time::default());
        assert_eq!(
            Time::from_unix_nanos(1_500_000_000).unix_millis(),
            Some(1_500)
        );
    }

    #[test]
    fn field_names_match_upstream() {
        let fs = FsStats {
            time: t(10),
            available_bytes: Some(1),
            capacity_bytes: Some(2),
            used_bytes: Some(3),
            inodes_free: Some(4),
            inodes: Some(5),
            inodes_used: Some(6),
        };
        let summary = Summary {
            node: NodeStats {
                node_name: "n1".into(),
                system_containers: vec![ContainerStats {
                    name: SYSTEM_CONTAINER_KUBELET.into(),
                    start_time: t(1),
                    ..Default::default()
                }],
                start_time: t(1),
                cpu: Some(CpuStats {
                    time: t(10),
                    usage_nano_cores: Some(7),
                    usage_core_nano_seconds: Some(8),
                    psi: None,
                }),
                memory: Some(MemoryStats {
                    time: t(10),
                    available_bytes: Some(1),
                    usage_bytes: Some(2),
                    working_set_bytes: Some(3),
                    rss_bytes: Some(4),
                    page_faults: Some(5),
                    major_page_faults: Some(6),
                    psi: None,
                }),
                io: None,
                network: Some(NetworkStats {
                    time: t(10),
                    default: InterfaceStats {
                        name: "eth0".into(),
                        rx_bytes: Some(1),
                        rx_errors: Some(2),
                        tx_bytes: Some(3),
                        tx_errors: Some(4),
                    },
                    interfaces: vec![InterfaceStats {
                        name: "eth0".into(),
                        rx_bytes: Some(1),
                        ..Default::default()
                    }],
                }),
                fs: Some(fs.clone()),
                runtime: Some(RuntimeStats {
                    image_fs: Some(fs.clone()),
                    container_fs: None,
                }),
                rlimit: Some(RlimitStats {
                    time: t(10),
                    max_pid: Some(4194304),
                    num_of_running_processes: Some(300),
                }),
                swap: None,
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "web".into(),
                    namespace: "default".into(),
                    uid: "u1".into(),
                },
                start_time: t(5),
                containers: vec![ContainerStats {
                    name: "app".into(),
                    start_time: t(6),
                    rootfs: Some(fs.clone()),
                    logs: Some(fs.clone()),
                    ..Default::default()
                }],
                volume_stats: vec![VolumeStats {
                    fs: fs.clone(),
                    name: "data".into(),
                    pvc_ref: None,
                }],
                ephemeral_storage: Some(fs.clone()),
                process_stats: Some(ProcessStats {
                    process_count: Some(2),
                }),
                swap: Some(SwapStats {
                    time: t(10),
                    swap_available_bytes: Some(0),
                    swap_usage_bytes: Some(0),
                }),
                ..Default::default()
            }],
        };
        let v = serde_json::to_value(&summary).unwrap();
        let node = &v["node"];
        assert_eq!(node["nodeName"], "n1");
        assert_eq!(node["startTime"], "1970-01-01T00:00:01Z");
        assert_eq!(node["systemContainers"][0]["name"], "kubelet");
        assert_eq!(node["cpu"]["usageNanoCores"], 7);
        assert_eq!(node["cpu"]["usageCoreNanoSeconds"], 8);
        for (k, want) in [
            ("availableBytes", 1),
            ("usageBytes", 2),
            ("workingSetBytes", 3),
            ("rssBytes", 4),
            ("pageFaults", 5),
            ("majorPageFaults", 6),
        ] {
            assert_eq!(node["memory"][k], want, "memory.{k}");
        }
        // The default interface is inlined next to the list.
        assert_eq!(node["network"]["name"], "eth0");
        assert_eq!(node["network"]["rxBytes"], 1);
        assert_eq!(node["network"]["txErrors"], 4);
        assert_eq!(node["network"]["interfaces"][0]["rxBytes"], 1);
        assert!(node["network"]["interfaces"][0].get("txBytes").is_none());
        for (k, want) in [
            ("availableBytes", 1),
            ("capacityBytes", 2),
            ("usedBytes", 3),
            ("inodesFree", 4),
            ("inodes", 5),
            ("inodesUsed", 6),
        ] {
            assert_eq!(node["fs"][k], want, "fs.{k}");
        }
        assert_eq!(node["runtime"]["imageFs"]["usedBytes"], 3);
        assert!(node["runtime"].get("containerFs").is_none());
        assert_eq!(node["rlimit"]["maxpid"], 4194304);
        assert_eq!(node["rlimit"]["curproc"], 300);
        assert!(node.get("swap").is_none());

        let pod = &v["pods"][0];
        assert_eq!(
            pod["podRef"],
            json!({"name": "web", "namespace": "default", "uid": "u1"})
        );
        assert_eq!(pod["containers"][0]["name"], "app");
        assert_eq!(pod["containers"][0]["rootfs"]["usedBytes"], 3);
        assert_eq!(pod["containers"][0]["logs"]["inodesUsed"], 6);
        assert!(pod["containers"][0].get("cpu").is_none());
        assert_eq!(pod["volume"][0]["name"], "data");
        assert_eq!(pod["volume"][0]["capacityBytes"], 2);
        assert!(pod["volume"][0].get("pvcRef").is_none());
        assert_eq!(pod["ephemeral-storage"]["usedBytes"], 3);
        assert_eq!(pod["process_stats"]["process_count"], 2);
        assert_eq!(pod["swap"]["swapUsageBytes"], 0);
        assert_eq!(pod["swap"]["swapAvailableBytes"], 0);
        assert!(pod.get("network").is_none());
        assert!(node["cpu"].get("psi").is_none() && node.get("io").is_none());
    }

    #[test]
    fn pressure_fields_match_upstream() {
        let data = |total| PsiData {
            total,
            avg10: 1.5,
            avg60: 0.25,
            avg300: 0.0,
        };
        let psi = Some(PsiStats {
            full: data(7),
            some: data(9),
        });
        let c = ContainerStats {
            cpu: Some(CpuStats {
                psi,
                ..Default::default()
            }),
            memory: Some(MemoryStats {
                psi,
                ..Default::default()
            }),
            io: Some(IoStats { time: t(10), psi }),
            ..Default::default()
        };
        let v = serde_json::to_value(&c).unwrap();
        let want = json!({
            "full": {"total": 7, "avg10": 1.5, "avg60": 0.25, "avg300": 0.0},
            "some": {"total": 9, "avg10": 1.5, "avg60": 0.25, "avg300": 0.0},
        });
        assert_eq!(v["cpu"]["psi"], want);
        assert_eq!(v["memory"]["psi"], want);
        assert_eq!(v["io"]["psi"], want);
        assert_eq!(v["io"]["time"], "1970-01-01T00:00:10Z");
    }

    #[test]
    fn pods_and_containers_are_always_present() {
        let v = serde_json::to_value(Summary::default()).unwrap();
        assert_eq!(v["pods"], json!([]));
        assert_eq!(v["node"]["startTime"], json!(null));
        let p = serde_json::to_value(PodStats::default()).unwrap();
        assert_eq!(p["containers"], json!([]));
    }
}
