//! An in-memory CRI runtime for unit tests, served over a real unix socket so the kubelet's
//! own [`RuntimeClient`] (deadlines, error mapping, cancellation by dropping a call) is what
//! talks to it.
//!
//! It follows containerd's CRI plugin where the kubelet can tell the difference: sandbox and
//! container names are reserved until removal (so a reused attempt number fails), Stop and
//! Remove of an unknown id succeed while Status of one is NOT_FOUND, stopping or removing a
//! sandbox force-kills its containers, StartContainer needs a CREATED container in a READY
//! sandbox and creates the log file, CreateContainer needs the image locally, and exited
//! containers carry the reason "Completed" or "Error". Images are normalised
//! docker-style (`busybox` is `docker.io/library/busybox:latest`).
//!
//! ReopenContainerLog creates the log file anew, as containerd does for a running container.
//!
//! Test hooks: [`FakeRuntime::exit_container`] and [`FakeRuntime::exit_on_start`] end a
//! container's process, [`FakeRuntime::fail_next`] makes the next call of an RPC fail before
//! the runtime acts on it, [`FakeRuntime::delay`] holds an RPC (a delayed call that the client
//! abandons is listed by [`FakeRuntime::cancelled`]), [`FakeRuntime::omit_next_sandbox_id`]
//! breaks the CRI contract once, and [`FakeRuntime::calls`] is the call log. ExecSync runs
//! nothing: it answers exit code 0 for a running container, so it is there to be delayed.
//!
//! GetContainerEvents is Unimplemented, as in containerd 1.6, until
//! [`FakeRuntime::offer_container_events`]; then, as containerd 1.7, a subscription gets no
//! answer (not even headers) before its first event, which [`FakeRuntime::send_container_event`]
//! sends.

mod hooks;
mod image_service;
mod runtime_service;
mod server;

pub use server::FakeCri;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use md5::{Digest, Md5};
use tonic::Status;

use super::api;
use image_service::normalize_image;

/// Exit code of a process killed by SIGKILL (forced stops).
pub const EXIT_SIGKILL: i32 = 137;
/// Exit code of a process that died of SIGTERM (stops with a grace period).
pub const EXIT_SIGTERM: i32 = 143;
/// containerd's exit code and reason for a container whose start failed.
const START_ERROR_CODE: i32 = 128;

/// One RPC as the fake received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub method: &'static str,
    /// The sandbox or container name (metadata name) the call is about, or the image; empty
    /// for calls about nothing in particular (List*, Version, Status).
    pub subject: String,
    /// StopContainer's grace period in seconds.
    pub timeout: Option<i64>,
}

struct Sandbox {
    status: api::PodSandboxStatus,
    /// The reserved name, released on removal.
    name: String,
}

struct Ctr {
    status: api::ContainerStatus,
    sandbox_id: String,
    name: String,
}

#[derive(Default)]
struct State {
    next_id: u64,
    next_ip: u32,
    sandboxes: Vec<Sandbox>,
    containers: Vec<Ctr>,
    /// Reserved sandbox and container names, to the id holding them.
    names: HashMap<String, String>,
    images: Vec<api::Image>,
    /// Normalised references a PullImage can fetch.
    registry: HashSet<String>,
    fail_next: HashMap<&'static str, Status>,
    delays: HashMap<&'static str, Duration>,
    exit_on_start: HashMap<String, i32>,
    stop_exit_code: Option<i32>,
    omit_sandbox_id: bool,
    calls: Vec<Call>,
    cancelled: Vec<&'static str>,
    /// The `traceparent` of every request that carried one.
    traceparents: Vec<String>,
    /// Whether GetContainerEvents is served (containerd 1.7) or Unimplemented (1.6).
    events_offered: bool,
    /// The open GetContainerEvents streams.
    event_subscribers: Vec<tokio::sync::mpsc::Sender<api::ContainerEventResponse>>,
}

impl State {
    fn new_id(&mut self) -> String {
        self.next_id += 1;
        let mut h = Md5::new();
        h.update(self.next_id.to_le_bytes());
        let d = hex::encode(h.finalize());
        format!("{d}{d}")
    }

    fn reserve(&mut self, name: &str, id: &str, what: &str) -> Result<(), Status> {
        if let Some(holder) = self.names.get(name) {
            return Err(Status::unknown(format!(
                "failed to reserve {what} name {name:?}: name {name:?} is reserved for {holder:?}"
            )));
        }
        self.names.insert(name.to_string(), id.to_string());
        Ok(())
    }

    fn sandbox(&self, id: &str) -> Option<&Sandbox> {
        self.sandboxes.iter().find(|s| s.status.id == id)
    }

    fn sandbox_mut(&mut self, id: &str) -> Option<&mut Sandbox> {
        self.sandboxes.iter_mut().find(|s| s.status.id == id)
    }

    fn container_mut(&mut self, id: &str) -> Option<&mut Ctr> {
        self.containers.iter_mut().find(|c| c.status.id == id)
    }

    fn image(&self, reference: &str) -> Option<&api::Image> {
        let wanted = normalize_image(reference);
        self.images
            .iter()
            .find(|i| i.id == reference || i.repo_tags.contains(&wanted))
    }

    /// The process is gone: `finished_at` is now and the exit code as given.
    fn exit(c: &mut Ctr, code: i32) {
        if c.status.state == api::ContainerState::ContainerRunning as i32 {
            c.status.state = api::ContainerState::ContainerExited as i32;
            c.status.finished_at = now_nanos();
            c.status.exit_code = code;
        }
    }

    /// What StopPodSandbox does: containers are killed outright, the network goes away.
    fn stop_sandbox(&mut self, id: &str) {
        for c in self.containers.iter_mut().filter(|c| c.sandbox_id == id) {
            Self::exit(c, EXIT_SIGKILL);
        }
        if let Some(sb) = self.sandbox_mut(id) {
            sb.status.state = api::PodSandboxState::SandboxNotready as i32;
            if let Some(net) = sb.status.network.as_mut() {
                net.ip.clear();
                net.additional_ips.clear();
            }
        }
    }

    fn remove_container(&mut self, id: &str) {
        if let Some(pos) = self.containers.iter().position(|c| c.status.id == id) {
            let c = self.containers.remove(pos);
            self.names.remove(&c.name);
        }
    }

    fn subject_of_sandbox(&self, id: &str) -> String {
        self.sandbox(id)
            .and_then(|s| s.status.metadata.as_ref())
            .map_or_else(|| id.to_string(), |m| m.name.clone())
    }

    fn subject_of_container(&self, id: &str) -> String {
        self.containers
            .iter()
            .find(|c| c.status.id == id)
            .and_then(|c| c.status.metadata.as_ref())
            .map_or_else(|| id.to_string(), |m| m.name.clone())
    }
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn labels_match(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn exited_reason(status: &api::ContainerStatus) -> String {
    let exited = status.state == api::ContainerState::ContainerExited as i32;
    if !exited || !status.reason.is_empty() {
        status.reason.clone()
    } else if status.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    }
}

/// The fake runtime; clones share one state.
#[derive(Clone, Default)]
pub struct FakeRuntime {
    state: Arc<Mutex<State>>,
}

/// Marks a delayed call that the client abandoned (its future is dropped mid-delay).
struct InFlight {
    fake: FakeRuntime,
    method: &'static str,
    done: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.done {
            self.fake.lock().cancelled.push(self.method);
        }
    }
}

impl FakeRuntime {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Logs the call, then applies the injected failure or delay for this method.
    async fn enter(
        &self,
        method: &'static str,
        subject: impl FnOnce(&State) -> String,
        timeout: Option<i64>,
    ) -> Result<(), Status> {
        let (fail, delay) = {
            let mut s = self.lock();
            let subject = subject(&s);
            s.calls.push(Call {
                method,
                subject,
                timeout,
            });
            (s.fail_next.remove(method), s.delays.get(method).copied())
        };
        if let Some(status) = fail {
            return Err(status);
        }
        if let Some(d) = delay {
            let mut guard = InFlight {
                fake: self.clone(),
                method,
                done: false,
            };
            tokio::time::sleep(d).await;
            guard.done = true;
        }
        Ok(())
    }
}
