//! Lifecycle hooks: postStart right after a container starts, preStop before it is stopped.
//! Handlers are exec (through CRI ExecSync), httpGet (any answer will do) and sleep, with
//! upstream's failure messages.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};

use crate::cri::RuntimeClient;
use crate::probe;

/// How long an exec or HTTP hook may take when nothing else bounds it (a postStart hook):
/// upstream gives exec hooks no limit of their own; we keep every external call bounded.
pub const UNBOUNDED_HOOK_LIMIT: Duration = Duration::from_secs(300);

/// Why a hook failed, in upstream's event message.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error(
        "Exec lifecycle hook ({command}) for Container {container:?} in Pod {pod:?} failed - error: {error}, message: {output:?}"
    )]
    Exec {
        /// Go's %v of a []string, as upstream prints the command.
        command: String,
        container: String,
        pod: String,
        error: String,
        output: String,
    },
    #[error(
        "HTTP lifecycle hook ({path}) for Container {container:?} in Pod {pod:?} failed - error: {error}"
    )]
    Http {
        path: String,
        container: String,
        pod: String,
        error: String,
    },
    #[error("Lifecycle hook for Container {container:?} in Pod {pod:?} has no handler")]
    NoHandler { container: String, pod: String },
}

fn pod_name(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// Runs one handler within `limit`; the error is upstream's event message.
pub async fn run(
    cri: &RuntimeClient,
    pod: &Pod,
    container: &Container,
    container_id: &str,
    handler: &LifecycleHandler,
    pod_ip: &str,
    limit: Duration,
) -> Result<(), HookError> {
    if let Some(e) = &handler.exec {
        let cmd = e.command.clone().unwrap_or_default();
        // Go's %v of a []string, as upstream prints the command.
        let shown = format!("[{}]", cmd.join(" "));
        let failed = |error: String, output: String| HookError::Exec {
            command: shown.clone(),
            container: container.name.clone(),
            pod: pod_name(pod),
            error,
            output,
        };
        // The runtime is told no timeout; the call is bounded by the limit.
        return match tokio::time::timeout(
            limit,
            cri.exec_sync(container_id, cmd.clone(), Duration::ZERO),
        )
        .await
        {
            Ok(Ok(resp)) if resp.exit_code == 0 => Ok(()),
            Ok(Ok(resp)) => {
                let stderr = String::from_utf8_lossy(&resp.stderr).into_owned();
                let mut out = resp.stdout;
                out.extend_from_slice(&resp.stderr);
                Err(failed(
                    format!(
                        "command '{}' exited with {}: {stderr}",
                        cmd.join(" "),
                        resp.exit_code
                    ),
                    String::from_utf8_lossy(&out).into_owned(),
                ))
            }
            Ok(Err(e)) => Err(failed(e.to_string(), String::new())),
            Err(_) => Err(failed("timed out".into(), String::new())),
        };
    }
    if let Some(h) = &handler.http_get {
        let path = h.path.clone().unwrap_or_default();
        let failed = |error: String| HookError::Http {
            path: path.clone(),
            container: container.name.clone(),
            pod: pod_name(pod),
            error,
        };
        let port = probe::resolve_port(&h.port, container).map_err(|e| failed(e.to_string()))?;
        let target = probe::http::Target::of(h, pod_ip, port);
        return probe::http::hook_get(target, limit)
            .await
            .map_err(|e| failed(e.to_string()));
    }
    if let Some(s) = &handler.sleep {
        let wanted = Duration::from_secs(u64::try_from(s.seconds).unwrap_or(0));
        tokio::time::sleep(wanted.min(limit)).await;
        return Ok(());
    }
    if handler.tcp_socket.is_some() {
        // Deprecated and never run by upstream either.
        return Ok(());
    }
    Err(HookError::NoHandler {
        container: container.name.clone(),
        pod: pod_name(pod),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{HTTPGetAction, SleepAction};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("u1".into());
        p
    }

    #[tokio::test]
    async fn http_hooks_need_an_answer_and_sleep_is_bounded() {
        let cri = crate::cri::fake::FakeCri::start(Duration::from_secs(5)).await;
        let c = Container {
            name: "c".into(),
            ..Default::default()
        };
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let handler = LifecycleHandler {
            http_get: Some(HTTPGetAction {
                path: Some("/hook".into()),
                port: IntOrString::Int(i32::from(port)),
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = run(
            &cri.client,
            &pod(),
            &c,
            "id",
            &handler,
            "127.0.0.1",
            Duration::from_secs(2),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("HTTP lifecycle hook (/hook) for Container \"c\" in Pod \"web_ns(u1)\" failed - error: Get \"http://127.0.0.1:"),
            "{err}"
        );
        let sleep = LifecycleHandler {
            sleep: Some(SleepAction { seconds: 3600 }),
            ..Default::default()
        };
        let started = std::time::Instant::now();
        run(
            &cri.client,
            &pod(),
            &c,
            "id",
            &sleep,
            "",
            Duration::from_millis(50),
        )
        .await
        .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a sleep hook stops at its limit"
        );
    }
}
