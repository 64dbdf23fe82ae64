//! Secrets and configMaps as watches keep them, for the pods that name them: upstream's
//! watch-based object manager (its default `configMapAndSecretChangeDetectionStrategy`).
//! A pod's first read of an object starts a watch on that one object (a field selector on its
//! name, which the Node authorizer allows for the objects of the node's own pods); later reads
//! (every volume refresh and container restart among them) send no request, so a slow API
//! server cannot hold a restart. The watch ends when the last pod that read the object is
//! forgotten: what is kept is bounded by the pods on the node.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::debug;

#[derive(Debug, thiserror::Error)]
pub enum WatchedError {
    /// The watch has not listed the object yet.
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
    /// The watch's last list failed (and is retried with backoff).
    #[error("{0}")]
    Api(String),
    #[error("invalid object name {0:?}")]
    InvalidName(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    name: String,
}

/// What the watch knows of its object.
#[derive(Debug)]
enum State<K> {
    /// Not listed yet; the error of the last failed list, if any.
    Syncing(Option<String>),
    Found(Arc<K>),
    Missing,
}

struct Entry<K> {
    /// The pods (by UID) that read the object.
    users: HashSet<String>,
    state: watch::Receiver<State<K>>,
    stop: CancellationToken,
}

/// One kind of namespaced object, each watched while a pod uses it.
pub struct Watched<K> {
    client: kube::Client,
    entries: Mutex<HashMap<Key, Entry<K>>>,
}

/// A name the API server could hold (a DNS subdomain), so that it is safe in a field selector.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

impl<K> Watched<K>
where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    pub fn new(client: kube::Client) -> Self {
        Watched {
            client,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Entry<K>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The object as the watch has it now, `None` when it does not exist; `user` (a pod UID)
    /// keeps the watch until [`Watched::forget`]. Waits up to `wait` for a new watch's first
    /// list.
    pub async fn get(
        &self,
        user: &str,
        namespace: &str,
        name: &str,
        wait: Duration,
    ) -> Result<Option<Arc<K>>, WatchedError> {
        if !valid_name(name) || !valid_name(namespace) {
            return Err(WatchedError::InvalidName(format!("{namespace}/{name}")));
        }
        let mut state = self.subscribe(user, namespace, name);
        let settled =
            tokio::time::timeout(wait, state.wait_for(|s| !matches!(s, State::Syncing(None))))
                .await;
        let Ok(Ok(state)) = settled else {
            return Err(WatchedError::TimedOut(wait));
        };
        match &*state {
            State::Found(object) => Ok(Some(object.clone())),
            State::Missing => Ok(None),
            State::Syncing(Some(e)) => Err(WatchedError::Api(e.clone())),
            State::Syncing(None) => Err(WatchedError::TimedOut(wait)),
        }
    }

    /// Adds `user` to the object's readers, starting its watch when it has none.
    fn subscribe(&self, user: &str, namespace: &str, name: &str) -> watch::Receiver<State<K>> {
        let key = Key {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let mut entries = self.lock();
        // A watch whose task has ended (the runtime shutting down) is started again.
        if entries
            .get(&key)
            .is_some_and(|e| e.state.has_changed().is_err())
        {
            entries.remove(&key);
        }
        let entry = entries.entry(key).or_insert_with_key(|key| {
            let (tx, state) = watch::channel(State::Syncing(None));
            let stop = CancellationToken::new();
            let api = Api::namespaced(self.client.clone(), &key.namespace);
            tokio::spawn(follow(api, key.name.clone(), tx, stop.clone()));
            Entry {
                users: HashSet::new(),
                state,
                stop,
            }
        });
        entry.users.insert(user.to_string());
        entry.state.clone()
    }

    /// Drops `user` from every object's readers; an object nobody reads is no longer watched.
    pub fn forget(&self, user: &str) {
        self.lock().retain(|_, entry| {
            entry.users.remove(user);
            if entry.users.is_empty() {
                entry.stop.cancel();
            }
            !entry.users.is_empty()
        });
    }

    /// How many objects are watched now.
    #[cfg(test)]
    fn watched(&self) -> usize {
        self.lock().len()
    }
}

impl<K> Drop for Watched<K> {
    fn drop(&mut self) {
        let entries = self.entries.get_mut().unwrap_or_else(|e| e.into_inner());
        for entry in entries.values() {
            entry.stop.cancel();
        }
    }
}

/// What one watch event makes of the state; `listed` holds the object between a relist's
/// start and its end.
fn apply_event<K>(event: Event<K>, listed: &mut Option<K>) -> Option<State<K>> {
    match event {
        Event::Init => {
            *listed = None;
            None
        }
        Event::InitApply(object) => {
            *listed = Some(object);
            None
        }
        Event::InitDone => Some(match listed.take() {
            Some(object) => State::Found(Arc::new(object)),
            None => State::Missing,
        }),
        Event::Apply(object) => Some(State::Found(Arc::new(object))),
        Event::Delete(_) => Some(State::Missing),
    }
}

/// Keeps `tx` equal to the object until stopped; the watcher relists on its own after errors
/// (with kube's backoff), and until the first list succeeds the last error is what readers get.
async fn follow<K>(api: Api<K>, name: String, tx: watch::Sender<State<K>>, stop: CancellationToken)
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = pin!(watcher(api, config).default_backoff());
    let mut listed = None;
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => return,
            n = events.next() => n,
        };
        match next {
            None => return,
            Some(Err(e)) => {
                debug!(object = %name, err = %e, "Watching an object a pod uses");
                tx.send_if_modified(|s| match s {
                    State::Syncing(_) => {
                        *s = State::Syncing(Some(e.to_string()));
                        true
                    }
                    State::Found(_) | State::Missing => false,
                });
            }
            Some(Ok(event)) => {
                if let Some(state) = apply_event(event, &mut listed) {
                    tx.send_replace(state);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;

    fn secret(name: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.to_string());
        s
    }

    #[test]
    fn a_relist_settles_on_what_it_listed() {
        let mut listed = None;
        assert!(apply_event(Event::Init, &mut listed).is_none());
        assert!(apply_event(Event::InitApply(secret("a")), &mut listed).is_none());
        assert!(matches!(
            apply_event(Event::InitDone, &mut listed),
            Some(State::Found(s)) if s.metadata.name.as_deref() == Some("a")
        ));
        // A relist that finds nothing: the object is gone.
        assert!(apply_event(Event::<Secret>::Init, &mut listed).is_none());
        assert!(matches!(
            apply_event(Event::<Secret>::InitDone, &mut listed),
            Some(State::Missing)
        ));
        assert!(matches!(
            apply_event(Event::Apply(secret("a")), &mut listed),
            Some(State::Found(_))
        ));
        assert!(matches!(
            apply_event(Event::Delete(secret("a")), &mut listed),
            Some(State::Missing)
        ));
    }

    #[test]
    fn names_that_cannot_be_objects_are_refused() {
        assert!(valid_name("default-token-x7q2z"));
        assert!(valid_name("a.b-c"));
        assert!(!valid_name(""));
        assert!(!valid_name("a,metadata.namespace=b"));
        assert!(!valid_name("Upper"));
        assert!(!valid_name(&"a".repeat(254)));
    }

    #[tokio::test]
    async fn a_watch_lives_while_a_pod_reads_its_object() {
        // An API server that takes connections and never answers: the first list never ends.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", silent.local_addr().unwrap());
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let secrets: Watched<Secret> = Watched::new(client);
        let wait = Duration::from_millis(200);
        let got = secrets.get("pod-a", "ns", "token", wait).await;
        assert!(matches!(got, Err(WatchedError::TimedOut(_))), "{got:?}");
        let _ = secrets.get("pod-b", "ns", "token", wait).await;
        let _ = secrets.get("pod-b", "ns", "other", wait).await;
        assert_eq!(
            secrets.watched(),
            2,
            "one watch per object, whoever reads it"
        );
        let bad = secrets.get("pod-b", "ns", "x,y=z", wait).await;
        assert!(matches!(bad, Err(WatchedError::InvalidName(_))), "{bad:?}");
        assert_eq!(secrets.watched(), 2);
        secrets.forget("pod-a");
        assert_eq!(secrets.watched(), 2, "pod-b still reads token");
        secrets.forget("pod-b");
        assert_eq!(secrets.watched(), 0);
    }
}
