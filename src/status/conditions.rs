//! Building blocks of the pod's conditions: one condition, the readiness gates that hold
//! Ready back, and whether initialization ever completed.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub(super) fn condition(
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    at: &Option<Time>,
) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: at.clone(),
        ..Default::default()
    }
}

/// Why the pod's readiness gates hold it back, in upstream's words, if they do.
pub(super) fn readiness_gates_unmet(pod: &Pod) -> Option<String> {
    let gates = pod.spec.as_ref()?.readiness_gates.as_ref()?;
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    for gate in gates {
        let found = conditions
            .into_iter()
            .flatten()
            .find(|c| c.type_ == gate.condition_type);
        match found {
            None => {
                return Some(format!(
                    "corresponding condition of pod readiness gate \"{}\" does not exist.",
                    gate.condition_type
                ));
            }
            Some(c) if c.status != "True" => {
                return Some(format!(
                    "the status of pod readiness gate \"{}\" is not \"True\", but {}",
                    gate.condition_type, c.status
                ));
            }
            Some(_) => {}
        }
    }
    None
}

/// A regular container that ever ran means the init containers completed at some point.
pub(super) fn regular_started(statuses: &[ContainerStatus]) -> bool {
    statuses.iter().any(|s| {
        s.container_id.is_some()
            && s.state
                .as_ref()
                .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
    })
}
