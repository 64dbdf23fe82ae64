//! The node's labels as the API server has them now, for pod admission: a user may label the
//! node after it registered (`kubectl label node`) and then schedule pods that select that
//! label. Upstream reads them from its node informer; this is the same watch on one object.
//! The watch may lag a label added just before a pod that selects it (the pods' watch and the
//! node's are separate streams), so admission can also ask for a fresh read of the node before
//! it rejects a pod for its labels; upstream has no such second look.

use std::collections::BTreeMap;
use std::pin::pin;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// How long a fresh read of the node may take before admission goes on with the watched labels.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Fresh reads of the node's labels on demand (the sync loop's side).
pub struct FreshLabels {
    /// Raised to a request's number to ask for a read that starts after the request.
    pub ask: watch::Sender<u64>,
    /// The number of the last request a read served, and what it read (None: it failed).
    pub read: watch::Receiver<FreshRead>,
}

/// A request's number and the labels the read made for it found.
pub type FreshRead = (u64, Option<BTreeMap<String, String>>);

/// The labels the API server has for the node now, if it answers in time.
async fn read_labels(api: &Api<Node>, node_name: &str) -> Option<BTreeMap<String, String>> {
    match tokio::time::timeout(READ_TIMEOUT, api.get_opt(node_name)).await {
        Ok(Ok(Some(node))) => Some(node.metadata.labels.unwrap_or_default()),
        Ok(Ok(None)) => None,
        Ok(Err(e)) => {
            debug!(err = %e, "Reading the node's labels");
            None
        }
        Err(_) => {
            debug!(timeout = ?READ_TIMEOUT, "Reading the node's labels timed out");
            None
        }
    }
}

/// The labels an event carries, if it is about the node's current state.
fn labels_of(event: &Event<Node>) -> Option<BTreeMap<String, String>> {
    match event {
        Event::Apply(node) | Event::InitApply(node) => {
            Some(node.metadata.labels.clone().unwrap_or_default())
        }
        Event::Delete(_) | Event::Init | Event::InitDone => None,
    }
}

/// The node's labels as the watch has them, and whether it has read them yet.
pub struct WatchedLabels {
    pub labels: watch::Receiver<BTreeMap<String, String>>,
    pub synced: watch::Receiver<bool>,
    pub fresh: FreshLabels,
}

/// Starts the watch: the node's labels, `initial` until it has read them, and whether it has;
/// the same task serves the fresh reads.
pub fn spawn_watch(
    client: kube::Client,
    node_name: String,
    initial: BTreeMap<String, String>,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> WatchedLabels {
    let (labels_tx, labels) = watch::channel(initial);
    let (synced_tx, synced) = watch::channel(false);
    let (ask, asked) = watch::channel(0);
    let (read_tx, read) = watch::channel((0, None));
    tasks.background(
        "node label watch",
        run_label_watch(
            client,
            node_name,
            LabelSenders {
                labels: labels_tx,
                synced: synced_tx,
                asked,
                read: read_tx,
            },
            cancel.child_token(),
        ),
    );
    WatchedLabels {
        labels,
        synced,
        fresh: FreshLabels { ask, read },
    }
}

/// The watch task's ends of the channels `spawn_watch` returns.
pub struct LabelSenders {
    pub labels: watch::Sender<BTreeMap<String, String>>,
    pub synced: watch::Sender<bool>,
    pub asked: watch::Receiver<u64>,
    pub read: watch::Sender<FreshRead>,
}

/// Keeps `labels` equal to the node's labels until cancelled, and sets `synced` once the first list
/// is done (the node is read, or it does not exist yet and the flags' labels are all there
/// is); the watcher resumes and relists on its own after errors (with kube's backoff). A
/// request for a fresh read is served with one GET (a quorum read: it sees every write that
/// finished before it).
pub async fn run_label_watch(
    client: kube::Client,
    node_name: String,
    mut senders: LabelSenders,
    cancel: CancellationToken,
) {
    let api: Api<Node> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    let mut events = pin!(watcher(api.clone(), config).default_backoff());
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => return,
            Ok(()) = senders.asked.changed() => {
                let asked = *senders.asked.borrow_and_update();
                let labels = tokio::select! {
                    _ = cancel.cancelled() => return,
                    l = read_labels(&api, &node_name) => l,
                };
                senders.read.send_replace((asked, labels));
                continue;
            }
            n = events.next() => n,
        };
        match next {
            None => return,
            Some(Err(e)) => debug!(err = %e, "Watching the node's labels"),
            Some(Ok(event)) => {
                if matches!(event, Event::InitDone) && !*senders.synced.borrow() {
                    debug!("The node's labels are read");
                    senders.synced.send_replace(true);
                }
                if let Some(labels) = labels_of(&event) {
                    senders.labels.send_if_modified(|current| {
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
