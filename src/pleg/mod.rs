//! The pod lifecycle event generator: relists the runtime and reports which pods changed, so
//! workers wake on change instead of polling the runtime themselves. It relists every second,
//! or, while the runtime's container events flow (`events`), at each event and once a minute.

mod events;
mod metrics;

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::cri::{RuntimeClient, api};
use crate::runtime::labels;

/// A pod as the runtime shows it in a relist: enough to clean it up if nobody claims it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimePod {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub running_containers: usize,
    /// Sandboxes in the ready state: a pod with one still holds a network namespace.
    pub ready_sandboxes: usize,
}

impl RuntimePod {
    /// Still runs something: a container, or a sandbox holding a network namespace.
    pub fn is_active(&self) -> bool {
        self.running_containers > 0 || self.ready_sandboxes > 0
    }

    /// Whether this is a pod of full name `full_name` (`<name>_<namespace>`, see
    /// `sources::pod_full_name`), without making that string.
    pub fn has_full_name(&self, full_name: &str) -> bool {
        full_name
            .strip_prefix(self.name.as_str())
            .and_then(|rest| rest.strip_prefix('_'))
            == Some(self.namespace.as_str())
    }
}

pub type RuntimePods = Arc<HashMap<String, RuntimePod>>;

/// When the last relist finished, for health checks.
#[derive(Debug, Default)]
pub struct PlegHealth {
    last_relist_unix_ms: AtomicI64,
}

impl PlegHealth {
    fn mark(&self) {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        self.last_relist_unix_ms.store(ms, Ordering::Relaxed);
    }

    /// Pretends the last relist finished `ago` (health check tests).
    #[cfg(test)]
    pub fn set_last_relist_ago(&self, ago: Duration) {
        let at = SystemTime::now() - ago;
        let ms = at.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64);
        self.last_relist_unix_ms
            .store(ms.unwrap_or(1), Ordering::Relaxed);
    }

    /// Time since the last successful relist; None before the first one.
    pub fn since_last_relist(&self) -> Option<Duration> {
        let ms = self.last_relist_unix_ms.load(Ordering::Relaxed);
        if ms == 0 {
            return None;
        }
        let then = UNIX_EPOCH + Duration::from_millis(ms as u64);
        Some(SystemTime::now().duration_since(then).unwrap_or_default())
    }
}

#[derive(Default)]
struct PodFingerprint {
    hasher: DefaultHasher,
    pod: Option<RuntimePod>,
}

fn group(
    sandboxes: &[api::PodSandbox],
    containers: &[api::Container],
) -> HashMap<String, (u64, RuntimePod)> {
    let mut pods: HashMap<String, PodFingerprint> = HashMap::new();
    let ident = |labels_map: &HashMap<String, String>| -> Option<(String, String, String)> {
        let uid = labels_map.get(labels::POD_UID)?.clone();
        let get = |k: &str| labels_map.get(k).cloned().unwrap_or_default();
        Some((uid, get(labels::POD_NAME), get(labels::POD_NAMESPACE)))
    };
    let mut sorted_sb: Vec<&api::PodSandbox> = sandboxes.iter().collect();
    sorted_sb.sort_by(|a, b| a.id.cmp(&b.id));
    for sb in sorted_sb {
        let Some((uid, name, namespace)) = ident(&sb.labels) else {
            continue;
        };
        let fp = pods.entry(uid.clone()).or_default();
        (&sb.id, sb.state).hash(&mut fp.hasher);
        let pod = fp.pod.get_or_insert(RuntimePod {
            uid,
            name,
            namespace,
            running_containers: 0,
            ready_sandboxes: 0,
        });
        if sb.state == api::PodSandboxState::SandboxReady as i32 {
            pod.ready_sandboxes += 1;
        }
    }
    let mut sorted_c: Vec<&api::Container> = containers.iter().collect();
    sorted_c.sort_by(|a, b| a.id.cmp(&b.id));
    for c in sorted_c {
        let Some((uid, name, namespace)) = ident(&c.labels) else {
            continue;
        };
        let fp = pods.entry(uid.clone()).or_default();
        (&c.id, c.state).hash(&mut fp.hasher);
        let pod = fp.pod.get_or_insert(RuntimePod {
            uid,
            name,
            namespace,
            running_containers: 0,
            ready_sandboxes: 0,
        });
        if c.state == api::ContainerState::ContainerRunning as i32 {
            pod.running_containers += 1;
        }
    }
    pods.into_iter()
        .filter_map(|(uid, fp)| Some((uid, (fp.hasher.finish(), fp.pod?))))
        .collect()
}

/// Pod UIDs whose runtime state differs between two relists (appeared, changed or vanished).
fn changed(old: &HashMap<String, u64>, new: &HashMap<String, (u64, RuntimePod)>) -> Vec<String> {
    let mut out: Vec<String> = new
        .iter()
        .filter(|(uid, (fp, _))| old.get(*uid) != Some(fp))
        .map(|(uid, _)| uid.clone())
        .collect();
    let gone: HashSet<&String> = old.keys().filter(|uid| !new.contains_key(*uid)).collect();
    out.extend(gone.into_iter().cloned());
    out
}

/// How often the runtime is relisted.
const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// How often while container events flow: each event relists at once, so this only bounds
/// how long a change the runtime did not announce goes unseen. Upstream waits 300 s; a minute
/// keeps the relist within the PLEG health check's three minutes and costs next to nothing.
const EVENTED_RELIST_PERIOD: Duration = Duration::from_secs(60);
/// How long a relist waits after an event for the ones that come with it.
const EVENT_SETTLE: Duration = Duration::from_millis(20);
/// Events queued for the sync loop (pod UIDs); a full queue only delays a wake-up.
const EVENT_QUEUE: usize = 1000;

/// What the PLEG hands the sync loop and the health checks.
pub struct PlegOutputs {
    /// UIDs of pods whose containers changed.
    pub events: mpsc::Receiver<String>,
    /// Everything the last relist saw.
    pub runtime_pods: watch::Receiver<RuntimePods>,
    pub health: Arc<PlegHealth>,
}

/// Starts relisting the runtime in `tasks`, woken by the runtime's container events when
/// `evented` and the runtime offers them.
pub fn spawn(
    cri: RuntimeClient,
    evented: bool,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> PlegOutputs {
    let health = Arc::new(PlegHealth::default());
    let (tx, events) = mpsc::channel(EVENT_QUEUE);
    let (mut pleg, runtime_pods) = Pleg::new(cri.clone(), RELIST_PERIOD, tx, health.clone());
    if evented {
        pleg.container_events = Some(events::spawn(cri, tasks, cancel));
    }
    tasks.critical("PLEG", pleg.run(cancel.child_token()));
    PlegOutputs {
        events,
        runtime_pods,
        health,
    }
}

pub struct Pleg {
    cri: RuntimeClient,
    period: Duration,
    events: mpsc::Sender<String>,
    pods: watch::Sender<RuntimePods>,
    health: Arc<PlegHealth>,
    /// When the last successful relist started, for the relist interval metric.
    last_relist_start: Option<Instant>,
    /// The runtime's container events, when followed.
    container_events: Option<events::EventOutputs>,
}

impl Pleg {
    pub fn new(
        cri: RuntimeClient,
        period: Duration,
        events: mpsc::Sender<String>,
        health: Arc<PlegHealth>,
    ) -> (Self, watch::Receiver<RuntimePods>) {
        let (pods, rx) = watch::channel(RuntimePods::default());
        (
            Pleg {
                cri,
                period,
                events,
                pods,
                health,
                last_relist_start: None,
                container_events: None,
            },
            rx,
        )
    }

    /// The relist period: long while container events flow.
    fn period_now(&self) -> Duration {
        match &self.container_events {
            Some(ev) if *ev.live.borrow() => EVENTED_RELIST_PERIOD,
            _ => self.period,
        }
    }

    /// Until the next relist is due: a period after the last one started, or an event.
    async fn wait(&mut self, last: tokio::time::Instant) {
        let due = last + self.period_now();
        let wake = async {
            match &mut self.container_events {
                // Closed (the runtime has no events): the timer alone.
                Some(ev) => {
                    if ev.wake.recv().await.is_none() {
                        std::future::pending::<()>().await
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            // A pod's start or stop comes as a few events in a row: one relist for them all.
            _ = wake => tokio::time::sleep(EVENT_SETTLE).await,
        }
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        let mut last: HashMap<String, u64> = HashMap::new();
        // The first relist runs at once.
        let now = tokio::time::Instant::now();
        let mut last_start = now.checked_sub(self.period).unwrap_or(now);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.wait(last_start) => {}
            }
            last_start = tokio::time::Instant::now();
            let started = Instant::now();
            let (sandboxes, containers) = match tokio::try_join!(
                self.cri.list_pod_sandbox(None),
                self.cri.list_containers(None)
            ) {
                Ok(lists) => lists,
                Err(err) => {
                    warn!(%err, "PLEG relist failed");
                    continue;
                }
            };
            let grouped = group(&sandboxes, &containers);
            let changed_uids = changed(&last, &grouped);
            // The first relist is published even when the runtime is empty: the sync loop
            // waits for it to know what an earlier run left (see SyncLoop::previous_named).
            if !changed_uids.is_empty() || self.last_relist_start.is_none() {
                let snapshot: HashMap<String, RuntimePod> = grouped
                    .iter()
                    .map(|(uid, (_, pod))| (uid.clone(), pod.clone()))
                    .collect();
                self.pods.send_replace(Arc::new(snapshot));
            }
            last = grouped
                .into_iter()
                .map(|(uid, (fp, _))| (uid, fp))
                .collect();
            self.health.mark();
            let previous = self.last_relist_start.replace(started);
            metrics::record_relist(started, previous, &sandboxes, &containers);
            debug!(changed = changed_uids.len(), took = ?started.elapsed(), "PLEG relist");
            for uid in changed_uids {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = self.events.send(uid) => if r.is_err() { return },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeCri;

    #[test]
    fn a_runtime_pod_knows_its_full_name_and_whether_it_runs() {
        let rp = RuntimePod {
            uid: "u".into(),
            name: "web".into(),
            namespace: "default".into(),
            running_containers: 0,
            ready_sandboxes: 1,
        };
        assert!(rp.has_full_name("web_default"));
        assert!(!rp.has_full_name("web_kube-system"));
        assert!(!rp.has_full_name("web-0_default"));
        assert!(!rp.has_full_name("webdefault"));
        assert!(rp.is_active());
        let stopped = RuntimePod {
            ready_sandboxes: 0,
            ..rp
        };
        assert!(!stopped.is_active());
    }

    fn sb(id: &str, uid: &str, state: api::PodSandboxState) -> api::PodSandbox {
        api::PodSandbox {
            id: id.into(),
            state: state as i32,
            labels: HashMap::from([(labels::POD_UID.to_string(), uid.to_string())]),
            ..Default::default()
        }
    }

    fn ctr(id: &str, uid: &str, state: api::ContainerState) -> api::Container {
        api::Container {
            id: id.into(),
            state: state as i32,
            labels: HashMap::from([(labels::POD_UID.to_string(), uid.to_string())]),
            ..Default::default()
        }
    }

    #[test]
    fn reports_only_changed_pods() {
        let ready = api::PodSandboxState::SandboxReady;
        let g1 = group(
            &[sb("s1", "a", ready), sb("s2", "b", ready)],
            &[ctr("c1", "a", api::ContainerState::ContainerRunning)],
        );
        let first = changed(&HashMap::new(), &g1);
        assert_eq!(first.len(), 2);
        let fp: HashMap<String, u64> = g1.iter().map(|(k, (f, _))| (k.clone(), *f)).collect();
        assert_eq!(g1["a"].1.running_containers, 1);

        let g2 = group(
            &[sb("s1", "a", ready)],
            &[ctr("c1", "a", api::ContainerState::ContainerExited)],
        );
        let mut c = changed(&fp, &g2);
        c.sort();
        assert_eq!(c, vec!["a", "b"]);
        let fp2: HashMap<String, u64> = g2.iter().map(|(k, (f, _))| (k.clone(), *f)).collect();
        assert!(changed(&fp2, &g2).is_empty());
    }

    /// A PLEG running on the fake runtime with container events live, driven by hand: `wake`
    /// as an event would, `live` as the event task would.
    struct EventedPleg {
        events: mpsc::Receiver<String>,
        wake: mpsc::Sender<()>,
        live: watch::Sender<bool>,
        cancel: CancellationToken,
        run: tokio::task::JoinHandle<()>,
    }

    impl EventedPleg {
        /// Started, and past its first relist (at once, of an empty runtime).
        async fn start(fake: &FakeCri) -> Self {
            let (tx, events) = mpsc::channel(16);
            let (mut pleg, _) = Pleg::new(
                fake.client.clone(),
                RELIST_PERIOD,
                tx,
                Arc::new(PlegHealth::default()),
            );
            let (wake, wake_rx) = mpsc::channel(1);
            let (live, live_rx) = watch::channel(true);
            pleg.container_events = Some(events::EventOutputs {
                wake: wake_rx,
                live: live_rx,
            });
            let cancel = CancellationToken::new();
            let run = tokio::spawn(pleg.run(cancel.clone()));
            tokio::time::sleep(Duration::from_millis(300)).await;
            EventedPleg {
                events,
                wake,
                live,
                cancel,
                run,
            }
        }

        async fn stop(self) {
            self.cancel.cancel();
            self.run.await.unwrap();
        }
    }

    async fn add_pod(fake: &FakeCri, uid: &str) {
        let config = api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: uid.into(),
                namespace: "default".into(),
                uid: uid.into(),
                attempt: 0,
            }),
            labels: HashMap::from([(labels::POD_UID.to_string(), uid.to_string())]),
            ..Default::default()
        };
        fake.client.run_pod_sandbox(config, "").await.unwrap();
    }

    #[tokio::test]
    async fn while_events_flow_an_event_relists_and_the_timer_waits() {
        let fake = FakeCri::start(Duration::from_secs(5)).await;
        let mut p = EventedPleg::start(&fake).await;
        add_pod(&fake, "u1").await;
        let quiet = tokio::time::timeout(Duration::from_millis(1500), p.events.recv()).await;
        assert!(quiet.is_err(), "relisted on the timer while events flow");
        p.wake.send(()).await.unwrap();
        let woke = tokio::time::timeout(Duration::from_millis(800), p.events.recv()).await;
        assert_eq!(woke.ok().flatten().as_deref(), Some("u1"));
        p.stop().await;
    }

    #[tokio::test]
    async fn without_events_the_timer_relists_every_second() {
        let fake = FakeCri::start(Duration::from_secs(5)).await;
        let mut p = EventedPleg::start(&fake).await;
        // The stream broke: the event task says so and wakes the PLEG.
        p.live.send_replace(false);
        p.wake.send(()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        add_pod(&fake, "u2").await;
        let found = tokio::time::timeout(Duration::from_millis(2500), p.events.recv()).await;
        assert_eq!(found.ok().flatten().as_deref(), Some("u2"));
        p.stop().await;
    }

    #[tokio::test]
    async fn a_runtime_without_events_leaves_the_relist_alone() {
        // The fake, like containerd 1.6, answers GetContainerEvents with Unimplemented: the
        // event task ends at once, never saying the stream is up.
        let fake = FakeCri::start(Duration::from_secs(5)).await;
        let (wake_tx, mut wake) = mpsc::channel(1);
        let (live_tx, live) = watch::channel(false);
        let follow = events::follow(
            fake.client.clone(),
            wake_tx,
            live_tx,
            CancellationToken::new(),
        );
        tokio::time::timeout(Duration::from_secs(5), follow)
            .await
            .expect("the event task ends on Unimplemented");
        assert!(!*live.borrow());
        assert_eq!(
            wake.recv().await,
            None,
            "no wake-up, and the channel is closed"
        );
    }

    #[tokio::test]
    async fn a_runtime_with_events_is_followed_before_its_first_event() {
        // Like containerd 1.7: the subscription gets no answer until the first event.
        let fake = FakeCri::start(Duration::from_secs(5)).await;
        fake.runtime.offer_container_events();
        let (wake_tx, mut wake) = mpsc::channel(1);
        let (live_tx, mut live) = watch::channel(false);
        let cancel = CancellationToken::new();
        let follow = tokio::spawn(events::follow(
            fake.client.clone(),
            wake_tx,
            live_tx,
            cancel.clone(),
        ));
        tokio::time::timeout(Duration::from_secs(5), live.wait_for(|up| *up))
            .await
            .expect("the quiet subscription counts as up")
            .unwrap();
        // The relist that catches up with what happened before.
        let first = tokio::time::timeout(Duration::from_secs(1), wake.recv()).await;
        assert_eq!(first.ok().flatten(), Some(()));
        assert_eq!(fake.runtime.send_container_event("c1"), 1);
        let woke = tokio::time::timeout(Duration::from_secs(2), wake.recv()).await;
        assert_eq!(woke.ok().flatten(), Some(()), "an event wakes the PLEG");
        assert_eq!(fake.runtime.send_container_event("c1"), 1);
        let again = tokio::time::timeout(Duration::from_secs(2), wake.recv()).await;
        assert_eq!(again.ok().flatten(), Some(()), "and the next one too");
        assert!(*live.borrow());
        cancel.cancel();
        follow.await.unwrap();
    }

    #[test]
    fn objects_without_pod_uid_are_ignored() {
        let mut foreign = ctr("x", "a", api::ContainerState::ContainerRunning);
        foreign.labels.clear();
        assert!(group(&[], &[foreign]).is_empty());
    }
}
