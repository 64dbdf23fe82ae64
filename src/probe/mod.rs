//! What a probe is and how to run one once: the probe kinds, a probe's outcome, the verdicts
//! the prober keeps per container and what they mean for readiness and restarts, and the
//! handlers (exec, HTTP GET, TCP, gRPC). The prober decides when to probe; the runtime reads
//! verdicts and runs lifecycle hooks with the same HTTP GET.

mod exec;
mod grpc;
pub mod http;
mod tcp;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tracing::warn;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Liveness,
        ProbeKind::Readiness,
        ProbeKind::Startup,
    ];

    /// As upstream names it in events and metrics.
    pub fn name(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    pub fn of(self, c: &Container) -> Option<&Probe> {
        match self {
            ProbeKind::Liveness => c.liveness_probe.as_ref(),
            ProbeKind::Readiness => c.readiness_probe.as_ref(),
            ProbeKind::Startup => c.startup_probe.as_ref(),
        }
    }

    /// What a container is taken to be before its first verdict: not ready, alive, and not
    /// started (upstream's initial values).
    pub(crate) fn initial(self) -> Outcome {
        match self {
            ProbeKind::Readiness => Outcome::Failure,
            ProbeKind::Liveness => Outcome::Success,
            ProbeKind::Startup => Outcome::Unknown,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
    Unknown,
}

/// Upstream keeps at most 10 KiB of a probe's output.
const MAX_OUTPUT: usize = 10 * 1024;

fn cap_output(bytes: &[u8]) -> String {
    let end = bytes.len().min(MAX_OUTPUT);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// What the probes say a container is, given its spec and verdicts.
pub struct ProbeView {
    pub ready: bool,
    pub started: bool,
}

/// Upstream's rules: a running container without probes is started and ready; a startup
/// probe holds both until it succeeds; a readiness probe decides readiness after that.
pub fn view(spec: &Container, running: bool, verdicts: Option<&Verdicts>) -> ProbeView {
    let v = verdicts.copied().unwrap_or_default();
    let started = running && (spec.startup_probe.is_none() || v.startup == Some(Outcome::Success));
    let ready =
        started && (spec.readiness_probe.is_none() || v.readiness == Some(Outcome::Success));
    ProbeView { ready, started }
}

/// Why a running container must be restarted, with upstream's message, if its liveness or
/// startup probe failed; and the probe's own grace period for the stop, if it sets one.
pub fn restart_reason(c: &Container, verdicts: Option<&Verdicts>) -> Option<(String, Option<i64>)> {
    let v = verdicts?;
    let (kind, probe) = if v.startup == Some(Outcome::Failure) {
        ("startup", c.startup_probe.as_ref())
    } else if v.liveness == Some(Outcome::Failure) {
        ("liveness", c.liveness_probe.as_ref())
    } else {
        return None;
    };
    let grace = probe.and_then(|p| p.termination_grace_period_seconds);
    Some((format!("Container {} failed {kind} probe", c.name), grace))
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdicts {
    pub liveness: Option<Outcome>,
    pub readiness: Option<Outcome>,
    pub startup: Option<Outcome>,
}

impl Verdicts {
    pub(crate) fn slot(&mut self, kind: ProbeKind) -> &mut Option<Outcome> {
        match kind {
            ProbeKind::Liveness => &mut self.liveness,
            ProbeKind::Readiness => &mut self.readiness,
            ProbeKind::Startup => &mut self.startup,
        }
    }
}

/// Why a probe's or hook's port names no port.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    #[error("invalid port number: {0}")]
    Invalid(i32),
    #[error("couldn't find port: {name:?} in {container}")]
    NotFound { name: String, container: String },
}

/// A probe's port: a number, or the name of one of the container's ports.
pub fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, PortError> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n)
            .ok()
            .filter(|n| *n > 0)
            .ok_or(PortError::Invalid(*n)),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<u16>() {
                return Ok(n);
            }
            c.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| PortError::NotFound {
                    name: name.clone(),
                    container: c.name.clone(),
                })
        }
    }
}

/// Runs the probe once against the container's current instance.
pub async fn run_once(
    cri: &crate::cri::RuntimeClient,
    probe: &Probe,
    spec: &Container,
    status: &k8s_openapi::api::core::v1::PodStatus,
    container_id: &str,
    timeout: Duration,
) -> (Outcome, String) {
    let pod_ip = status.pod_ip.clone().unwrap_or_default();
    if let Some(e) = &probe.exec {
        let cmd = e.command.clone().unwrap_or_default();
        return exec::run(cri, container_id, cmd, timeout).await;
    }
    if let Some(h) = &probe.http_get {
        let port = match resolve_port(&h.port, spec) {
            Ok(p) => p,
            Err(e) => return (Outcome::Failure, e.to_string()),
        };
        let target = http::Target::of(h, &pod_ip, port);
        return http::run(target, timeout).await;
    }
    if let Some(tcp) = &probe.tcp_socket {
        let port = match resolve_port(&tcp.port, spec) {
            Ok(p) => p,
            Err(e) => return (Outcome::Failure, e.to_string()),
        };
        let host = tcp.host.clone().filter(|h| !h.is_empty()).unwrap_or(pod_ip);
        return tcp::run(&host, port, timeout).await;
    }
    if let Some(g) = &probe.grpc {
        let Ok(port) = u16::try_from(g.port) else {
            return (Outcome::Failure, format!("invalid port number: {}", g.port));
        };
        let service = g.service.clone().unwrap_or_default();
        return grpc::run(&pod_ip, port, &service, timeout).await;
    }
    warn!(container = %spec.name, "Probe has no handler");
    (Outcome::Unknown, "missing probe handler".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    #[test]
    fn ports_by_number_or_name() {
        let c = Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &c),
            Ok(8080)
        );
        assert!(resolve_port(&IntOrString::String("nope".into()), &c).is_err());
        assert!(resolve_port(&IntOrString::Int(0), &c).is_err());
    }
}
