//! Which pods break their local-storage limits: an emptyDir holding more than its `sizeLimit`.
//! Pure decisions; the monitor (mod.rs) measures and acts.

use k8s_openapi::api::core::v1::Pod;

use crate::quantity::{Amount, Style};
use crate::status::PodFailure;

/// Upstream's eviction reason and the pod's status reason after it.
pub const REASON: &str = "Evicted";
/// The `eviction_signal` label upstream counts these evictions under.
pub const EMPTY_DIR_SIGNAL: &str = "emptydirfs.limit";

/// An emptyDir of the pod with a positive `sizeLimit`: its name and the limit in bytes, with
/// the limit spelled as the pod spelled it (upstream's message quotes the quantity).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitedDir {
    pub volume: String,
    pub limit_bytes: u64,
    pub limit_text: String,
}

/// The pod's emptyDir volumes that carry a positive `sizeLimit`. An unparsable limit is left
/// out: the API server validates it, and a static pod's was validated when it was read.
pub fn limited_dirs(pod: &Pod) -> Vec<LimitedDir> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    volumes
        .unwrap_or(&[])
        .iter()
        .filter_map(|v| {
            let limit = v.empty_dir.as_ref()?.size_limit.as_ref()?;
            let amount = Amount::of(limit).ok()?;
            let bytes = u64::try_from(amount.units()?).ok().filter(|b| *b > 0)?;
            Some(LimitedDir {
                volume: v.name.clone(),
                limit_bytes: bytes,
                limit_text: amount.format(Style::of(limit)),
            })
        })
        .collect()
}

/// The eviction the usage calls for, if any: the first emptyDir (in spec order) holding more
/// than its limit.
pub fn empty_dir_verdict(dirs: &[LimitedDir], used: &[Option<u64>]) -> Option<PodFailure> {
    dirs.iter()
        .zip(used)
        .find(|(d, u)| u.is_some_and(|u| u > d.limit_bytes))
        .map(|(d, _)| PodFailure {
            reason: REASON.into(),
            message: format!(
                "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                d.volume, d.limit_text
            ),
            disruption: false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, PodSpec, Volume};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(limits: &[(&str, Option<&str>)]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                volumes: Some(
                    limits
                        .iter()
                        .map(|(name, limit)| Volume {
                            name: name.to_string(),
                            empty_dir: Some(EmptyDirVolumeSource {
                                size_limit: limit.map(|l| Quantity(l.into())),
                                ..Default::default()
                            }),
                            ..Default::default()
                        })
                        .chain([Volume {
                            name: "host".into(),
                            ..Default::default()
                        }])
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_positive_limits_count() {
        let p = pod(&[
            ("a", Some("1Mi")),
            ("b", None),
            ("c", Some("0")),
            ("d", Some("2k")),
        ]);
        let dirs = limited_dirs(&p);
        assert_eq!(
            dirs,
            vec![
                LimitedDir {
                    volume: "a".into(),
                    limit_bytes: 1 << 20,
                    limit_text: "1Mi".into(),
                },
                LimitedDir {
                    volume: "d".into(),
                    limit_bytes: 2000,
                    limit_text: "2k".into(),
                },
            ]
        );
    }

    #[test]
    fn over_the_limit_is_evicted_with_upstreams_message() {
        let dirs = limited_dirs(&pod(&[("a", Some("1Mi")), ("b", Some("1048576"))]));
        assert_eq!(
            empty_dir_verdict(&dirs, &[Some(1 << 20), Some(1 << 20)]),
            None
        );
        assert_eq!(empty_dir_verdict(&dirs, &[None, None]), None);
        let f = empty_dir_verdict(&dirs, &[Some(10), Some((1 << 20) + 1)]).unwrap();
        assert_eq!(f.reason, "Evicted");
        assert_eq!(
            f.message,
            "Usage of EmptyDir volume \"b\" exceeds the limit \"1048576\". "
        );
        let f = empty_dir_verdict(&dirs, &[Some((1 << 20) + 1), None]).unwrap();
        assert_eq!(
            f.message,
            "Usage of EmptyDir volume \"a\" exceeds the limit \"1Mi\". "
        );
    }
}
