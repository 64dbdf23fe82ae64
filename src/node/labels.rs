//! The node's labels as the API server has them now, for pod admission: a user may label the
//! node after it registered (`kubectl label node`) and then schedule pods that select that
//! label. Upstream reads them from its node informer; this is the same watch on one object.

use std::collections::BTreeMap;
use std::pin::pin;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// The labels an event carries, if it is about the node's current state.
fn labels_of(event: &Event<Node>) -> Option<BTreeMap<String, String>> {
    match event {
        Event::Apply(node) | Event::InitApply(node) => {
            Some(node.metadata.labels.clone().unwrap_or_default())
        }
        Event::Delete(_) | Event::Init | Event::InitDone => None,
    }
}

/// Starts the watch: the node's labels, `initial` until it has read them, and whether it has.
pub fn spawn_watch(
    client: kube::Client,
    node_name: String,
    initial: BTreeMap<String, String>,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> (
    watch::Receiver<BTreeMap<String, String>>,
    watch::Receiver<bool>,
) {
    let (labels_tx, labels) = watch::channel(initial);
    let (synced_tx, synced) = watch::channel(false);
    tasks.background(
        "node label watch",
        run_label_watch(
            client,
            node_name,
            labels_tx,
            synced_tx,
            cancel.child_token(),
        ),
    );
    (labels, synced)
}

/// Keeps `tx` equal to the node's labels until cancelled, and sets `synced` once the first list
/// is done (the node is read, or it does not exist yet and the flags' labels are all there
/// is); the watcher resumes and relists on its own after errors (with kube's backoff).
pub async fn run_label_watch(
    client: kube::Client,
    node_name: String,
    tx: watch::Sender<BTreeMap<String, String>>,
    synced: watch::Sender<bool>,
    cancel: CancellationToken,
) {
    let api: Api<Node> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    let mut events = pin!(watcher(api, config).default_backoff());
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => return,
            n = events.next() => n,
        };
        match next {
            None => return,
            Some(Err(e)) => debug!(err = %e, "Watching the node's labels"),
            Some(Ok(event)) => {
                if matches!(event, Event::InitDone) && !*synced.borrow() {
                    debug!("The node's labels are read");
                    synced.send_replace(true);
                }
                if let Some(labels) = labels_of(&event) {
                    tx.send_if_modified(|current| {
                        let changed = *current != labels;
                        *current = labels;
                        changed
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_object_counts() {
        let mut node = Node::default();
        node.metadata.labels = Some([("color".to_string(), "blue".to_string())].into());
        assert_eq!(
            labels_of(&Event::Apply(node.clone())).unwrap()["color"],
            "blue"
        );
        assert!(labels_of(&Event::InitApply(node.clone())).is_some());
        assert!(labels_of(&Event::Delete(node)).is_none());
        assert!(labels_of(&Event::InitDone).is_none());
    }
}
