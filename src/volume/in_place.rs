//! The claim and inline CSI volumes set up for each pod. As upstream's actual state of the
//! world, such a volume is resolved and mounted once per pod, so later syncs send no request
//! for it; and the stats provider measures the volumes recorded here. An entry goes with its
//! pod's teardown, so what is kept is bounded by the pods on the node.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

/// How a volume's usage is read, as upstream's metrics provider of its plugin reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MeasuredBy {
    /// hostPath: not measured (upstream's MetricsNil).
    Nothing,
    /// A local volume: statfs of its mount.
    StatFs,
    /// NodeGetVolumeStats of its driver, when the driver offers GET_VOLUME_STATS.
    Csi { driver: String, handle: String },
}

/// A volume set up for a pod: where its containers mount it from, and how.
#[derive(Clone, Debug)]
pub struct InPlace {
    pub path: PathBuf,
    pub read_only: bool,
    /// The claim (namespace, name) behind it, for `pvcRef` and the volume metrics' labels.
    pub claim: Option<(String, String)>,
    pub measured_by: MeasuredBy,
    /// A claim's CSI volume, which grows when its claim does.
    pub expandable: Option<std::sync::Arc<super::csi::expand::Expandable>>,
    /// Its driver asks to be called again on each sync (`requiresRepublish`).
    pub republish: bool,
}

/// One pod's volume, as [`InPlaceVolumes::all`] lists them.
#[derive(Clone, Debug)]
pub struct PodVolume {
    pub pod_uid: String,
    pub volume: String,
    pub in_place: InPlace,
}

#[derive(Debug, Default)]
pub struct InPlaceVolumes {
    pods: Mutex<HashMap<String, BTreeMap<String, InPlace>>>,
}

impl InPlaceVolumes {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, BTreeMap<String, InPlace>>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pod's volumes set up so far, by volume name.
    pub fn pod(&self, uid: &str) -> BTreeMap<String, InPlace> {
        self.lock().get(uid).cloned().unwrap_or_default()
    }

    pub fn add(&self, uid: &str, volumes: BTreeMap<String, InPlace>) {
        if !volumes.is_empty() {
            self.lock()
                .entry(uid.to_string())
                .or_default()
                .extend(volumes);
        }
    }

    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Every pod's volumes.
    pub fn all(&self) -> Vec<PodVolume> {
        let pods = self.lock();
        pods.iter()
            .flat_map(|(uid, volumes)| {
                volumes.iter().map(|(name, v)| PodVolume {
                    pod_uid: uid.clone(),
                    volume: name.clone(),
                    in_place: v.clone(),
                })
            })
            .collect()
    }
}
