//! Static pods in API server mode: their mirror pods in the API server (kept, recreated,
//! removed) and the events the kubelet posts about them; mirror pods of static pods removed or
//! changed while the kubelet was down (stopped, or killed) go or are replaced after its start,
//! found in the API server rather than in the kubelet's memory.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};

const MIRROR_NODE: &str = "krs-mirror-node";
const STATIC: &str = "krs-static";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn static_pods_have_mirror_pods_and_events() {
    let _guard = serial();
    let client = admin_client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let name = format!("{STATIC}-{MIRROR_NODE}");
    let _ = pods
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await;

    let mut k = Kubelet::new("mirror");
    k.write_manifest(
        "static.yaml",
        &pod_yaml(
            STATIC,
            "Always",
            2,
            "trap 'exit 0' TERM; while true; do sleep 1; done",
        ),
    );
    k.start_as_node(MIRROR_NODE, &[]);

    let log = k.log_path.clone();
    let first = wait_async(Duration::from_secs(90), "a running mirror pod", || async {
        let p = pods.get_opt(&name).await.ok().flatten()?;
        running(&p).then_some(p)
    })
    .await;
    let annotations = first.metadata.annotations.clone().unwrap_or_default();
    let hash = annotations
        .get(MIRROR_ANNOTATION)
        .unwrap_or_else(|| panic!("no mirror annotation: {annotations:?}"));
    assert_eq!(
        annotations.get("kubernetes.io/config.hash"),
        Some(hash),
        "{annotations:?}"
    );
    let owners = first.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].name.as_str()),
        ("Node", MIRROR_NODE)
    );
    let node = nodes.get(MIRROR_NODE).await.expect("node registered");
    assert_eq!(Some(&owners[0].uid), node.metadata.uid.as_ref());
    assert_eq!(
        first.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(MIRROR_NODE)
    );

    // Deleted by someone else, it comes back (with the status of the same static pod).
    let first_uid = first.metadata.uid.clone().unwrap();
    pods.delete(&name, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete mirror pod");
    let second = wait_async(
        Duration::from_secs(60),
        "the mirror pod recreated",
        || async {
            let p = pods.get_opt(&name).await.ok().flatten()?;
            (p.metadata.uid.as_ref() != Some(&first_uid) && running(&p)).then_some(p)
        },
    )
    .await;
    assert!(
        second
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(MIRROR_ANNOTATION)
    );

    // The kubelet posted a Started event about the static pod.
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let selector =
        ListParams::default().fields(&format!("involvedObject.name={name},reason=Started"));
    let started = wait_async(Duration::from_secs(30), "a Started event", || async {
        let list = events.list(&selector).await.ok()?;
        list.items.into_iter().next()
    })
    .await;
    let source = started.source.clone().unwrap_or_default();
    assert_eq!(source.component.as_deref(), Some("kubelet"));
    assert_eq!(source.host.as_deref(), Some(MIRROR_NODE));
    assert_eq!(started.type_.as_deref(), Some("Normal"));
    assert_eq!(started.involved_object.kind.as_deref(), Some("Pod"));
    assert!(started.count.unwrap_or(0) >= 1);

    // Without its manifest the static pod stops and the mirror pod goes away.
    k.remove_manifest("static.yaml");
    wait_async(
        Duration::from_secs(60),
        "the mirror pod deleted",
        || async {
            pods.get_opt(&name)
                .await
                .ok()
                .and_then(|p| p.is_none().then_some(()))
        },
    )
    .await;

    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("Mirror pod created"), "{}", tail(&text, 40));
    assert!(
        !text.contains("Failed to write event"),
        "{}",
        tail(&text, 40)
    );
    assert!(
        !text.contains("Failed to patch pod status"),
        "{}",
        tail(&text, 40)
    );
    k.cleanup();
    let _ = nodes.delete(MIRROR_NODE, &DeleteParams::default()).await;
}

const RESTART_NODE: &str = "krs-mirror-restart";
const RESTART_STATIC: &str = "krs-st";

fn mirror_hash(p: &Pod) -> Option<String> {
    p.metadata
        .annotations
        .as_ref()?
        .get(MIRROR_ANNOTATION)
        .cloned()
}

/// Waits for the running mirror pod `name` other than `not_uid`; returns it.
async fn running_mirror(pods: &Api<Pod>, name: &str, not_uid: Option<&str>) -> Pod {
    wait_async(Duration::from_secs(90), "a running mirror pod", || async {
        let p = pods.get_opt(name).await.ok().flatten()?;
        (running(&p) && p.metadata.uid.as_deref() != not_uid).then_some(p)
    })
    .await
}

/// The upstream kubelet's pod cleanup deletes every mirror pod of its node whose static pod is
/// gone, and replaces one whose static pod changed, also right after a start; so must ours,
/// after a SIGTERM and after a SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn mirror_pods_of_static_pods_removed_while_down_go_after_a_restart() {
    let _guard = serial();
    let client = admin_client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let name = format!("{RESTART_STATIC}-{RESTART_NODE}");
    let _ = pods
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await;
    let script =
        |tag: &str| format!("trap 'exit 0' TERM; echo {tag}; while true; do sleep 1; done");

    let mut k = Kubelet::new("mirror-restart");
    for crash in [false, true] {
        let how = if crash { "SIGKILL" } else { "SIGTERM" };
        k.write_manifest(
            "st.yaml",
            &pod_yaml(RESTART_STATIC, "Always", 2, &script("v1")),
        );
        k.start_as_node(RESTART_NODE, &[]);
        let mirror = running_mirror(&pods, &name, None).await;
        let uid = mirror.metadata.uid.clone().unwrap();
        if crash {
            k.kill()
        } else {
            k.stop()
        }
        k.remove_manifest("st.yaml");

        let started = Instant::now();
        k.start_as_node(RESTART_NODE, &[]);
        wait_async(
            Duration::from_secs(60),
            &format!("the orphaned mirror pod deleted after a {how}"),
            || async {
                let p = pods.get_opt(&name).await.ok()?;
                p.is_none_or(|p| p.metadata.uid.as_deref() != Some(&uid))
                    .then_some(())
            },
        )
        .await;
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(15),
            "the orphaned mirror pod went {took:?} after the start ({how})"
        );
        let log = k.log();
        assert!(
            log.contains("Stale mirror pod deleted"),
            "{}",
            tail(&log, 40)
        );
        k.stop();
    }

    // Changed while the kubelet was down: the old mirror pod is replaced by one for the new
    // version of the static pod.
    k.write_manifest(
        "st.yaml",
        &pod_yaml(RESTART_STATIC, "Always", 2, &script("v1")),
    );
    k.start_as_node(RESTART_NODE, &[]);
    let old = running_mirror(&pods, &name, None).await;
    k.stop();
    k.write_manifest(
        "st.yaml",
        &pod_yaml(RESTART_STATIC, "Always", 2, &script("v2")),
    );
    k.start_as_node(RESTART_NODE, &[]);
    let new = running_mirror(&pods, &name, old.metadata.uid.as_deref()).await;
    assert_ne!(mirror_hash(&new), mirror_hash(&old), "{new:?}");
    assert_eq!(
        mirror_hash(&new).as_deref(),
        new.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubernetes.io/config.hash"))
            .map(String::as_str)
    );

    k.remove_manifest("st.yaml");
    wait_async(
        Duration::from_secs(60),
        "the mirror pod deleted",
        || async {
            pods.get_opt(&name)
                .await
                .ok()
                .and_then(|p| p.is_none().then_some(()))
        },
    )
    .await;
    k.cleanup();
    let _ = nodes.delete(RESTART_NODE, &DeleteParams::default()).await;
}
