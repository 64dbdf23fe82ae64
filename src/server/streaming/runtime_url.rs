//! Asking the runtime where it will serve a stream: the CRI Exec, Attach and PortForward calls
//! each register a request and answer with a one-time URL on the runtime's streaming server.

use axum::http::Uri;
use k8s_openapi::api::core::v1::Pod;

use super::errors::StreamError;
use super::options::StreamOptions;
use crate::cri::{RuntimeClient, api};

/// The label the kubelet puts on every sandbox, naming its pod.
const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";

pub async fn exec(
    cri: &RuntimeClient,
    container_id: &str,
    cmd: Vec<String>,
    opts: StreamOptions,
) -> Result<Uri, StreamError> {
    let req = api::ExecRequest {
        container_id: container_id.to_string(),
        cmd,
        tty: opts.tty,
        stdin: opts.stdin,
        stdout: opts.stdout,
        stderr: opts.stderr,
        ..Default::default()
    };
    parse(cri.exec(req).await.map_err(StreamError::Runtime)?)
}

/// `tty` is the container's own setting: whether its process has a terminal was fixed when it
/// started, whatever the request asks.
pub async fn attach(
    cri: &RuntimeClient,
    container_id: &str,
    opts: StreamOptions,
    tty: bool,
) -> Result<Uri, StreamError> {
    let req = api::AttachRequest {
        container_id: container_id.to_string(),
        stdin: opts.stdin,
        tty,
        stdout: opts.stdout,
        stderr: opts.stderr,
        ..Default::default()
    };
    parse(cri.attach(req).await.map_err(StreamError::Runtime)?)
}

/// Forwards into the pod's newest sandbox, whatever its state, as upstream does.
pub async fn port_forward(
    cri: &RuntimeClient,
    pod: &Pod,
    ports: Vec<i32>,
) -> Result<Uri, StreamError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let desc = format!(
        "{}_{}({uid})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let filter = api::PodSandboxFilter {
        label_selector: [(POD_UID_LABEL.to_string(), uid)].into_iter().collect(),
        ..Default::default()
    };
    let sandboxes =
        cri.list_pod_sandbox(Some(filter))
            .await
            .map_err(|source| StreamError::SandboxList {
                pod: desc.clone(),
                source,
            })?;
    let id = newest(sandboxes).ok_or(StreamError::NoSandbox { pod: desc })?;
    parse(
        cri.port_forward(&id, ports)
            .await
            .map_err(StreamError::Runtime)?,
    )
}

/// The newest sandbox's ID; equal creation times fall back to the ID so the choice is stable.
fn newest(sandboxes: Vec<api::PodSandbox>) -> Option<String> {
    sandboxes
        .into_iter()
        .max_by(|a, b| a.created_at.cmp(&b.created_at).then(b.id.cmp(&a.id)))
        .map(|s| s.id)
}

/// The proxy dials plain HTTP to the runtime's streaming server (containerd and CRI-O serve
/// it on loopback); anything but an absolute http URL is refused.
pub fn parse(url: String) -> Result<Uri, StreamError> {
    let bad = |reason: String| StreamError::BadUrl {
        url: url.clone(),
        reason,
    };
    let uri: Uri = url.parse().map_err(|_| bad("not a URL".into()))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => return Err(bad(format!("scheme {other:?} is not supported"))),
        None => return Err(bad("not an absolute URL".into())),
    }
    match uri.host() {
        Some(h) if !h.is_empty() => Ok(uri),
        _ => Err(bad("no host".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(id: &str, created_at: i64) -> api::PodSandbox {
        api::PodSandbox {
            id: id.into(),
            created_at,
            ..Default::default()
        }
    }

    #[test]
    fn newest_sandbox_wins() {
        let list = vec![sandbox("old", 1), sandbox("new", 3), sandbox("mid", 2)];
        assert_eq!(newest(list).as_deref(), Some("new"));
        let tie = vec![sandbox("b", 5), sandbox("a", 5)];
        assert_eq!(newest(tie).as_deref(), Some("a"));
        assert_eq!(newest(Vec::new()), None);
    }

    #[test]
    fn runtime_urls() {
        let u = parse("http://127.0.0.1:40123/exec/AbC".into()).unwrap();
        assert_eq!(u.host(), Some("127.0.0.1"));
        assert_eq!(u.port_u16(), Some(40123));
        assert_eq!(u.path(), "/exec/AbC");
        let u = parse("http://[::1]:9/attach/t?x=1".into()).unwrap();
        assert_eq!(
            u.path_and_query().map(|p| p.as_str()),
            Some("/attach/t?x=1")
        );
        assert!(parse("127.0.0.1:9/attach/t".into()).is_err());
        assert!(matches!(
            parse("https://127.0.0.1:1/exec/t".into()),
            Err(StreamError::BadUrl { .. })
        ));
        assert!(parse("/exec/t".into()).is_err());
        assert!(parse("".into()).is_err());
    }
}
