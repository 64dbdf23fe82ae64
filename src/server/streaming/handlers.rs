//! /run, /exec, /attach and /portForward. Each checks its request, finds the pod (and
//! container) among those the kubelet runs, and for the streaming ones has the runtime
//! prepare the stream and proxies the client to it (upstream's behaviour with
//! redirectContainerStreaming off).

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Pod;

use super::errors::StreamError;
use super::options::{self, COMMAND_PARAM, Query, StreamOptions};
use super::{proxy, runtime_url};
use crate::server::ServerState;
use crate::server::lookup::{container_id, find_pod};

type Params = HashMap<String, String>;

fn param<'a>(p: &'a Params, name: &str) -> &'a str {
    p.get(name).map_or("", String::as_str)
}

fn respond(result: Result<Response, StreamError>) -> Response {
    result.unwrap_or_else(IntoResponse::into_response)
}

/// `name_namespace`, the pod's name in upstream's messages.
fn full_name(pod: &Pod) -> String {
    format!(
        "{}_{}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default()
    )
}

/// The pod by namespace and name; upstream's exec, attach and run ignore the path's UID here.
fn pod_by_name(state: &ServerState, p: &Params) -> Result<Pod, StreamError> {
    find_pod(state, param(p, "namespace"), param(p, "pod"), None)
        .map_err(|_| StreamError::PodNotFound)
}

/// POST /run/{namespace}/{pod}[/{uid}]/{container}?cmd=...: runs the command to completion
/// and answers with its stdout followed by its stderr.
pub async fn run(State(state): State<ServerState>, Path(p): Path<Params>, uri: Uri) -> Response {
    respond(run_inner(&state, &p, &uri).await)
}

async fn run_inner(state: &ServerState, p: &Params, uri: &Uri) -> Result<Response, StreamError> {
    let pod = pod_by_name(state, p)?;
    let cmd = options::run_command(&Query::of(uri));
    let container = param(p, "container");
    let id = container_id(&pod, container, false).map_err(|_| StreamError::ContainerNotFound {
        container: container.to_string(),
    })?;
    // No limit for the command itself (upstream passes none); the client's deadline still
    // bounds the call.
    let resp = state
        .cri
        .exec_sync(&id, cmd.clone(), Duration::ZERO)
        .await
        .map_err(StreamError::Run)?;
    if resp.exit_code != 0 {
        return Err(StreamError::NonZeroExit {
            command: cmd.join(" "),
            code: resp.exit_code,
            stderr: String::from_utf8_lossy(&resp.stderr).into_owned(),
        });
    }
    let mut output = resp.stdout;
    output.extend_from_slice(&resp.stderr);
    if output.is_empty() {
        return Ok(StatusCode::OK.into_response());
    }
    Ok(([(header::CONTENT_TYPE, "application/json")], output).into_response())
}

/// GET|POST /exec/{namespace}/{pod}[/{uid}]/{container}?command=...&input=1&output=1...
pub async fn exec(
    State(state): State<ServerState>,
    Path(p): Path<Params>,
    req: Request,
) -> Response {
    respond(exec_inner(&state, &p, req).await)
}

async fn exec_inner(
    state: &ServerState,
    p: &Params,
    req: Request,
) -> Result<Response, StreamError> {
    let q = Query::of(req.uri());
    let opts = StreamOptions::from_query(&q)?;
    let pod = pod_by_name(state, p)?;
    let container = param(p, "container");
    let id = container_id(&pod, container, false).map_err(|_| StreamError::ContainerNotFound {
        container: container.to_string(),
    })?;
    let url = runtime_url::exec(&state.cri, &id, q.all(COMMAND_PARAM), opts).await?;
    proxy::forward(req, &url, state.cri.timeout()).await
}

/// GET|POST /attach/{namespace}/{pod}[/{uid}]/{container}?input=1&output=1...
pub async fn attach(
    State(state): State<ServerState>,
    Path(p): Path<Params>,
    req: Request,
) -> Response {
    respond(attach_inner(&state, &p, req).await)
}

async fn attach_inner(
    state: &ServerState,
    p: &Params,
    req: Request,
) -> Result<Response, StreamError> {
    let opts = StreamOptions::from_query(&Query::of(req.uri()))?;
    let pod = pod_by_name(state, p)?;
    let container = param(p, "container");
    let id =
        container_id(&pod, container, false).map_err(|_| StreamError::AttachContainerNotFound {
            container: container.to_string(),
            pod: full_name(&pod),
        })?;
    let uid = param(p, "uid");
    if !uid.is_empty() && pod.metadata.uid.as_deref() != Some(uid) {
        return Err(StreamError::AttachPodNotFound {
            pod: full_name(&pod),
        });
    }
    let tty = spec_tty(&pod, container).ok_or_else(|| StreamError::AttachContainerNotFound {
        container: container.to_string(),
        pod: full_name(&pod),
    })?;
    let url = runtime_url::attach(&state.cri, &id, opts, tty).await?;
    proxy::forward(req, &url, state.cri.timeout()).await
}

/// The `tty` of the container named `name` in the pod's spec (init and ephemeral included).
fn spec_tty(pod: &Pod, name: &str) -> Option<bool> {
    let spec = pod.spec.as_ref()?;
    let regular = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .map(|c| c.tty.unwrap_or(false));
    regular.or_else(|| {
        spec.ephemeral_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .map(|c| c.tty.unwrap_or(false))
    })
}

/// GET|POST /portForward/{namespace}/{pod}[/{uid}] (WebSocket clients add ?port=...).
pub async fn port_forward(
    State(state): State<ServerState>,
    Path(p): Path<Params>,
    req: Request,
) -> Response {
    respond(port_forward_inner(&state, &p, req).await)
}

async fn port_forward_inner(
    state: &ServerState,
    p: &Params,
    req: Request,
) -> Result<Response, StreamError> {
    let ports = options::forward_ports(&Query::of(req.uri()), req.headers())?;
    let pod = pod_by_name(state, p)?;
    let uid = param(p, "uid");
    if !uid.is_empty() && pod.metadata.uid.as_deref() != Some(uid) {
        return Err(StreamError::PodUidMismatch);
    }
    let url = runtime_url::port_forward(&state.cri, &pod, ports).await?;
    proxy::forward(req, &url, state.cri.timeout()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, EphemeralContainer, PodSpec};

    #[test]
    fn attach_tty_comes_from_the_spec() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![
                    Container {
                        name: "shell".into(),
                        tty: Some(true),
                        ..Default::default()
                    },
                    Container {
                        name: "plain".into(),
                        ..Default::default()
                    },
                ],
                init_containers: Some(vec![Container {
                    name: "init".into(),
                    tty: Some(true),
                    ..Default::default()
                }]),
                ephemeral_containers: Some(vec![EphemeralContainer {
                    name: "debug".into(),
                    tty: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(spec_tty(&pod, "shell"), Some(true));
        assert_eq!(spec_tty(&pod, "plain"), Some(false));
        assert_eq!(spec_tty(&pod, "init"), Some(true));
        assert_eq!(spec_tty(&pod, "debug"), Some(true));
        assert_eq!(spec_tty(&pod, "nope"), None);
    }
}
