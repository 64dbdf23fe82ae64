//! What tests do to the fake and read back from it: images, exits, injected failures and
//! delays, and the call log.

use std::time::Duration;

use md5::{Digest, Md5};
use tonic::Status;

use super::image_service::normalize_image;
use super::{Call, FakeRuntime, State, exited_reason, now_nanos};
use crate::cri::api;

impl FakeRuntime {
    /// Makes `image` present on the node; returns its id.
    pub fn add_image(&self, image: &str) -> String {
        let mut s = self.lock();
        let name = normalize_image(image);
        if let Some(existing) = s.images.iter().find(|i| i.repo_tags.contains(&name)) {
            return existing.id.clone();
        }
        let mut h = Md5::new();
        h.update(name.as_bytes());
        let d = hex::encode(h.finalize());
        let id = format!("sha256:{d}{d}");
        s.images.push(api::Image {
            id: id.clone(),
            repo_tags: vec![name.clone()],
            size: 1 << 20,
            spec: Some(api::ImageSpec {
                image: name,
                ..Default::default()
            }),
            ..Default::default()
        });
        id
    }

    /// Lets PullImage fetch `image` (the registry has it).
    pub fn add_remote_image(&self, image: &str) {
        self.lock().registry.insert(normalize_image(image));
    }

    pub fn has_image(&self, image: &str) -> bool {
        self.lock().image(image).is_some()
    }

    /// The container's process ends with `code`, as if it exited on its own. False when the
    /// container is unknown or not running.
    pub fn exit_container(&self, id: &str, code: i32) -> bool {
        let mut s = self.lock();
        match s.container_mut(id) {
            Some(c) if c.status.state == api::ContainerState::ContainerRunning as i32 => {
                State::exit(c, code);
                true
            }
            _ => false,
        }
    }

    /// Every container named `name` (metadata name) started from now on exits with `code`
    /// right after it starts: a process that ends at once.
    pub fn exit_on_start(&self, name: &str, code: i32) {
        self.lock().exit_on_start.insert(name.to_string(), code);
    }

    /// The next call of `method` (e.g. "PullImage") fails with `status` before the runtime
    /// does anything.
    pub fn fail_next(&self, method: &'static str, status: Status) {
        self.lock().fail_next.insert(method, status);
    }

    /// The next RunPodSandbox succeeds without creating anything and answers with no id, as a
    /// runtime that breaks the CRI contract would.
    pub fn omit_next_sandbox_id(&self) {
        self.lock().omit_sandbox_id = true;
    }

    /// Every call of `method` waits `d` before it is handled.
    pub fn delay(&self, method: &'static str, d: Duration) {
        self.lock().delays.insert(method, d);
    }

    pub fn clear_delay(&self, method: &'static str) {
        self.lock().delays.remove(method);
    }

    /// Method names of all calls so far, in order.
    /// The `traceparent` metadata of every request that carried one, in order.
    pub fn traceparents(&self) -> Vec<String> {
        self.lock().traceparents.clone()
    }

    pub fn calls(&self) -> Vec<&'static str> {
        self.lock().calls.iter().map(|c| c.method).collect()
    }

    /// All calls so far, in order, with their subjects.
    pub fn call_log(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Calls of one method, in order.
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    pub fn count(&self, method: &str) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .count()
    }

    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// Methods of delayed calls the client gave up on before they were handled.
    pub fn cancelled(&self) -> Vec<&'static str> {
        self.lock().cancelled.clone()
    }

    pub fn sandboxes(&self) -> Vec<api::PodSandboxStatus> {
        self.lock()
            .sandboxes
            .iter()
            .map(|s| s.status.clone())
            .collect()
    }

    pub fn containers(&self) -> Vec<api::ContainerStatus> {
        self.lock()
            .containers
            .iter()
            .map(|c| {
                let mut st = c.status.clone();
                st.reason = exited_reason(&st);
                st
            })
            .collect()
    }

    /// The newest attempt of the container with this metadata name.
    pub fn container(&self, name: &str) -> Option<api::ContainerStatus> {
        self.containers()
            .into_iter()
            .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
            .max_by_key(|c| (c.metadata.as_ref().map(|m| m.attempt), c.created_at))
    }

    /// Serves GetContainerEvents from now on (see the module's comment).
    pub fn offer_container_events(&self) {
        self.lock().events_offered = true;
    }

    /// Sends a CONTAINER_STARTED event for `container_id` to every open stream; returns how
    /// many streams took it.
    pub fn send_container_event(&self, container_id: &str) -> usize {
        let event = api::ContainerEventResponse {
            container_id: container_id.to_string(),
            container_event_type: api::ContainerEventType::ContainerStartedEvent as i32,
            created_at: now_nanos(),
            ..Default::default()
        };
        let mut s = self.lock();
        s.event_subscribers
            .retain(|tx| tx.try_send(event.clone()).is_ok());
        s.event_subscribers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeCri;

    #[tokio::test]
    async fn hooks_fail_delay_and_log() {
        let cri = FakeCri::start(Duration::from_millis(300)).await;
        let (fake, c) = (&cri.runtime, &cri.client);
        fake.fail_next("Version", Status::unavailable("injected"));
        let err = c.version().await.expect_err("injected failure");
        assert_eq!(err.code(), Some(tonic::Code::Unavailable));
        c.version().await.expect("only the next call fails");

        fake.delay("Status", Duration::from_secs(30));
        let started = std::time::Instant::now();
        let err = c.status(false).await.expect_err("deadline");
        assert!(matches!(err, crate::cri::CriError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // The abandoned call is dropped on the server side too.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while fake.cancelled().is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(fake.cancelled(), vec!["Status"]);
        fake.clear_delay("Status");
        c.status(false).await.expect("status");
        assert_eq!(fake.calls(), vec!["Version", "Version", "Status", "Status"]);
    }
}
