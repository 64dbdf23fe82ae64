//! The API server source: every pod bound to this node (`spec.nodeName`), listed and then
//! watched, resuming from the last resourceVersion and relisting when the watch expires.
//! Mirror pods are left out: they are the API server's copies of static pods, not pods to run.

use std::collections::HashMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{API_SOURCE, CONFIG_MIRROR_ANNOTATION, SourceUpdate, annotation, pod_uid};

/// Server-side watch timeout; the client read timeout is longer.
const WATCH_TIMEOUT_SECS: u32 = 290;
const LIST_TIMEOUT: Duration = Duration::from_secs(60);
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
enum WatchError {
    #[error("list pods: {0}")]
    List(#[source] kube::Error),
    #[error("list pods timed out")]
    ListTimeout,
    #[error("watch pods: {0}")]
    Watch(#[source] kube::Error),
    /// The resourceVersion is too old: relist.
    #[error("watch expired")]
    Gone,
}

fn wanted(pod: &Pod) -> bool {
    annotation(pod, CONFIG_MIRROR_ANNOTATION).is_none() && !pod_uid(pod).is_empty()
}

struct ApiSource {
    api: Api<Pod>,
    selector: String,
    pods: HashMap<String, Pod>,
    tx: mpsc::Sender<SourceUpdate>,
}

impl ApiSource {
    async fn send(&self) -> bool {
        let mut pods: Vec<Pod> = self.pods.values().cloned().collect();
        pods.sort_by(|a, b| pod_uid(a).cmp(pod_uid(b)));
        self.tx
            .send(SourceUpdate {
                source: API_SOURCE,
                pods,
            })
            .await
            .is_ok()
    }

    async fn list(&mut self) -> Result<String, WatchError> {
        let params = ListParams::default().fields(&self.selector);
        let list = tokio::time::timeout(LIST_TIMEOUT, self.api.list(&params))
            .await
            .map_err(|_| WatchError::ListTimeout)?
            .map_err(WatchError::List)?;
        self.pods = list
            .items
            .into_iter()
            .filter(wanted)
            .map(|p| (pod_uid(&p).to_string(), p))
            .collect();
        Ok(list.metadata.resource_version.unwrap_or_default())
    }

    /// Applies one event; returns whether the set changed.
    fn apply(&mut self, event: WatchEvent<Pod>, rv: &mut String) -> Result<bool, WatchError> {
        let (pod, deleted) = match event {
            WatchEvent::Added(p) | WatchEvent::Modified(p) => (p, false),
            WatchEvent::Deleted(p) => (p, true),
            WatchEvent::Bookmark(b) => {
                *rv = b.metadata.resource_version;
                return Ok(false);
            }
            WatchEvent::Error(e) if e.code == 410 => return Err(WatchError::Gone),
            WatchEvent::Error(e) => {
                warn!(code = e.code, message = %e.message, "Pod watch reported an error");
                return Err(WatchError::Gone);
            }
        };
        if let Some(v) = &pod.metadata.resource_version {
            rv.clone_from(v);
        }
        let uid = pod_uid(&pod).to_string();
        Ok(if deleted || !wanted(&pod) {
            self.pods.remove(&uid).is_some()
        } else {
            self.pods.insert(uid, pod.clone()).as_ref() != Some(&pod)
        })
    }

    /// One list followed by watches until the watch expires or fails.
    async fn run_once(&mut self, cancel: &CancellationToken) -> Result<(), WatchError> {
        let mut rv = self.list().await?;
        if !self.send().await {
            return Ok(());
        }
        loop {
            let params = WatchParams::default()
                .fields(&self.selector)
                .timeout(WATCH_TIMEOUT_SECS);
            let stream = self
                .api
                .watch(&params, &rv)
                .await
                .map_err(WatchError::Watch)?;
            let mut stream = Box::pin(stream);
            let opened = std::time::Instant::now();
            loop {
                let next = tokio::select! {
                    _ = cancel.cancelled() => return Ok(()),
                    n = stream.try_next() => n.map_err(WatchError::Watch)?,
                };
                let Some(event) = next else { break };
                let mut changed = self.apply(event, &mut rv)?;
                // A burst (a Deployment scaling up) becomes one update.
                while let Some(Some(more)) = futures::FutureExt::now_or_never(stream.next()) {
                    changed |= self.apply(more.map_err(WatchError::Watch)?, &mut rv)?;
                }
                if changed && !self.send().await {
                    return Ok(());
                }
            }
            // A watch the server closes at once would otherwise be reopened in a tight loop;
            // hand it to the caller, which waits before starting over.
            if opened.elapsed() < RETRY_MIN {
                return Ok(());
            }
            debug!(%rv, "Pod watch ended, resuming");
        }
    }
}

pub async fn run_api_source(
    client: kube::Client,
    node_name: String,
    tx: mpsc::Sender<SourceUpdate>,
    cancel: CancellationToken,
) {
    let mut source = ApiSource {
        api: Api::all(client),
        selector: format!("spec.nodeName={node_name}"),
        pods: HashMap::new(),
        tx,
    };
    info!(node = %node_name, "Watching pods bound to this node");
    let mut delay = RETRY_MIN;
    loop {
        let result = tokio::select! {
            _ = cancel.cancelled() => return,
            r = source.run_once(&cancel) => r,
        };
        if cancel.is_cancelled() || source.tx.is_closed() {
            return;
        }
        match result {
            Ok(()) | Err(WatchError::Gone) => {
                // Relisting is normal (an expired resourceVersion) but never back-to-back.
                delay = RETRY_MIN;
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(RETRY_MIN) => {}
                }
            }
            Err(err) => {
                warn!(%err, retry_in = ?delay, "Pod source lost the API server");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(RETRY_MAX);
            }
        }
    }
}
