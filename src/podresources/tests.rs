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
