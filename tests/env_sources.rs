//! Env values from configMaps and secrets, through the real API server: `configMapKeyRef`,
//! `secretKeyRef` and `envFrom` with a prefix. A container whose non-optional configMap does
//! not exist yet waits in `CreateContainerConfigError` naming it, and starts once it exists.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const NODE: &str = "krs-env-node";
const POD: &str = "krs-env-sources";
const CONFIG_MAP: &str = "krs-env-cm";
const SECRET: &str = "krs-env-secret";

fn waiting(p: &Pod) -> Option<(String, String)> {
    let w = first_state(p)?.waiting.clone()?;
    Some((w.reason.unwrap_or_default(), w.message.unwrap_or_default()))
}

fn terminated_message(p: &Pod) -> Option<String> {
    first_state(p)?.terminated.as_ref()?.message.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_comes_from_config_maps_and_secrets() {
    let (client, pods) = default_pods(&[]).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let gone = DeleteParams::default().grace_period(0);
    let _ = pods.delete(POD, &gone).await;
    let _ = config_maps
        .delete(CONFIG_MAP, &DeleteParams::default())
        .await;
    let _ = secrets.delete(SECRET, &DeleteParams::default()).await;

    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": SECRET},
        "stringData": {"password": "s3cret", "user": "alice"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let mut k = Kubelet::started_as_node("env-sources", NODE);
    let pod: Pod = api_pod(json!({
        "metadata": {"name": POD},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "env | sort > /dev/termination-log"],
                "envFrom": [
                    {"configMapRef": {"name": CONFIG_MAP}, "prefix": "CM_"},
                    {"secretRef": {"name": SECRET}},
                ],
                "env": [
                    {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": CONFIG_MAP, "key": "color"}}},
                    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "password"}}},
                    {"name": "OPTIONAL", "valueFrom": {"configMapKeyRef": {"name": CONFIG_MAP, "key": "absent", "optional": true}}},
                    {"name": "COMBINED", "value": "$(FROM_CM)-$(user)"},
                ],
            }],
        },
    }));
    create_pod(&pods, &pod).await;

    // The configMap does not exist yet: the container waits, and the reason names it.
    let (reason, message) = wait_async(
        Duration::from_secs(60),
        "CreateContainerConfigError",
        || async {
            waiting(&pods.get(POD).await.ok()?).filter(|(r, _)| r == "CreateContainerConfigError")
        },
    )
    .await;
    assert_eq!(reason, "CreateContainerConfigError");
    assert!(message.contains(CONFIG_MAP), "{message}");

    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": CONFIG_MAP},
        "data": {"color": "blue", "size": "xl", "1bad": "skipped?"},
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();

    let env = wait_async(Duration::from_secs(90), "the container's env", || async {
        terminated_message(&pods.get(POD).await.ok()?)
    })
    .await;
    let lines: Vec<&str> = env.lines().collect();
    for want in [
        "CM_color=blue",
        "CM_size=xl",
        // The prefix makes "1bad" a valid name (sh passes on only names it could set itself).
        "CM_1bad=skipped?",
        "password=s3cret",
        "user=alice",
        "FROM_CM=blue",
        "FROM_SECRET=s3cret",
        "COMBINED=blue-alice",
    ] {
        assert!(lines.contains(&want), "{want} missing from:\n{env}");
    }
    assert!(
        !lines.iter().any(|l| l.starts_with("OPTIONAL=")),
        "an optional missing key sets nothing:\n{env}"
    );

    // Without the prefix, "1bad" is skipped with upstream's event.
    let _ = pods.delete(POD, &gone).await;
    wait_async(Duration::from_secs(60), "the pod to go", || async {
        pods.get_opt(POD).await.ok()?.is_none().then_some(())
    })
    .await;
    let mut unprefixed = pod.clone();
    unprefixed.spec.as_mut().unwrap().containers[0]
        .env_from
        .as_mut()
        .unwrap()[0]
        .prefix = None;
    create_pod(&pods, &unprefixed).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let message = wait_async(
        Duration::from_secs(60),
        "InvalidEnvironmentVariableNames",
        || async {
            let list = events
                .list(&ListParams::default().fields(&format!("involvedObject.name={POD}")))
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("InvalidEnvironmentVariableNames"))
                .and_then(|e| e.message)
        },
    )
    .await;
    assert_eq!(
        message,
        format!(
            "Keys [1bad] from the EnvFrom configMap default/{CONFIG_MAP} were skipped since they are considered invalid environment variable names."
        )
    );

    let _ = pods.delete(POD, &gone).await;
    let _ = config_maps
        .delete(CONFIG_MAP, &DeleteParams::default())
        .await;
    let _ = secrets.delete(SECRET, &DeleteParams::default()).await;
    k.cleanup();
}
