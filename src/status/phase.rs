//! The pod's phase by upstream's rules, from its generated container statuses; kept apart
//! because sidecars and restart policies make it the subtlest part of the status.

use k8s_openapi::api::core::v1::{Container, ContainerStatus};

use super::conditions::regular_started;
use crate::pod::is_sidecar;
use crate::runtime::actions::RestartPolicy;

/// Upstream's phase rules over the generated container statuses (`init` in the order of
/// `init_specs`). Sidecars hold the pod Pending until started and keep it Running while they
/// run; once stopped they do not count.
pub fn pod_phase(
    policy: RestartPolicy,
    init_specs: &[Container],
    init: &[ContainerStatus],
    regular: &[ContainerStatus],
) -> &'static str {
    let failed_before = |s: &ContainerStatus| {
        s.last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .map(|t| t.exit_code != 0)
    };
    let mut pending_init = 0;
    let mut failed_init = 0;
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for (spec, s) in init_specs.iter().zip(init) {
        let st = s.state.clone().unwrap_or_default();
        if is_sidecar(spec) {
            if st.running.is_some() {
                running += 1;
                if s.started != Some(true) {
                    pending_init += 1;
                }
            } else if st.terminated.is_none() && failed_before(s).is_none() {
                pending_init += 1;
                waiting += 1;
            }
            continue;
        }
        if let Some(t) = st.terminated {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if st.waiting.is_some() {
            match failed_before(s) {
                Some(true) => failed_init += 1,
                Some(false) => {}
                None => pending_init += 1,
            }
        } else {
            pending_init += 1;
        }
    }
    pending_init += init_specs.len().saturating_sub(init.len());
    for s in regular {
        let st = s.state.clone().unwrap_or_default();
        if st.running.is_some() {
            running += 1;
        } else if let Some(t) = st.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if failed_before(s).is_some() {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if failed_init > 0 && policy == RestartPolicy::Never {
        return "Failed";
    }
    // Init containers pending again (a sidecar restarting, records removed) do not send a
    // pod whose app containers have run back to Pending.
    if (pending_init > 0 && !regular_started(regular)) || waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 {
        return match policy {
            RestartPolicy::Always => "Running",
            RestartPolicy::OnFailure if stopped == succeeded => "Succeeded",
            RestartPolicy::OnFailure => "Running",
            RestartPolicy::Never if stopped == succeeded => "Succeeded",
            RestartPolicy::Never => "Failed",
        };
    }
    "Pending"
}

/// Whether an init container has done its part: completed, or for a sidecar, started.
pub(super) fn init_complete(spec: &Container, s: &ContainerStatus) -> bool {
    if is_sidecar(spec) {
        s.started == Some(true)
    } else {
        succeeded(s)
    }
}

fn succeeded(s: &ContainerStatus) -> bool {
    s.state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0)
}
