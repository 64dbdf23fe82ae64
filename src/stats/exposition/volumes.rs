//! kubelet_volume_stats_*: the usage of each claim's volume, labelled by the claim, as
//! upstream's volume stats collector exposes it (the families kube-prometheus alerts on when a
//! volume fills up). A claim mounted by several pods is one series.

use std::collections::BTreeMap;

use crate::metrics::text::{Family, Kind, Sample, labels};
use crate::volume::csi::client::VolumeStats;

use super::super::assemble::ClaimedReading;

const LABELS: [&str; 2] = ["namespace", "persistentvolumeclaim"];

type Field = fn(&VolumeStats) -> Option<u64>;

const FAMILIES: [(&str, &str, Field); 6] = [
    (
        "kubelet_volume_stats_capacity_bytes",
        "Capacity in bytes of the volume",
        |s| s.capacity_bytes,
    ),
    (
        "kubelet_volume_stats_available_bytes",
        "Number of available bytes in the volume",
        |s| s.available_bytes,
    ),
    (
        "kubelet_volume_stats_used_bytes",
        "Number of used bytes in the volume",
        |s| s.used_bytes,
    ),
    (
        "kubelet_volume_stats_inodes",
        "Maximum number of inodes in the volume",
        |s| s.inodes,
    ),
    (
        "kubelet_volume_stats_inodes_free",
        "Number of free inodes in the volume",
        |s| s.inodes_free,
    ),
    (
        "kubelet_volume_stats_inodes_used",
        "Number of used inodes in the volume",
        |s| s.inodes_used,
    ),
];

/// The six families from the volumes' readings; a family without samples is left out, as an
/// empty Go collector writes nothing.
pub fn families<'a>(readings: impl IntoIterator<Item = &'a ClaimedReading>) -> Vec<Family> {
    let by_claim: BTreeMap<&(String, String), &VolumeStats> = readings
        .into_iter()
        .filter_map(|r| Some((r.claim.as_ref()?, &r.stats)))
        .collect();
    FAMILIES
        .iter()
        .map(|(name, help, field)| Family {
            name: name.to_string(),
            help: format!("[ALPHA] {help}"),
            kind: Kind::Gauge,
            samples: by_claim
                .iter()
                .filter_map(|((ns, claim), stats)| {
                    let v = field(stats)?;
                    Some(Sample::new(labels(LABELS, [ns, claim]), v as f64))
                })
                .collect(),
        })
        .filter(|f| !f.samples.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::text::encode;

    #[test]
    fn one_series_per_claim_with_upstreams_names() {
        let reading = |claim: Option<(&str, &str)>, used: u64| ClaimedReading {
            name: "data".into(),
            claim: claim.map(|(n, c)| (n.to_string(), c.to_string())),
            stats: VolumeStats {
                capacity_bytes: Some(1000),
                available_bytes: Some(1000 - used),
                used_bytes: Some(used),
                inodes: None,
                ..Default::default()
            },
        };
        let readings = [
            reading(Some(("shop", "db")), 10),
            reading(Some(("shop", "db")), 10),
            reading(None, 5),
            reading(Some(("web", "cache")), 7),
        ];
        let families = families(&readings);
        assert_eq!(families.len(), 3, "no inode counts were read");
        let text = encode(families);
        assert!(text.contains(
            "# HELP kubelet_volume_stats_used_bytes [ALPHA] Number of used bytes in the volume"
        ));
        assert!(text.contains("# TYPE kubelet_volume_stats_capacity_bytes gauge"));
        assert!(text.contains(
            "kubelet_volume_stats_used_bytes{namespace=\"shop\",persistentvolumeclaim=\"db\"} 10"
        ));
        assert!(text.contains(
            "kubelet_volume_stats_available_bytes{namespace=\"web\",persistentvolumeclaim=\"cache\"} 993"
        ));
        assert_eq!(text.matches("persistentvolumeclaim=\"db\"").count(), 3);
        assert!(families_of_nothing_are_empty());
    }

    fn families_of_nothing_are_empty() -> bool {
        families(&[]).is_empty()
    }
}
