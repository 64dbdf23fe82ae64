//! Sockets found against plugins registered. Operations on one socket never overlap; a
//! socket whose registration failed is tried again with a growing pause (upstream's: from
//! 500 ms, doubling, at most 2 min 2 s) until it succeeds or the socket goes. Every map here
//! holds at most one entry per socket in the folder.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::registration::PluginConn;
use super::socket_dir::SocketId;
use super::{Handler, Handlers};

const FIRST_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(122);

pub struct Registered {
    id: SocketId,
    name: String,
    handler: Handler,
}

struct Retry {
    id: SocketId,
    pause: Duration,
    not_before: Instant,
}

pub enum Outcome {
    Registered(Registered),
    Failed { id: SocketId, error: String },
    Deregistered,
}

pub struct Reconciler {
    handlers: Handlers,
    /// The last scan.
    found: BTreeMap<PathBuf, SocketId>,
    registered: BTreeMap<PathBuf, Registered>,
    retries: BTreeMap<PathBuf, Retry>,
    /// Sockets with an operation under way.
    busy: BTreeSet<PathBuf>,
    running: JoinSet<(PathBuf, Outcome)>,
}

impl Reconciler {
    pub fn new(handlers: Handlers) -> Self {
        Self {
            handlers,
            found: BTreeMap::new(),
            registered: BTreeMap::new(),
            retries: BTreeMap::new(),
            busy: BTreeSet::new(),
            running: JoinSet::new(),
        }
    }

    /// Starts what the sockets `found` call for: deregistrations first, then registrations.
    pub fn reconcile(&mut self, found: BTreeMap<PathBuf, SocketId>) {
        self.found = found;
        let gone: Vec<PathBuf> = self
            .registered
            .iter()
            .filter(|(path, r)| self.found.get(*path) != Some(&r.id))
            .map(|(path, _)| path.clone())
            .collect();
        for path in gone {
            if !self.busy.contains(&path)
                && let Some(r) = self.registered.remove(&path)
            {
                self.start_deregister(path, r);
            }
        }
        let now = Instant::now();
        self.retries.retain(|path, _| self.found.contains_key(path));
        let new: Vec<(PathBuf, SocketId)> = self
            .found
            .iter()
            .filter(|(path, id)| {
                !self.registered.contains_key(*path)
                    && !self.busy.contains(*path)
                    && self
                        .retries
                        .get(*path)
                        .is_none_or(|r| r.id != **id || r.not_before <= now)
            })
            .map(|(p, id)| (p.clone(), *id))
            .collect();
        for (path, id) in new {
            self.busy.insert(path.clone());
            let handlers = self.handlers.clone();
            self.running.spawn(async move {
                let outcome = match register(&path, &handlers).await {
                    Ok((name, handler)) => Outcome::Registered(Registered { id, name, handler }),
                    Err(error) => Outcome::Failed { id, error },
                };
                (path, outcome)
            });
        }
    }

    pub async fn next_finished(&mut self) -> Option<(PathBuf, Outcome)> {
        loop {
            match self.running.join_next().await? {
                Ok(done) => return Some(done),
                // A panicked operation: its socket stays busy and is not tried again.
                Err(e) => error!(err = %e, "A plugin registration task failed"),
            }
        }
    }

    pub fn finished(&mut self, (path, outcome): (PathBuf, Outcome)) {
        self.busy.remove(&path);
        match outcome {
            Outcome::Registered(r) => {
                self.retries.remove(&path);
                if self.found.get(&path) == Some(&r.id) {
                    self.registered.insert(path, r);
                } else {
                    // The socket went while it was being registered.
                    self.start_deregister(path, r);
                }
            }
            Outcome::Failed { id, error } => {
                let pause = match self.retries.get(&path) {
                    Some(r) if r.id == id => (r.pause * 2).min(MAX_RETRY),
                    _ => FIRST_RETRY,
                };
                warn!(path = %path.display(), err = error, retry_in = ?pause, "Plugin registration failed");
                self.retries.insert(
                    path,
                    Retry {
                        id,
                        pause,
                        not_before: Instant::now() + pause,
                    },
                );
            }
            Outcome::Deregistered => {}
        }
    }

    fn start_deregister(&mut self, path: PathBuf, r: Registered) {
        info!(path = %path.display(), plugin = r.name, "Deregistering plugin");
        self.busy.insert(path.clone());
        self.running.spawn(async move {
            r.handler.deregister(&r.name).await;
            (path, Outcome::Deregistered)
        });
    }
}

/// One registration, as upstream's operation generator runs it; every refusal is also told to
/// the plugin. Gives the plugin's name and the handler that took it.
async fn register(path: &Path, handlers: &Handlers) -> Result<(String, Handler), String> {
    let shown = path.display();
    let mut conn = PluginConn::dial(path)
        .await
        .map_err(|e| format!("RegisterPlugin error -- dial failed at socket {shown}, err: {e}"))?;
    let info = conn.get_info().await.map_err(|e| {
        format!("RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {shown}, err: {e}")
    })?;
    let Some(handler) = handlers.for_type(&info.r#type) else {
        let msg = format!(
            "RegisterPlugin error -- no handler registered for plugin type: {} at socket {shown}",
            info.r#type
        );
        return Err(refused(&mut conn, msg, None).await);
    };
    let endpoint = if info.endpoint.is_empty() {
        path.to_path_buf()
    } else {
        PathBuf::from(&info.endpoint)
    };
    if let Err(e) = handler.validate(&info.name, &endpoint, &info.supported_versions) {
        let msg = format!("RegisterPlugin error -- plugin validation failed with err: {e}");
        let ours = "RegisterPlugin error -- pluginHandler.ValidatePluginFunc failed";
        return Err(refused(&mut conn, msg, Some(ours)).await);
    }
    if let Err(e) = handler
        .register(&info.name, &endpoint, &info.supported_versions)
        .await
    {
        let msg = format!("RegisterPlugin error -- plugin registration failed with err: {e}");
        return Err(refused(&mut conn, msg, None).await);
    }
    // The handler has it now: a lost verdict does not undo that, as upstream keeps it too.
    if let Err(e) = conn.notify("").await {
        warn!(socket = %shown, err = e, "RegisterPlugin error -- failed to send registration status");
    }
    info!(plugin = info.name, r#type = info.r#type, socket = %shown, "Registered plugin");
    Ok((info.name, handler))
}

/// Tells the plugin why it was refused and returns the reason to log (`ours` when the log
/// should say less than the plugin is told).
async fn refused(conn: &mut PluginConn, msg: String, ours: Option<&str>) -> String {
    if let Err(e) = conn.notify(&msg).await {
        return format!("{msg}: failed to send the error to the plugin: {e}");
    }
    ours.map(str::to_string).unwrap_or(msg)
}
