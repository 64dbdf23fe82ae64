//! `activeDeadlineSeconds`: a pod active on the node longer than its deadline fails, like
//! upstream's active deadline handler. The deadline is read from the spec on every sync, so an
//! update to it is followed.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;

use crate::status::PodFailure;

pub const REASON: &str = "DeadlineExceeded";
pub const MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// When the pod counts as started: its reported start time (which survives a kubelet
/// restart), else when this kubelet first saw it.
pub(super) fn started(pod: &Pod, first_seen: SystemTime) -> SystemTime {
    pod.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| SystemTime::from(t.0))
        .map_or(first_seen, |t| t.min(first_seen))
}

/// What the deadline means now: the failure once it has passed, else how long until it does.
pub enum Verdict {
    None,
    Exceeded(PodFailure),
    In(Duration),
}

pub fn check(pod: &Pod, first_seen: SystemTime, now: SystemTime) -> Verdict {
    let Some(seconds) = pod
        .spec
        .as_ref()
        .and_then(|s| s.active_deadline_seconds)
        .and_then(|s| u64::try_from(s).ok())
    else {
        return Verdict::None;
    };
    let deadline = started(pod, first_seen) + Duration::from_secs(seconds);
    match deadline.duration_since(now) {
        Ok(left) if !left.is_zero() => Verdict::In(left),
        _ => Verdict::Exceeded(PodFailure {
            reason: REASON.into(),
            message: MESSAGE.into(),
            disruption: false,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    #[test]
    fn deadline_from_the_spec_as_it_is_now() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut pod = Pod {
            spec: Some(PodSpec::default()),
            ..Default::default()
        };
        assert!(matches!(check(&pod, t0, t0), Verdict::None));
        pod.spec.as_mut().unwrap().active_deadline_seconds = Some(5000);
        let later = t0 + Duration::from_secs(10);
        assert!(matches!(check(&pod, t0, later), Verdict::In(d) if d == Duration::from_secs(4990)));
        // Shortened while the pod runs: it fails at once.
        pod.spec.as_mut().unwrap().active_deadline_seconds = Some(5);
        match check(&pod, t0, later) {
            Verdict::Exceeded(f) => assert_eq!(f.reason, "DeadlineExceeded"),
            _ => panic!("the deadline has passed"),
        }
    }
}
