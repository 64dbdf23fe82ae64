//! Kubernetes events about pods and the node, with upstream's reasons. Every event is logged;
//! in API server mode it is also handed to a background task that creates core/v1 Events,
//! folding repeats into a count and pacing itself with a token bucket like upstream's
//! eventRecordQPS/eventBurst. Handing over never waits: a full queue drops the event.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error("API call timed out")]
    Timeout,
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// The object an event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InvolvedObject {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl InvolvedObject {
    fn of(kind: &'static str, meta: &ObjectMeta) -> Self {
        InvolvedObject {
            kind,
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
        }
    }
}

/// One event as the recorder saw it.
#[derive(Clone, Debug)]
pub struct EventRecord {
    pub object: InvolvedObject,
    pub kind: EventType,
    pub reason: String,
    pub message: String,
    pub at: jiff::Timestamp,
}

/// How many events may wait for the API server before new ones are dropped.
const QUEUE: usize = 1000;
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Repeats of one event within this long bump the existing object's count.
const AGGREGATE_WINDOW: Duration = Duration::from_secs(600);
/// Upstream's event cache size.
const CACHE_ENTRIES: usize = 4096;

#[derive(Clone, Debug, Default)]
pub struct EventRecorder {
    sink: Option<mpsc::Sender<EventRecord>>,
}

impl EventRecorder {
    /// A recorder that also queues every event on `sink`.
    pub fn with_sink(sink: mpsc::Sender<EventRecord>) -> Self {
        EventRecorder { sink: Some(sink) }
    }

    pub fn pod(&self, pod: &Pod, kind: EventType, reason: &str, message: &str) {
        self.record(
            InvolvedObject::of("Pod", &pod.metadata),
            kind,
            reason,
            message,
        );
    }

    /// An event about a PersistentVolumeClaim (its volume grew, or could not).
    pub fn claim(
        &self,
        claim: &k8s_openapi::api::core::v1::PersistentVolumeClaim,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        self.record(
            InvolvedObject::of("PersistentVolumeClaim", &claim.metadata),
            kind,
            reason,
            message,
        );
    }

    /// An event about the node itself; its UID is optional, as upstream's node reference
    /// often carries the node name in its place.
    pub fn node(
        &self,
        name: &str,
        uid: Option<&str>,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        self.record(
            InvolvedObject {
                kind: "Node",
                namespace: String::new(),
                name: name.to_string(),
                uid: uid.unwrap_or_default().to_string(),
            },
            kind,
            reason,
            message,
        );
    }

    fn record(&self, object: InvolvedObject, kind: EventType, reason: &str, message: &str) {
        let shown = if object.namespace.is_empty() {
            object.name.clone()
        } else {
            format!("{}/{}", object.namespace, object.name)
        };
        match kind {
            EventType::Normal => {
                tracing::info!(target: "events", object = shown, kind = object.kind, reason, message, "Event occurred")
            }
            EventType::Warning => {
                tracing::warn!(target: "events", object = shown, kind = object.kind, reason, message, "Event occurred")
            }
        }
        let Some(sink) = &self.sink else { return };
        let record = EventRecord {
            object,
            kind,
            reason: reason.to_string(),
            message: message.to_string(),
            at: jiff::Timestamp::now(),
        };
        if let Err(err) = sink.try_send(record) {
            debug!(target: "events", reason, %err, "Event dropped; the queue to the API server is full");
        }
    }
}

/// A recorder feeding a sink task that creates the events in the API server; run the future
/// until `cancel` fires. `qps` of 0 means no limit, as upstream.
pub fn start(
    client: kube::Client,
    host: String,
    qps: i32,
    burst: i32,
    cancel: CancellationToken,
) -> (EventRecorder, impl Future<Output = ()> + Send + 'static) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let sink = EventSink {
        client,
        host,
        limiter: TokenBucket::new(qps as f64, burst.max(1) as f64, Instant::now()),
        cache: Aggregator::new(CACHE_ENTRIES, AGGREGATE_WINDOW),
    };
    (EventRecorder::with_sink(tx), sink.run(rx, cancel))
}

/// The event settings of the kubelet configuration.
#[derive(Clone, Debug)]
pub struct EventSettings {
    pub node_name: String,
    pub qps: i32,
    pub burst: i32,
}

impl From<&crate::config::Settings> for EventSettings {
    fn from(settings: &crate::config::Settings) -> Self {
        EventSettings {
            node_name: settings.node_name(),
            qps: settings.config.event_record_qps,
            burst: settings.config.event_burst,
        }
    }
}

/// The kubelet's recorder: with an API server, events also go to a sink task in `tasks`;
/// without one, they are only logged.
pub fn spawn(
    client: Option<&kube::Client>,
    settings: EventSettings,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> EventRecorder {
    let Some(client) = client else {
        return EventRecorder::default();
    };
    let (recorder, sink) = start(
        client.clone(),
        settings.node_name,
        settings.qps,
        settings.burst,
        cancel.child_token(),
    );
    tasks.background("event sink", sink);
    recorder
}

/// Upstream's client-side rate limiter: `burst` tokens, refilled at `qps` per second.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub fn new(qps: f64, burst: f64, now: Instant) -> Self {
        TokenBucket {
            qps,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes a token; otherwise says how long until one is due.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        if self.qps <= 0.0 {
            return Ok(());
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKey {
    object: InvolvedObject,
    kind: EventType,
    reason: String,
    message: String,
}

#[derive(Clone, Debug)]
struct Seen {
    name: String,
    count: i32,
    first: jiff::Timestamp,
    last_seen: Instant,
    order: u64,
}

/// What to send for an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Create {
        name: String,
    },
    /// Bump an existing Event object.
    Patch {
        name: String,
        count: i32,
        first: jiff::Timestamp,
    },
}

/// Remembers recent events so repeats become count bumps; holds at most `cap` entries and
/// forgets the least recently seen first.
#[derive(Debug)]
pub struct Aggregator {
    cap: usize,
    window: Duration,
    entries: HashMap<EventKey, Seen>,
    by_age: BTreeMap<u64, EventKey>,
    next: u64,
}

impl Aggregator {
    pub fn new(cap: usize, window: Duration) -> Self {
        Aggregator {
            cap: cap.max(1),
            window,
            entries: HashMap::new(),
            by_age: BTreeMap::new(),
            next: 0,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn observe(&mut self, record: &EventRecord, now: Instant) -> Action {
        let key = key_of(record);
        self.next += 1;
        let order = self.next;
        if let Some(seen) = self.entries.get_mut(&key)
            && now.saturating_duration_since(seen.last_seen) <= self.window
        {
            self.by_age.remove(&seen.order);
            self.by_age.insert(order, key);
            seen.order = order;
            seen.count += 1;
            seen.last_seen = now;
            return Action::Patch {
                name: seen.name.clone(),
                count: seen.count,
                first: seen.first,
            };
        }
        if let Some(old) = self.entries.remove(&key) {
            self.by_age.remove(&old.order);
        }
        // Upstream names events <object>.<unix nanos in hex>; the order breaks ties.
        let name = format!(
            "{}.{:x}",
            record.object.name,
            record.at.as_nanosecond() as u128 + u128::from(order % 1000)
        );
        self.entries.insert(
            key.clone(),
            Seen {
                name: name.clone(),
                count: 1,
                first: record.at,
                last_seen: now,
                order,
            },
        );
        self.by_age.insert(order, key);
        while self.entries.len() > self.cap {
            let Some((_, oldest)) = self.by_age.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        Action::Create { name }
    }

    /// Drops what is known about `record`, so its next repeat creates a new object.
    pub fn forget(&mut self, record: &EventRecord) {
        if let Some(old) = self.entries.remove(&key_of(record)) {
            self.by_age.remove(&old.order);
        }
    }
}

fn key_of(record: &EventRecord) -> EventKey {
    EventKey {
        object: record.object.clone(),
        kind: record.kind,
        reason: record.reason.clone(),
        message: record.message.clone(),
    }
}

/// The core/v1 Event created for `record`.
pub fn event_object(record: &EventRecord, name: &str, host: &str) -> Event {
    let o = &record.object;
    let namespace = if o.namespace.is_empty() {
        "default".to_string()
    } else {
        o.namespace.clone()
    };
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some(o.kind.to_string()),
            name: Some(o.name.clone()),
            namespace: Some(o.namespace.clone()).filter(|n| !n.is_empty()),
            uid: Some(o.uid.clone()).filter(|u| !u.is_empty()),
            ..Default::default()
        },
        reason: Some(record.reason.clone()),
        message: Some(record.message.clone()),
        type_: Some(record.kind.as_str().into()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some(host.to_string()),
        }),
        first_timestamp: Some(Time(record.at)),
        last_timestamp: Some(Time(record.at)),
        count: Some(1),
        ..Default::default()
    }
}

struct EventSink {
    client: kube::Client,
    host: String,
    limiter: TokenBucket,
    cache: Aggregator,
}

impl EventSink {
    async fn run(mut self, mut rx: mpsc::Receiver<EventRecord>, cancel: CancellationToken) {
        loop {
            let record = tokio::select! {
                _ = cancel.cancelled() => return,
                r = rx.recv() => match r {
                    Some(r) => r,
                    None => return,
                },
            };
            while let Err(wait) = self.limiter.take(Instant::now()) {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            self.send(&record).await;
        }
    }

    async fn send(&mut self, record: &EventRecord) {
        let action = self.cache.observe(record, Instant::now());
        let result = match &action {
            Action::Create { name } => self.create(record, name).await,
            Action::Patch { name, count, .. } => {
                match self.patch(record, name, *count).await {
                    // Someone deleted the object: start over with a new one.
                    Err(EventsError::Api(kube::Error::Api(e))) if e.code == 404 => {
                        self.cache.forget(record);
                        let Action::Create { name } = self.cache.observe(record, Instant::now())
                        else {
                            return;
                        };
                        self.create(record, &name).await
                    }
                    other => other,
                }
            }
        };
        if let Err(err) = result {
            if matches!(action, Action::Create { .. }) {
                self.cache.forget(record);
            }
            warn!(target: "events", reason = %record.reason, object = %record.object.name, %err, "Failed to write event");
        }
    }

    fn api(&self, record: &EventRecord) -> Api<Event> {
        let ns = &record.object.namespace;
        let ns = if ns.is_empty() {
            "default"
        } else {
            ns.as_str()
        };
        Api::namespaced(self.client.clone(), ns)
    }

    async fn create(&self, record: &EventRecord, name: &str) -> Result<(), EventsError> {
        let event = event_object(record, name, &self.host);
        let api = self.api(record);
        let params = PostParams::default();
        let call = api.create(&params, &event);
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| EventsError::Timeout)??;
        Ok(())
    }

    async fn patch(&self, record: &EventRecord, name: &str, count: i32) -> Result<(), EventsError> {
        let body = json!({ "count": count, "lastTimestamp": Time(record.at) });
        let api = self.api(record);
        let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
        let call = api.patch(name, &params, &patch);
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| EventsError::Timeout)??;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(name: &str, reason: &str, message: &str) -> EventRecord {
        EventRecord {
            object: InvolvedObject {
                kind: "Pod",
                namespace: "default".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            kind: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
            at: jiff::Timestamp::from_second(1_700_000_000).unwrap(),
        }
    }

    #[test]
    fn repeats_within_the_window_are_counted() {
        let t0 = Instant::now();
        let mut a = Aggregator::new(10, Duration::from_secs(600));
        let r = rec("web", "Pulled", "image present");
        let Action::Create { name } = a.observe(&r, t0) else {
            panic!("first sighting must create");
        };
        assert!(name.starts_with("web."), "{name}");
        let second = a.observe(&r, t0 + Duration::from_secs(30));
        assert_eq!(
            second,
            Action::Patch {
                name: name.clone(),
                count: 2,
                first: r.at
            }
        );
        let third = a.observe(&r, t0 + Duration::from_secs(60));
        assert!(matches!(third, Action::Patch { count: 3, .. }));
        // A different message is a different event.
        let other = rec("web", "Pulled", "another");
        assert!(matches!(a.observe(&other, t0), Action::Create { .. }));
    }

    #[test]
    fn a_repeat_after_the_window_creates_a_new_event() {
        let t0 = Instant::now();
        let mut a = Aggregator::new(10, Duration::from_secs(600));
        let r = rec("web", "BackOff", "x");
        a.observe(&r, t0);
        let later = a.observe(&r, t0 + Duration::from_secs(601));
        assert!(matches!(later, Action::Create { .. }), "{later:?}");
        assert_eq!(a.len(), 1);
    }

    #[test]
    fn the_cache_forgets_the_least_recently_seen_first() {
        let t0 = Instant::now();
        let mut a = Aggregator::new(2, Duration::from_secs(600));
        let (x, y, z) = (rec("x", "R", "m"), rec("y", "R", "m"), rec("z", "R", "m"));
        a.observe(&x, t0);
        a.observe(&y, t0);
        a.observe(&x, t0); // x is now the most recent
        a.observe(&z, t0); // evicts y
        assert_eq!(a.len(), 2);
        assert!(matches!(a.observe(&x, t0), Action::Patch { count: 3, .. }));
        assert!(matches!(a.observe(&y, t0), Action::Create { .. }));
    }

    #[test]
    fn forget_makes_the_next_repeat_create() {
        let t0 = Instant::now();
        let mut a = Aggregator::new(10, Duration::from_secs(600));
        let r = rec("web", "R", "m");
        a.observe(&r, t0);
        a.forget(&r);
        assert!(a.is_empty());
        assert!(matches!(a.observe(&r, t0), Action::Create { .. }));
    }

    #[test]
    fn token_bucket_allows_a_burst_then_paces() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(2.0, 3.0, t0);
        for _ in 0..3 {
            assert!(b.take(t0).is_ok());
        }
        let wait = b.take(t0).unwrap_err();
        assert!(
            wait > Duration::from_millis(400) && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        assert!(b.take(t0 + Duration::from_millis(500)).is_ok());
        assert!(b.take(t0 + Duration::from_millis(500)).is_err());
        // Refill never exceeds the burst.
        let t1 = t0 + Duration::from_secs(100);
        for _ in 0..3 {
            assert!(b.take(t1).is_ok());
        }
        assert!(b.take(t1).is_err());
    }

    #[test]
    fn zero_qps_is_unlimited() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(0.0, 1.0, t0);
        for _ in 0..1000 {
            assert!(b.take(t0).is_ok());
        }
    }

    #[test]
    fn recorder_never_blocks_on_a_full_queue() {
        let (tx, mut rx) = mpsc::channel(1);
        let r = EventRecorder::with_sink(tx);
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = Some("u1".into());
        r.pod(&pod, EventType::Normal, "Started", "one");
        r.pod(&pod, EventType::Normal, "Started", "two");
        let got = rx.try_recv().unwrap();
        assert_eq!(got.message, "one");
        assert_eq!(got.object.uid, "u1");
        assert!(rx.try_recv().is_err());
        r.node("n1", None, EventType::Warning, "Rebooted", "m");
        let node = rx.try_recv().unwrap();
        assert_eq!(node.object.kind, "Node");
        assert_eq!(node.object.namespace, "");
    }

    #[test]
    fn event_object_carries_source_and_reference() {
        let r = rec("web", "Started", "Started container c");
        let e = event_object(&r, "web.1", "node-a");
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(e.involved_object.kind.as_deref(), Some("Pod"));
        assert_eq!(e.involved_object.uid.as_deref(), Some("uid-web"));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.count, Some(1));
        let src = e.source.unwrap();
        assert_eq!(src.component.as_deref(), Some("kubelet"));
        assert_eq!(src.host.as_deref(), Some("node-a"));
        let mut node = r.clone();
        node.object = InvolvedObject {
            kind: "Node",
            namespace: String::new(),
            name: "n".into(),
            uid: String::new(),
        };
        let e = event_object(&node, "n.1", "n");
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(e.involved_object.namespace, None);
        assert_eq!(e.involved_object.uid, None);
    }
}
