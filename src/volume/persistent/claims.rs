//! A pod's `persistentVolumeClaim` volume, resolved to the PersistentVolume bound to it, with
//! the checks and messages of upstream's desired-state populator: the claim must exist, not
//! be going away, be Bound to a named volume, and that volume's claimRef must name the claim;
//! the volume's mode must match how the containers use it (volumeMounts need Filesystem,
//! volumeDevices need Block). A generic ephemeral volume (`volumes[].ephemeral`) is the claim
//! `<pod>-<volume>` that the ephemeral volume controller made for the pod, and must be owned by
//! the pod.

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, Volume,
};
use kube::api::Api;

/// The claim a pod volume names, and whether the pod must own it (a generic ephemeral volume).
#[derive(Clone, Debug)]
pub struct ClaimRef {
    pub source: PersistentVolumeClaimVolumeSource,
    pub ephemeral: bool,
}

impl ClaimRef {
    /// The claim behind `v`, if it is a claim or a generic ephemeral volume.
    pub fn of(pod: &Pod, v: &Volume) -> Option<ClaimRef> {
        if let Some(source) = &v.persistent_volume_claim {
            return Some(ClaimRef {
                source: source.clone(),
                ephemeral: false,
            });
        }
        v.ephemeral.as_ref()?;
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        Some(ClaimRef {
            source: PersistentVolumeClaimVolumeSource {
                claim_name: format!("{pod_name}-{}", v.name),
                read_only: None,
            },
            ephemeral: true,
        })
    }
}

/// Whether the pod is the claim's controller, as the ephemeral volume controller makes it.
fn owned_by(claim: &PersistentVolumeClaim, pod: &Pod) -> bool {
    let uid = pod.metadata.uid.as_deref();
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

/// A claim resolved to its volume.
#[derive(Clone, Debug)]
pub struct Bound {
    pub pv: PersistentVolume,
    /// The claim's or the pod's readOnly: either one makes the mount read-only.
    pub read_only: bool,
    pub block: bool,
}

/// Why a claim cannot be used (yet), in upstream's words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ClaimError(pub String);

/// Reads the claim and its volume and checks them against the pod's use of `volume`.
pub async fn resolve(
    client: &kube::Client,
    pod: &Pod,
    volume: &str,
    claim_ref: &ClaimRef,
) -> Result<Bound, ClaimError> {
    let source = &claim_ref.source;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let claim_name = source.claim_name.as_str();
    let fail = |reason: String| {
        ClaimError(format!(
            "error processing PVC {namespace}/{claim_name}: {reason}"
        ))
    };
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let claim = super::read(claims.get(claim_name)).await.map_err(|e| {
        fail(format!(
            "failed to fetch PVC {namespace}/{claim_name} from API server. err={}",
            api_reason(&e)
        ))
    })?;
    if claim_ref.ephemeral && !owned_by(&claim, pod) {
        return Err(fail("not the ephemeral PVC for the pod".to_string()));
    }
    let pv_name = bound_volume(&claim, namespace, claim_name).map_err(&fail)?;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = super::read(pvs.get(&pv_name)).await.map_err(|e| {
        fail(format!(
            "failed to fetch PV {pv_name:?} from API server. err={}",
            api_reason(&e)
        ))
    })?;
    check_claim_ref(&pv, &pv_name, claim.metadata.uid.as_deref().unwrap_or("")).map_err(&fail)?;
    let block = pv.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block");
    // Upstream reports this one without the PVC prefix.
    check_mode(pod, volume, block).map_err(ClaimError)?;
    Ok(Bound {
        read_only: source.read_only.unwrap_or(false),
        block,
        pv,
    })
}

/// How the API server's refusal reads in Go's client (`persistentvolumeclaims "x" not found`).
fn api_reason(e: &super::ReadError) -> String {
    match e {
        super::ReadError::Api(kube::Error::Api(s)) => s.message.clone(),
        other => other.to_string(),
    }
}

/// The name of the volume a usable claim is bound to.
fn bound_volume(
    claim: &PersistentVolumeClaim,
    namespace: &str,
    name: &str,
) -> Result<String, String> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(format!(
            "can't start pod because PVC {namespace}/{name} is being deleted"
        ));
    }
    let phase = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("");
    let volume = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("");
    if phase != "Bound" || volume.is_empty() {
        return Err(format!(
            "PVC {namespace}/{name} has non-bound phase ({phase:?}) or empty pvc.Spec.VolumeName ({volume:?})"
        ));
    }
    Ok(volume.to_string())
}

fn check_claim_ref(pv: &PersistentVolume, name: &str, claim_uid: &str) -> Result<(), String> {
    let Some(claim_ref) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Err(format!(
            "found PV object {name:?} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        ));
    };
    let uid = claim_ref.uid.as_deref().unwrap_or("");
    if uid != claim_uid {
        return Err(format!(
            "found PV object {name:?} but its pv.Spec.ClaimRef.UID ({uid:?}) does not point to claim.UID ({claim_uid:?})"
        ));
    }
    Ok(())
}

/// A volume mounted by a container must be a file system; one a container uses as a device
/// must be a block volume.
pub fn check_mode(pod: &Pod, volume: &str, block: bool) -> Result<(), String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    let containers = || {
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
    };
    let mounted = containers()
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .any(|m| m.name == volume);
    let as_device = containers()
        .flat_map(|c| c.volume_devices.iter().flatten())
        .any(|d| d.name == volume);
    let mode = if block { "Block" } else { "Filesystem" };
    if mounted && block {
        return Err(format!(
            "volume {volume} has volumeMode {mode}, but is specified in volumeMounts"
        ));
    }
    if as_device && !block {
        return Err(format!(
            "volume {volume} has volumeMode {mode}, but is specified in volumeDevices"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ObjectReference, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
        PersistentVolumeSpec, PodSpec, VolumeDevice, VolumeMount,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn claim(phase: &str, volume: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                volume_name: (!volume.is_empty()).then(|| volume.to_string()),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some(phase.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_bound_claim_that_stays_gives_its_volume() {
        assert_eq!(
            bound_volume(&claim("Bound", "pv-1"), "ns", "data").unwrap(),
            "pv-1"
        );
        assert_eq!(
            bound_volume(&claim("Pending", ""), "ns", "data").unwrap_err(),
            r#"PVC ns/data has non-bound phase ("Pending") or empty pvc.Spec.VolumeName ("")"#
        );
        let mut going = claim("Bound", "pv-1");
        going.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(
            bound_volume(&going, "ns", "data").unwrap_err(),
            "can't start pod because PVC ns/data is being deleted"
        );
    }

    #[test]
    fn the_volume_must_point_back_at_the_claim() {
        let mut pv = PersistentVolume {
            spec: Some(PersistentVolumeSpec::default()),
            ..Default::default()
        };
        let e = check_claim_ref(&pv, "pv-1", "u1").unwrap_err();
        assert!(e.contains("nil pv.Spec.ClaimRef"), "{e}");
        pv.spec.as_mut().unwrap().claim_ref = Some(ObjectReference {
            uid: Some("u2".into()),
            ..Default::default()
        });
        assert_eq!(
            check_claim_ref(&pv, "pv-1", "u1").unwrap_err(),
            r#"found PV object "pv-1" but its pv.Spec.ClaimRef.UID ("u2") does not point to claim.UID ("u1")"#
        );
        pv.spec.as_mut().unwrap().claim_ref.as_mut().unwrap().uid = Some("u1".into());
        assert!(check_claim_ref(&pv, "pv-1", "u1").is_ok());
    }

    #[test]
    fn the_mode_must_match_the_use() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    volume_mounts: Some(vec![VolumeMount {
                        name: "fs".into(),
                        mount_path: "/d".into(),
                        ..Default::default()
                    }]),
                    volume_devices: Some(vec![VolumeDevice {
                        name: "dev".into(),
                        device_path: "/dev/xvda".into(),
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(check_mode(&pod, "fs", false).is_ok());
        assert!(check_mode(&pod, "dev", true).is_ok());
        assert_eq!(
            check_mode(&pod, "fs", true).unwrap_err(),
            "volume fs has volumeMode Block, but is specified in volumeMounts"
        );
        assert_eq!(
            check_mode(&pod, "dev", false).unwrap_err(),
            "volume dev has volumeMode Filesystem, but is specified in volumeDevices"
        );
    }

    #[test]
    fn an_ephemeral_volume_is_the_claim_its_pod_owns() {
        use k8s_openapi::api::core::v1::EphemeralVolumeSource;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let mut pod = Pod::default();
        pod.metadata.name = Some("web-0".into());
        pod.metadata.uid = Some("u-1".into());
        let v = Volume {
            name: "scratch".into(),
            ephemeral: Some(EphemeralVolumeSource::default()),
            ..Default::default()
        };
        let r = ClaimRef::of(&pod, &v).unwrap();
        assert_eq!(r.source.claim_name, "web-0-scratch");
        assert!(r.ephemeral);
        assert!(ClaimRef::of(&pod, &Volume::default()).is_none());
        let mut c = claim("Bound", "pv-1");
        assert!(!owned_by(&c, &pod));
        let owner = |uid: &str, controller: bool| OwnerReference {
            uid: uid.into(),
            controller: Some(controller),
            kind: "Pod".into(),
            ..Default::default()
        };
        c.metadata.owner_references = Some(vec![owner("u-1", false), owner("u-2", true)]);
        assert!(
            !owned_by(&c, &pod),
            "an owner that is not the controller does not count"
        );
        c.metadata.owner_references = Some(vec![owner("u-1", true)]);
        assert!(owned_by(&c, &pod));
    }
}
