//! GET /containerLogs/{namespace}/{pod}/{container}: one container's log, checked and chosen
//! the way upstream's kubelet does (same order of checks, same status codes and messages).

use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::{LogsError, options, reader};
use crate::cri::api::ContainerState;
use crate::server::ServerState;
use crate::server::lookup::{self, LookupError};

pub async fn get(
    State(state): State<ServerState>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    match serve(&state, &namespace, &pod, &container, &query).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn serve(
    state: &ServerState,
    namespace: &str,
    pod_name: &str,
    container: &str,
    query: &[(String, String)],
) -> Result<Response, LogsError> {
    let opts = options::decode(query)?;
    options::validate(&opts)?;
    let pod = lookup::find_pod(state, namespace, pod_name, None)
        .map_err(|_| LogsError::PodNotFound(pod_name.to_string()))?;
    if let Err(LookupError::ContainerNotFound { .. }) = lookup::container_id(&pod, container, false)
    {
        return Err(LogsError::ContainerNotFound {
            pod: pod_name.to_string(),
            container: container.to_string(),
        });
    }
    options::check_stream(&opts)?;
    let full_id = log_container_id(&pod, container, opts.previous)?;
    let id = lookup::strip_runtime(&full_id).to_string();

    // Upstream writes nothing before the log file is open, so failures up to there are a 400;
    // once streaming, problems can only be told in the body.
    let status = state.cri.container_status(&id).await.map_err(|err| {
        tracing::debug!(%err, container_id = %full_id, "Failed to get container status for logs");
        LogsError::Unreadable(format!("unable to retrieve container logs for {full_id}"))
    })?;
    let log_path = PathBuf::from(&status.log_path);
    if let Err(err) = tokio::fs::File::open(&log_path).await {
        return Err(LogsError::Unreadable(format!(
            "failed to open log file {:?}: {err}",
            log_path.display().to_string()
        )));
    }
    let cri = state.cri.clone();
    let running = move || {
        let cri = cri.clone();
        let id = id.clone();
        async move {
            match cri.container_status(&id).await {
                Ok(s) => s.state == ContainerState::ContainerRunning as i32,
                Err(err) => {
                    tracing::warn!(%err, container_id = %id, "Cannot tell whether a followed container runs");
                    false
                }
            }
        }
    };
    let stream = reader::log_stream(log_path, opts.read_options(Timestamp::now()), running);
    Ok(text(Body::from_stream(with_held_end(stream))))
}

/// How long the end of a log body waits after its last bytes. The API server proxies websocket
/// log requests with a reader that drops a read's bytes when that read also reports the end of
/// the body (k8s.io/apiserver's wsstream); over HTTP/1.1 a last chunk and the chunked
/// terminator that arrive together are read exactly so, and `kubectl logs` over websockets saw
/// nothing. Upstream's Go server flushes each write before it writes the terminator; a pause
/// after the last chunk (which hyper flushes while the body is pending) does the same here:
/// over TLS the flushed chunk is then a record of its own, and Go reads one record at a time.
const END_OF_BODY_PAUSE: Duration = Duration::from_millis(5);

fn with_held_end<S: Stream>(stream: S) -> impl Stream<Item = S::Item> {
    // The timer starts when the last bytes have gone, not when the response was built: reading
    // the file can take longer than the pause, and an elapsed timer would end the body in the
    // same write as its last chunk.
    let pause = futures::stream::once(async { tokio::time::sleep(END_OF_BODY_PAUSE).await });
    stream.chain(pause.filter_map(|()| std::future::ready(None)))
}

fn text(body: Body) -> Response {
    ([(header::CONTENT_TYPE, "text/plain")], body).into_response()
}

/// Which instance's log to read, by the container's status, as upstream decides it: the last
/// terminated one with `previous`; otherwise the running one, else the one that ended, else
/// the one before; a container waiting for its first start has no log yet.
fn log_container_id(pod: &Pod, name: &str, previous: bool) -> Result<String, LogsError> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let fail = |what: &str| {
        LogsError::ContainerState(format!("container {name:?} in pod {pod_name:?} {what}"))
    };
    let status = find_status(pod, name).ok_or_else(|| fail("is not available"))?;
    let state = status.state.as_ref();
    let last_id = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.container_id.clone().unwrap_or_default());
    let last_usable = last_id.clone().filter(|id| !id.is_empty());
    if previous {
        return last_usable.ok_or_else(|| {
            LogsError::ContainerState(format!(
                "previous terminated container {name:?} in pod {pod_name:?} not found"
            ))
        });
    }
    if state.is_some_and(|s| s.running.is_some()) {
        return Ok(status.container_id.clone().unwrap_or_default());
    }
    if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        // When the next instance failed to start, the ended one has no ID: show the one before.
        return match t.container_id.clone().filter(|id| !id.is_empty()) {
            Some(id) => Ok(id),
            None => last_usable.ok_or_else(|| fail("is terminated")),
        };
    }
    if last_id.is_some() {
        return last_usable.ok_or_else(|| fail("is terminated"));
    }
    if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
        let why = match w.reason.as_deref().unwrap_or_default() {
            "ErrImagePull" => "image can't be pulled".to_string(),
            "ImagePullBackOff" => "trying and failing to pull image".to_string(),
            other => other.to_string(),
        };
        return Err(fail(&format!("is waiting to start: {why}")));
    }
    Err(fail("is waiting to start - no logs yet"))
}

fn find_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let s = pod.status.as_ref()?;
    [
        &s.container_statuses,
        &s.init_container_statuses,
        &s.ephemeral_container_statuses,
    ]
    .into_iter()
    .flatten()
    .flatten()
    .find(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStateWaiting, PodStatus,
    };

    /// The body's end comes a pause after its last bytes, never in the same poll, however long
    /// the bytes took to come.
    #[tokio::test(start_paused = true)]
    async fn the_end_of_a_log_body_waits_after_the_last_bytes() {
        let body = with_held_end(futures::stream::iter([Ok::<_, ()>("a"), Ok("b")]));
        let mut body = std::pin::pin!(body);
        // A slow file read: more than the pause passes before the first bytes.
        tokio::time::advance(END_OF_BODY_PAUSE * 4).await;
        assert_eq!(body.next().await, Some(Ok("a")));
        assert_eq!(body.next().await, Some(Ok("b")));
        let start = tokio::time::Instant::now();
        assert!(
            futures::FutureExt::now_or_never(body.next()).is_none(),
            "ended at once"
        );
        assert_eq!(body.next().await, None);
        assert!(start.elapsed() >= END_OF_BODY_PAUSE);
    }

    fn pod_with(status: ContainerStatus) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.status = Some(PodStatus {
            container_statuses: Some(vec![status]),
            ..Default::default()
        });
        p
    }

    fn terminated(id: &str) -> Option<ApiState> {
        Some(ApiState {
            terminated: Some(ContainerStateTerminated {
                container_id: Some(id.into()),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn waiting(reason: &str) -> Option<ApiState> {
        Some(ApiState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn status(
        state: Option<ApiState>,
        last: Option<ApiState>,
        id: Option<&str>,
    ) -> ContainerStatus {
        ContainerStatus {
            name: "app".into(),
            state,
            last_state: last,
            container_id: id.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn running_terminated_and_previous() {
        let running = Some(ApiState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        });
        let p = pod_with(status(
            running,
            terminated("containerd://old"),
            Some("containerd://cur"),
        ));
        assert_eq!(
            log_container_id(&p, "app", false).unwrap(),
            "containerd://cur"
        );
        assert_eq!(
            log_container_id(&p, "app", true).unwrap(),
            "containerd://old"
        );

        let p = pod_with(status(terminated("containerd://done"), None, None));
        assert_eq!(
            log_container_id(&p, "app", false).unwrap(),
            "containerd://done"
        );
        // The ended instance has no ID: the one before it is shown.
        let p = pod_with(status(
            terminated(""),
            terminated("containerd://before"),
            None,
        ));
        assert_eq!(
            log_container_id(&p, "app", false).unwrap(),
            "containerd://before"
        );
    }

    #[test]
    fn crash_looping_container_shows_its_last_run() {
        let p = pod_with(status(
            waiting("CrashLoopBackOff"),
            terminated("containerd://x"),
            None,
        ));
        assert_eq!(
            log_container_id(&p, "app", false).unwrap(),
            "containerd://x"
        );
    }

    #[test]
    fn messages_like_upstream() {
        let p = pod_with(status(waiting("ContainerCreating"), None, None));
        assert_eq!(
            log_container_id(&p, "app", false).unwrap_err().to_string(),
            "container \"app\" in pod \"web\" is waiting to start: ContainerCreating"
        );
        let p = pod_with(status(waiting("ErrImagePull"), None, None));
        assert!(
            log_container_id(&p, "app", false)
                .unwrap_err()
                .to_string()
                .ends_with("image can't be pulled")
        );
        assert_eq!(
            log_container_id(&p, "app", true).unwrap_err().to_string(),
            "previous terminated container \"app\" in pod \"web\" not found"
        );
        assert_eq!(
            log_container_id(&p, "other", false)
                .unwrap_err()
                .to_string(),
            "container \"other\" in pod \"web\" is not available"
        );
        let p = pod_with(status(None, None, None));
        assert!(
            log_container_id(&p, "app", false)
                .unwrap_err()
                .to_string()
                .ends_with("is waiting to start - no logs yet")
        );
    }
}
