//! Volumes the kubelet writes, through the real API server: configMap, secret, downwardAPI and
//! projected volumes, and their updates reaching a running container (a changed configMap, a
//! secret created after the pod, new labels), with upstream's `..data` layout. A volume whose
//! configMap does not exist holds the pod in ContainerCreating with upstream's FailedMount
//! event, until the configMap appears. A subPathExpr takes its folder from the container env.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NODE: &str = "krs-volumes-node";
const POD: &str = "krs-volumes-live";
const WAITING_POD: &str = "krs-volumes-waiting";
const CONFIG_MAP: &str = "krs-vol-cm";
const LATE_CONFIG_MAP: &str = "krs-vol-late-cm";
const SECRET: &str = "krs-vol-secret";

/// The last line the container printed, read from its log file on the node.
fn last_tick(k: &Kubelet, pod_name: &str, uid: &str) -> Option<String> {
    let log = k
        .pod_logs_dir
        .join(format!("default_{pod_name}_{uid}/main/0.log"));
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .find(|l| l.starts_with("tick "))
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn written_volumes_follow_their_sources() {
    let (client, pods) = default_pods(&[]).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let gone = DeleteParams::default().grace_period(0);
    for p in [POD, WAITING_POD] {
        let _ = pods.delete(p, &gone).await;
    }
    for c in [CONFIG_MAP, LATE_CONFIG_MAP] {
        let _ = config_maps.delete(c, &DeleteParams::default()).await;
    }
    let _ = secrets.delete(SECRET, &DeleteParams::default()).await;

    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": CONFIG_MAP},
        "data": {"color": "blue"},
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();

    let mut k = Kubelet::new("volumes-live");
    // A short sync period keeps the test short; updates arrive within one period.
    k.start_as_node(NODE, &["--sync-frequency=10s"]);
    let script = "touch /sub/marker; while true; do \
        echo \"tick color=$(cat /cfg/color) proj=$(cat /proj/color) secret=$(cat /sec/token 2>/dev/null) \
        labels=$(cat /info/labels | tr '\\n' ,) name=$(cat /info/name) cpu=$(cat /info/cpu_millis) \
        ann=$(cat /proj/ann | tr '\\n' ,)\"; sleep 1; done";
    let pod: Pod = api_pod(json!({
        "metadata": {"name": POD, "labels": {"app": "v1"}, "annotations": {"note": "first"}},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}},
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "volumeMounts": [
                    {"name": "cfg", "mountPath": "/cfg"},
                    {"name": "sec", "mountPath": "/sec"},
                    {"name": "info", "mountPath": "/info"},
                    {"name": "proj", "mountPath": "/proj"},
                    {"name": "scratch", "mountPath": "/sub", "subPathExpr": "$(POD_NAME)/logs"},
                ],
            }],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "cfg", "configMap": {"name": CONFIG_MAP}},
                {"name": "sec", "secret": {"secretName": SECRET, "optional": true, "defaultMode": 0o400}},
                {"name": "info", "downwardAPI": {"items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o600},
                    {"path": "cpu_millis", "resourceFieldRef": {
                        "containerName": "main", "resource": "limits.cpu", "divisor": "1m"}},
                ]}},
                {"name": "proj", "projected": {"sources": [
                    {"configMap": {"name": CONFIG_MAP, "items": [{"key": "color", "path": "color"}]}},
                    {"downwardAPI": {"items": [
                        {"path": "ann", "fieldRef": {"fieldPath": "metadata.annotations"}}]}},
                ]}},
            ],
        },
    }));
    let uid = create_pod(&pods, &pod).await;

    let first = wait_for(Duration::from_secs(90), "the first tick", || {
        last_tick(&k, POD, &uid)
    });
    assert!(
        first.contains(
            "color=blue proj=blue secret= labels=app=\"v1\" name=krs-volumes-live cpu=250 ann="
        ),
        "{first}\n{}\n{}",
        String::from_utf8_lossy(
            &std::process::Command::new("ls")
                .arg("-laR")
                .arg(k.root_dir.join("pods").join(&uid))
                .output()
                .unwrap()
                .stdout
        ),
        tail(&k.log(), 30)
    );

    // The annotations the container sees include the kubelet's own config.seen and
    // config.source, as with upstream's kubelet.
    assert!(first.contains("note=\"first\""), "{first}");
    assert!(
        first.contains("kubernetes.io/config.source=\"api\""),
        "{first}"
    );

    // Upstream's layout on the node: the files are links into ..data.
    let pod_dir = k.root_dir.join("pods").join(&uid);
    let cfg_dir = pod_dir.join("volumes/kubernetes.io~configmap/cfg");
    let data = std::fs::read_link(cfg_dir.join("..data")).expect("..data link");
    assert!(data.to_string_lossy().starts_with("..20"), "{data:?}");
    assert_eq!(
        std::fs::read_link(cfg_dir.join("color")).unwrap(),
        std::path::Path::new("..data/color")
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let info_dir = pod_dir.join("volumes/kubernetes.io~downward-api/info");
    assert_eq!(mode(&info_dir.join("name")), 0o600);
    assert_eq!(mode(&info_dir.join("labels")), 0o644);
    // subPathExpr: the container's env names the folder inside the emptyDir.
    let marker =
        pod_dir.join("volumes/kubernetes.io~empty-dir/scratch/krs-volumes-live/logs/marker");
    assert!(marker.is_file(), "{} missing", marker.display());

    // Three changes at once: the configMap, a secret that did not exist, the pod's metadata.
    let mut changed = cm.clone();
    changed.data = Some([("color".to_string(), "green".to_string())].into());
    config_maps
        .replace(CONFIG_MAP, &PostParams::default(), &changed)
        .await
        .unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": SECRET},
        "stringData": {"token": "abc"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    pods.patch(
        POD,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {
            "labels": {"app": "v2", "tier": "web"},
            "annotations": {"note": "second"},
        }})),
    )
    .await
    .unwrap();
    let updated = wait_for(
        Duration::from_secs(60),
        "the updates in the container",
        || {
            last_tick(&k, POD, &uid).filter(|t| {
                t.contains("secret=abc")
                    && t.contains("color=green proj=green")
                    && t.contains("tier")
            })
        },
    );
    assert!(
        updated.contains("labels=app=\"v2\",tier=\"web\" name=krs-volumes-live cpu=250 ann="),
        "{updated}"
    );
    let sec_file = pod_dir.join("volumes/kubernetes.io~secret/sec/token");
    assert_eq!(mode(&sec_file), 0o400);
    let old_data = cfg_dir.join(&data);
    assert!(!old_data.exists(), "the old data folder is removed");

    // A configMap volume whose configMap is missing holds the pod in ContainerCreating.
    let mut waiting = pod.clone();
    waiting.metadata.name = Some(WAITING_POD.into());
    waiting.metadata.labels = None;
    let spec = waiting.spec.as_mut().unwrap();
    spec.containers[0].command = Some(vec!["sleep".into(), "3600".into()]);
    spec.containers[0].volume_mounts = Some(vec![
        serde_json::from_value(json!({"name": "late", "mountPath": "/late"})).unwrap(),
    ]);
    spec.volumes = Some(vec![
        serde_json::from_value(json!({"name": "late", "configMap": {"name": LATE_CONFIG_MAP}}))
            .unwrap(),
    ]);
    create_pod(&pods, &waiting).await;
    let message = wait_async(Duration::from_secs(60), "a FailedMount event", || async {
        let list = events
            .list(&ListParams::default().fields(&format!(
                "involvedObject.name={WAITING_POD},reason=FailedMount"
            )))
            .await
            .ok()?;
        list.items.into_iter().next().and_then(|e| e.message)
    })
    .await;
    assert_eq!(
        message,
        format!(
            "MountVolume.SetUp failed for volume \"late\" : configmap \"{LATE_CONFIG_MAP}\" not found"
        )
    );
    // The status may reach the API server a moment after the event.
    wait_async(Duration::from_secs(30), "ContainerCreating", || async {
        let p = pods.get(WAITING_POD).await.ok()?;
        (waiting_reason(&p).as_deref() == Some("ContainerCreating")).then_some(())
    })
    .await;
    let late: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": LATE_CONFIG_MAP},
        "data": {"k": "v"},
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &late)
        .await
        .unwrap();
    wait_async(
        Duration::from_secs(60),
        "the waiting pod to run",
        || async { first_running(&pods.get(WAITING_POD).await.ok()?).then_some(()) },
    )
    .await;

    for p in [POD, WAITING_POD] {
        let _ = pods.delete(p, &gone).await;
    }
    wait_async(Duration::from_secs(60), "the pods to go", || async {
        let a = pods.get_opt(POD).await.ok()?.is_none();
        let b = pods.get_opt(WAITING_POD).await.ok()?.is_none();
        (a && b).then_some(())
    })
    .await;
    wait_for(Duration::from_secs(30), "the pod folder to go", || {
        (!pod_dir.exists()).then_some(())
    });
    for c in [CONFIG_MAP, LATE_CONFIG_MAP] {
        let _ = config_maps.delete(c, &DeleteParams::default()).await;
    }
    let _ = secrets.delete(SECRET, &DeleteParams::default()).await;
    k.cleanup();
}
