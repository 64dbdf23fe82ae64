use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
use tonic::Code;

use super::api::pod_resources_lister_client::PodResourcesListerClient;
use super::*;

fn pod(name: &str, phase: &str, containers: &[&str], sidecar: Option<&str>) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    let c = |n: &str| Container {
        name: n.into(),
        ..Default::default()
    };
    p.spec = Some(PodSpec {
        containers: containers.iter().map(|n| c(n)).collect(),
        init_containers: Some(
            [
                Some(c("setup")),
                sidecar.map(|n| Container {
                    restart_policy: Some("Always".into()),
                    ..c(n)
                }),
            ]
            .into_iter()
            .flatten()
            .collect(),
        ),
        ..Default::default()
    });
    p.status = Some(PodStatus {
        phase: Some(phase.into()),
        ..Default::default()
    });
    p
}

async fn start() -> (
    PodResourcesListerClient<tonic::transport::Channel>,
    tempfile::TempDir,
    CancellationToken,
) {
    start_with(true).await
}

async fn start_with(
    get_enabled: bool,
) -> (
    PodResourcesListerClient<tonic::transport::Channel>,
    tempfile::TempDir,
    CancellationToken,
) {
    let status = Arc::new(StatusStore::default());
    for p in [
        pod("web", "Running", &["app", "proxy"], Some("logs")),
        pod("done", "Succeeded", &["job"], None),
    ] {
        let uid = p.metadata.uid.clone().unwrap();
        let st = p.status.clone().unwrap();
        status.set(&uid, Arc::new(p), st);
    }
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path()).unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn(serve(
        listener,
        PodResourcesService::new(status, get_enabled),
        cancel.clone(),
    ));
    let path = socket_path(dir.path());
    let channel = crate::cri::connect_channel(&path.display().to_string(), Duration::from_secs(5))
        .await
        .unwrap();
    (PodResourcesListerClient::new(channel), dir, cancel)
}

#[tokio::test]
async fn lists_active_pods_with_containers_and_sidecars() {
    let (mut client, _dir, cancel) = start().await;
    let list = client
        .list(api::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.pod_resources.len(), 1, "{list:?}");
    let web = &list.pod_resources[0];
    assert_eq!(
        (web.name.as_str(), web.namespace.as_str()),
        ("web", "default")
    );
    let names: Vec<&str> = web.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["logs", "app", "proxy"]);
    assert!(
        web.containers
            .iter()
            .all(|c| c.devices.is_empty() && c.cpu_ids.is_empty())
    );

    let got = client
        .get(api::GetPodResourcesRequest {
            pod_name: "web".into(),
            pod_namespace: "default".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.pod_resources.unwrap().containers.len(), 3);
    let missing = client
        .get(api::GetPodResourcesRequest {
            pod_name: "nope".into(),
            pod_namespace: "default".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::Unknown);
    assert_eq!(missing.message(), "pod nope in namespace default not found");

    let alloc = client
        .get_allocatable_resources(api::AllocatableResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(alloc.devices.is_empty() && alloc.cpu_ids.is_empty() && alloc.memory.is_empty());
    cancel.cancel();
}

#[tokio::test]
async fn v1alpha1_is_served_beside_v1_with_every_pod_and_its_app_containers() {
    use super::v1alpha1::api as alpha;
    let (_client, dir, cancel) = start().await;
    let path = socket_path(dir.path());
    let channel = crate::cri::connect_channel(&path.display().to_string(), Duration::from_secs(5))
        .await
        .unwrap();
    let mut client = alpha::pod_resources_lister_client::PodResourcesListerClient::new(channel);
    let list = client
        .list(alpha::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut pods: Vec<(String, Vec<String>)> = list
        .pod_resources
        .iter()
        .map(|p| {
            let names = p.containers.iter().map(|c| c.name.clone()).collect();
            (p.name.clone(), names)
        })
        .collect();
    pods.sort();
    assert_eq!(
        pods,
        [
            ("done".to_string(), vec!["job".to_string()]),
            (
                "web".to_string(),
                vec!["app".to_string(), "proxy".to_string()]
            ),
        ]
    );
    cancel.cancel();
}

#[tokio::test]
async fn get_follows_its_feature_gate() {
    let (mut client, _dir, cancel) = start_with(false).await;
    let err = client
        .get(api::GetPodResourcesRequest {
            pod_name: "web".into(),
            pod_namespace: "default".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.message(), "PodResources API Get method disabled");
    assert!(client.list(api::ListPodResourcesRequest {}).await.is_ok());
    assert!(get_enabled(&Default::default()));
    let off = [("KubeletPodResourcesGet".to_string(), false)].into();
    assert!(!get_enabled(&off));
    cancel.cancel();
}

#[tokio::test]
async fn bursts_beyond_the_limit_are_rejected() {
    let (mut client, _dir, cancel) = start().await;
    let mut rejected = 0;
    for _ in 0..100 {
        if let Err(status) = client.list(api::ListPodResourcesRequest {}).await {
            assert_eq!(status.code(), Code::ResourceExhausted);
            assert_eq!(status.message(), "rejected by rate limit");
            rejected += 1;
        }
    }
    // A burst of 10 and 100/s refill: far fewer than 100 fit in the time 100 calls take.
    assert!(rejected > 0, "no call was rate limited");
    cancel.cancel();
}

#[test]
fn a_stale_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket_path(dir.path());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "stale").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async { bind(dir.path()).unwrap() });
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&path).unwrap().file_type().is_socket());
}

/// A gRPC call written frame by frame the way grpc C-core (Python's grpcio) writes it to a
/// unix-socket target: `:authority` is the percent-encoded socket path, which h2 alone
/// refuses with RST_STREAM PROTOCOL_ERROR. Returns the response message bytes and the
/// trailers, or the RST_STREAM error code.
async fn call_like_grpc_c_core(
    socket: &Path,
    method: &str,
) -> Result<(Vec<u8>, Vec<(String, String)>), u32> {
    use crate::grpc_uds::hpack::{Decoder, Field, encode};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    let authority = socket
        .display()
        .to_string()
        .trim_start_matches('/')
        .replace('/', "%2F");
    let field = |n: &str, v: &str| Field {
        name: n.into(),
        value: v.into(),
        sensitive: false,
    };
    let mut block = Vec::new();
    encode(
        &[
            field(":path", method),
            field(":authority", &authority),
            field(":method", "POST"),
            field(":scheme", "http"),
            field("content-type", "application/grpc"),
            field("te", "trailers"),
            field(
                "user-agent",
                "grpc-python/1.85.1 grpc-c/58.0.0 (linux; chttp2)",
            ),
        ],
        &mut block,
    );
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(frame(0x1, 0x4, 1, &block));
    // An empty request message: uncompressed, length 0.
    out.extend(frame(0x0, 0x1, 1, &[0, 0, 0, 0, 0]));
    let mut conn = tokio::net::UnixStream::connect(socket).await.unwrap();
    conn.write_all(&out).await.unwrap();

    let mut decoder = Decoder::new(1 << 20);
    let mut body = Vec::new();
    let mut trailers = Vec::new();
    loop {
        let mut head = [0u8; 9];
        conn.read_exact(&mut head).await.unwrap();
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        conn.read_exact(&mut payload).await.unwrap();
        let (kind, flags) = (head[3], head[4]);
        match kind {
            0x4 if flags & 0x1 == 0 => conn.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap(),
            0x3 => return Err(u32::from_be_bytes(payload[..4].try_into().unwrap())),
            0x0 => body.extend(payload),
            0x1 => {
                let fields = decoder.decode(&payload).unwrap();
                trailers.extend(fields.into_iter().map(|f| {
                    (
                        String::from_utf8(f.name).unwrap(),
                        String::from_utf8(f.value).unwrap(),
                    )
                }));
                if flags & 0x1 != 0 {
                    // Skip the 5-byte gRPC message prefix.
                    return Ok((body.get(5..).unwrap_or_default().to_vec(), trailers));
                }
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn clients_sending_a_socket_path_as_authority_are_answered() {
    use prost::Message;
    let (_client, dir, cancel) = start().await;
    let socket = socket_path(dir.path());
    let (body, headers) = tokio::time::timeout(
        Duration::from_secs(10),
        call_like_grpc_c_core(&socket, "/v1.PodResourcesLister/List"),
    )
    .await
    .expect("no answer")
    .unwrap_or_else(|code| panic!("RST_STREAM with error code {code}"));
    assert!(
        headers.contains(&(":status".into(), "200".into())),
        "{headers:?}"
    );
    assert!(
        headers.contains(&("grpc-status".into(), "0".into())),
        "{headers:?}"
    );
    let list = api::ListPodResourcesResponse::decode(body.as_slice()).unwrap();
    assert_eq!(list.pod_resources.len(), 1, "{list:?}");
    assert_eq!(list.pod_resources[0].name, "web");
    cancel.cancel();
}

#[tokio::test]
async fn exclusive_cpus_are_listed_per_container_and_the_rest_as_allocatable() {
    use crate::cm::cpumanager::{CpuManager, CpuSettings};
    let dir = tempfile::tempdir().unwrap();
    let sysfs = dir.path().join("sys");
    crate::cm::cpumanager::topology::fake_sysfs(&sysfs, &[(0, "0", 0), (0, "1", 0), (0, "2", 0)]);
    let cpus = CpuManager::start(&CpuSettings {
        policy: "static".into(),
        options: Default::default(),
        reconcile_period: Duration::from_secs(10),
        reserved_system_cpus: "0".into(),
        reserved_cpu: crate::quantity::Amount::parse("1").ok(),
        feature_gates: Default::default(),
        root_dir: dir.path().to_path_buf(),
        sysfs,
    })
    .unwrap();
    let mut p = pod("web", "Running", &["app", "proxy"], None);
    let guaranteed: std::collections::BTreeMap<String, _> = [
        (
            "cpu".to_string(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
        ),
        (
            "memory".to_string(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Mi".into()),
        ),
    ]
    .into();
    let spec = p.spec.as_mut().unwrap();
    spec.init_containers = None;
    for c in &mut spec.containers {
        c.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
            requests: Some(guaranteed.clone()),
            limits: Some(guaranteed.clone()),
            ..Default::default()
        });
    }
    cpus.admit(&p).unwrap();
    let status = Arc::new(StatusStore::default());
    let st = p.status.clone().unwrap();
    status.set("uid-web", Arc::new(p), st);
    let service = PodResourcesService::new(status, true).with_cpus(cpus);
    let list = service
        .list(Request::new(api::ListPodResourcesRequest {}))
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<Vec<i64>> = list.pod_resources[0]
        .containers
        .iter()
        .map(|c| c.cpu_ids.clone())
        .collect();
    assert_eq!(ids, [vec![1], vec![2]]);
    let alloc = service
        .get_allocatable_resources(Request::new(api::AllocatableResourcesRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(alloc.cpu_ids, [1, 2]);
}

#[tokio::test]
async fn memory_is_listed_by_numa_node_per_container_and_per_node_as_allocatable() {
    use crate::cm::memorymanager::{MemoryManager, STATIC, tests as mem};
    let dir = tempfile::tempdir().unwrap();
    let memory = MemoryManager::start(&mem::settings(dir.path(), STATIC)).unwrap();
    let mut p = mem::pod(
        "uid-db",
        vec![],
        vec![mem::container("db", "1Gi", Some("2Mi"))],
    );
    p.metadata.namespace = Some("default".into());
    memory.admit(&p).unwrap();
    let status = Arc::new(StatusStore::default());
    status.set("uid-db", Arc::new(p), Default::default());
    let service = PodResourcesService::new(status, true).with_memory(memory);
    let list = service
        .list(Request::new(api::ListPodResourcesRequest {}))
        .await
        .unwrap()
        .into_inner();
    let held: Vec<(String, u64, Vec<i64>)> = list.pod_resources[0].containers[0]
        .memory
        .iter()
        .map(|m| {
            let nodes = m.topology.as_ref().unwrap().nodes.iter().map(|n| n.id);
            (m.memory_type.clone(), m.size, nodes.collect())
        })
        .collect();
    assert_eq!(
        held,
        [
            ("hugepages-2Mi".to_string(), 2 << 20, vec![0]),
            ("memory".to_string(), 1 << 30, vec![0]),
        ]
    );
    let alloc = service
        .get_allocatable_resources(Request::new(api::AllocatableResourcesRequest {}))
        .await
        .unwrap()
        .into_inner();
    let per_node: Vec<(String, u64)> = alloc
        .memory
        .iter()
        .map(|m| (m.memory_type.clone(), m.size))
        .collect();
    assert_eq!(
        per_node,
        [
            ("hugepages-2Mi".to_string(), 8 << 20),
            ("memory".to_string(), (7 << 30) - (8 << 20)),
            ("memory".to_string(), 8 << 30),
        ]
    );
}
