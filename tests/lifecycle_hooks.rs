//! Lifecycle hooks through the real API server and containerd: postStart and preStop as exec
//! hooks (writing into a hostPath) and as httpGet hooks reaching a server in another pod; the
//! preStop hook runs when the pod is deleted, before the container is stopped. A failing
//! postStart hook has the container killed with upstream's `FailedPostStartHook` event.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

const NODE: &str = "krs-hooks-node";
const HANDLER: &str = "krs-hook-handler";
const HOOKED: &str = "krs-hooked";
const BAD: &str = "krs-bad-hook";

fn container_log(k: &Kubelet, pod: &Pod, container: &str) -> String {
    let meta = &pod.metadata;
    let dir = k.pod_logs_dir.join(format!(
        "default_{}_{}/{container}",
        meta.name.as_deref().unwrap_or_default(),
        meta.uid.as_deref().unwrap_or_default()
    ));
    std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .collect()
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    wait_async(
        Duration::from_secs(60),
        &format!("{name} to run"),
        || async {
            let p = pods.get(name).await.ok()?;
            first_running(&p).then_some(p)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_start_and_pre_stop_hooks() {
    let (client, pods) = default_pods(&[]).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let gone = DeleteParams::default().grace_period(0);
    for p in [HANDLER, HOOKED, BAD] {
        let _ = pods.delete(p, &gone).await;
    }

    let mut k = Kubelet::started_as_node("lifecycle-hooks", NODE);
    let hooks_dir = k.dir.path().join("hooks");
    std::fs::create_dir_all(&hooks_dir).unwrap();

    let handler: Pod = api_pod(json!({
        "metadata": {"name": HANDLER},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "handler",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "mkdir -p /www && touch /www/poststart && exec httpd -f -vv -p 8080 -h /www"],
            }],
        },
    }));
    create_pod(&pods, &handler).await;
    let handler = running(&pods, HANDLER).await;
    let handler_ip = handler.status.as_ref().unwrap().pod_ip.clone().unwrap();

    let hooked: Pod = api_pod(json!({
        "metadata": {"name": HOOKED},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 20,
            "containers": [
                {
                    "name": "http-hooks",
                    "image": BUSYBOX,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                    "lifecycle": {
                        "postStart": {"httpGet": {"host": handler_ip, "port": 8080, "path": "/poststart"}},
                        // Answered 404: any answer will do.
                        "preStop": {"httpGet": {"host": handler_ip, "port": 8080, "path": "/prestop"}},
                    },
                },
                {
                    "name": "exec-hooks",
                    "image": BUSYBOX,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                    "volumeMounts": [{"name": "hooks", "mountPath": "/hooks"}],
                    "lifecycle": {
                        "postStart": {"exec": {"command": ["sh", "-c", "echo started > /hooks/poststart"]}},
                        "preStop": {"exec": {"command": ["sh", "-c", "echo stopping > /hooks/prestop"]}},
                    },
                },
            ],
            "volumes": [{"name": "hooks", "hostPath": {"path": hooks_dir.to_string_lossy()}}],
        },
    }));
    create_pod(&pods, &hooked).await;
    running(&pods, HOOKED).await;
    assert_eq!(
        std::fs::read_to_string(hooks_dir.join("poststart")).unwrap(),
        "started\n",
        "the exec postStart hook ran before the container counted as running"
    );
    let handler_log = container_log(&k, &handler, "handler");
    assert!(handler_log.contains("url:/poststart"), "{handler_log}");
    assert!(!hooks_dir.join("prestop").exists());

    // Deleting the pod runs the preStop hooks first.
    pods.delete(HOOKED, &DeleteParams::default()).await.unwrap();
    wait_async(Duration::from_secs(60), "the hooked pod to go", || async {
        pods.get_opt(HOOKED).await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(hooks_dir.join("prestop")).unwrap(),
        "stopping\n"
    );
    let handler_log = container_log(&k, &handler, "handler");
    assert!(handler_log.contains("url:/prestop"), "{handler_log}");

    // A postStart hook that fails kills its container, which is then restarted.
    let mut bad = bound_sleeper(BAD, NODE);
    bad["spec"]["containers"][0]["lifecycle"] =
        json!({"postStart": {"exec": {"command": ["sh", "-c", "echo nope >&2; exit 3"]}}});
    let bad = api_pod(bad);
    create_pod(&pods, &bad).await;
    let message = wait_async(Duration::from_secs(60), "FailedPostStartHook", || async {
        let list = events
            .list(&ListParams::default().fields(&format!(
                "involvedObject.name={BAD},reason=FailedPostStartHook"
            )))
            .await
            .ok()?;
        list.items.into_iter().next().and_then(|e| e.message)
    })
    .await;
    assert!(
        message.starts_with(
            "Exec lifecycle hook ([sh -c echo nope >&2; exit 3]) for Container \"main\" in Pod \"krs-bad-hook_default("
        ),
        "{message}"
    );
    assert!(
        message
            .contains("failed - error: command 'sh -c echo nope >&2; exit 3' exited with 3: nope"),
        "{message}"
    );
    wait_async(
        Duration::from_secs(60),
        "the container to be restarted",
        || async {
            let p = pods.get(BAD).await.ok()?;
            (first_status(&p)?.restart_count >= 1).then_some(())
        },
    )
    .await;

    for p in [HANDLER, BAD] {
        let _ = pods.delete(p, &gone).await;
    }
    wait_async(Duration::from_secs(60), "the pods to go", || async {
        let a = pods.get_opt(HANDLER).await.ok()?.is_none();
        let b = pods.get_opt(BAD).await.ok()?.is_none();
        (a && b).then_some(())
    })
    .await;
    k.cleanup();
}
