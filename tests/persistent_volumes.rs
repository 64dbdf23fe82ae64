//! Pods with persistentVolumeClaim volumes, through the real API server and its volume
//! binder: a claim bound to a hostPath PersistentVolume is mounted at the volume's path
//! (read-write, or read-only when the claim's volume source says so), and a claim that is not
//! bound yet holds the pod in ContainerCreating with upstream's FailedMount event until it is.
//! A local PersistentVolume is bind-mounted into the pod's folder and given to its fsGroup,
//! refused with upstream's NodeAffinity event when pinned to another node, and unmounted when
//! the pod goes, its data left in place. A generic ephemeral volume is the claim the API
//! server's ephemeral volume controller makes for the pod (the bed's control plane enables
//! the v1.20 GenericEphemeralVolume gate); a claim of that name the pod does not own is
//! refused with upstream's message. An NFS volume (inline, or a PersistentVolume with its
//! mountOptions) is mounted with `mount -t nfs`; where the bed has no NFS (no mount.nfs, no
//! server), the pod waits with the mount command's words, as upstream's, and nothing of the
//! failed mount stays.

mod common;

use std::time::Duration;

use common::storage::{
    claim, create_bound, event_starting, mounts_under, pv, remove_claims_and_volumes, terminated,
};
use common::*;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

const NODE: &str = "krs-pv-node";
const WRITER: &str = "krs-pv-writer";
const READER: &str = "krs-pv-reader";
const WAITER: &str = "krs-pv-waiter";
const PV: &str = "krs-pv-host";
const LATE_PV: &str = "krs-pv-late";
const CLAIM: &str = "krs-pvc-host";
const LATE_CLAIM: &str = "krs-pvc-late";

fn host_pv(name: &str, path: &str, claim: &str) -> PersistentVolume {
    pv(
        name,
        claim,
        json!({"hostPath": {"path": path, "type": "Directory"}}),
    )
}

/// A pod on NODE that runs `script` once with the claim at /data; its termination message is
/// what the script wrote to /dev/termination-log.
fn claim_pod(name: &str, claim: &str, read_only: bool, script: &str) -> Pod {
    api_pod(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data",
                "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}}],
        },
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn claims_bound_to_host_path_volumes_mount_and_unbound_ones_wait() {
    // Kubelets sharing one containerd remove each other's pods.
    let _guard = serial();
    let (client, pods) = default_pods(&[WRITER, READER, WAITER]).await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    remove_claims_and_volumes(&client, &[CLAIM, LATE_CLAIM], &[PV, LATE_PV]).await;
    let host = tempfile::tempdir().unwrap();
    let host_path = host.path().to_string_lossy().to_string();
    std::fs::write(host.path().join("hello"), "from the host").unwrap();

    let post = PostParams::default();
    create_bound(&client, &host_pv(PV, &host_path, CLAIM), CLAIM).await;
    let mut k = Kubelet::new("persistent-volumes");
    k.start_as_node(NODE, &["--sync-frequency=10s"]);

    // Read-write: the pod reads the host's file and leaves one of its own.
    let writer = claim_pod(
        WRITER,
        CLAIM,
        false,
        "cat /data/hello > /dev/termination-log && echo written > /data/by-pod",
    );
    create_pod(&pods, &writer).await;
    assert_eq!(
        terminated(&pods, WRITER).await,
        "0 from the host",
        "{}",
        tail(&k.log(), 40)
    );
    assert_eq!(
        std::fs::read_to_string(host.path().join("by-pod")).unwrap(),
        "written\n"
    );

    // Read-only claim source: the container cannot write.
    let reader = claim_pod(
        READER,
        CLAIM,
        true,
        "if touch /data/nope 2>/dev/null; then echo rw; else echo ro; fi > /dev/termination-log",
    );
    create_pod(&pods, &reader).await;
    assert_eq!(terminated(&pods, READER).await, "0 ro");
    assert!(!host.path().join("nope").exists());

    // A claim whose volume does not exist yet stays Pending; the pod waits with upstream's event.
    claims
        .create(&post, &claim(LATE_CLAIM, LATE_PV))
        .await
        .unwrap();
    let waiter = claim_pod(
        WAITER,
        LATE_CLAIM,
        false,
        "cat /data/hello > /dev/termination-log",
    );
    create_pod(&pods, &waiter).await;
    let expected = format!(
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC default/{LATE_CLAIM}: PVC default/{LATE_CLAIM} has non-bound phase (\"Pending\") or empty pvc.Spec.VolumeName"
    );
    let message = event_starting(&client, WAITER, &expected, Duration::from_secs(60)).await;
    assert!(message.starts_with(&expected), "{message}");
    // The status patch is its own request and may land just after the event.
    let waiting = "the waiting pod's ContainerCreating status";
    wait_async(Duration::from_secs(20), waiting, || async {
        let p = pods.get(WAITER).await.ok()?;
        (waiting_reason(&p).as_deref() == Some("ContainerCreating")).then_some(())
    })
    .await;

    // Once the volume appears and binds, the pod starts on a later sync.
    pvs.create(&post, &host_pv(LATE_PV, &host_path, LATE_CLAIM))
        .await
        .unwrap();
    assert_eq!(terminated(&pods, WAITER).await, "0 from the host");

    delete_now(&pods, &[WRITER, READER, WAITER]).await;
    remove_claims_and_volumes(&client, &[CLAIM, LATE_CLAIM], &[PV, LATE_PV]).await;
    k.cleanup();
}

const LOCAL_NODE: &str = "krs-pv-local-node";
const LOCAL_POD: &str = "krs-pv-local";
const ELSEWHERE_POD: &str = "krs-pv-elsewhere";
const LOCAL_PV: &str = "krs-pv-local-here";
const ELSEWHERE_PV: &str = "krs-pv-local-elsewhere";
const LOCAL_CLAIM: &str = "krs-pvc-local-here";
const ELSEWHERE_CLAIM: &str = "krs-pvc-local-elsewhere";

fn local_pv(name: &str, path: &str, claim: &str, node: &str) -> PersistentVolume {
    pv(
        name,
        claim,
        json!({
            "local": {"path": path},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn local_volumes_are_bind_mounted_for_their_node_only() {
    // Kubelets sharing one containerd remove each other's pods.
    let _guard = serial();
    use std::os::unix::fs::MetadataExt;
    let (client, pods) = default_pods(&[LOCAL_POD, ELSEWHERE_POD]).await;
    remove_claims_and_volumes(
        &client,
        &[LOCAL_CLAIM, ELSEWHERE_CLAIM],
        &[LOCAL_PV, ELSEWHERE_PV],
    )
    .await;
    let disk = tempfile::tempdir().unwrap();
    let disk_path = disk.path().to_string_lossy().to_string();
    let here = local_pv(LOCAL_PV, &disk_path, LOCAL_CLAIM, LOCAL_NODE);
    create_bound(&client, &here, LOCAL_CLAIM).await;
    let elsewhere = local_pv(ELSEWHERE_PV, &disk_path, ELSEWHERE_CLAIM, "another-node");
    create_bound(&client, &elsewhere, ELSEWHERE_CLAIM).await;
    let mut k = Kubelet::new("persistent-local");
    k.start_as_node(LOCAL_NODE, &["--sync-frequency=10s"]);

    // The pod runs under a user of its own with an fsGroup: the volume is given to the group.
    let mut pod = claim_pod(
        LOCAL_POD,
        LOCAL_CLAIM,
        false,
        "echo hi > /data/by-pod && ls -ln /data/by-pod | awk '{print $4}' > /dev/termination-log",
    );
    pod.metadata.name = Some(LOCAL_POD.to_string());
    let spec = pod.spec.as_mut().unwrap();
    spec.node_name = Some(LOCAL_NODE.to_string());
    spec.security_context =
        Some(serde_json::from_value(json!({"runAsUser": 1000, "fsGroup": 2345})).unwrap());
    create_pod(&pods, &pod).await;
    assert_eq!(
        terminated(&pods, LOCAL_POD).await,
        "0 2345",
        "{}",
        tail(&k.log(), 40)
    );
    let root = std::fs::metadata(disk.path()).unwrap();
    assert_eq!(root.gid(), 2345);
    assert_eq!(
        root.mode() & 0o2070,
        0o2070,
        "group rwx and setgid on the volume's root"
    );
    assert_eq!(
        std::fs::read_to_string(disk.path().join("by-pod")).unwrap(),
        "hi\n"
    );

    // A volume pinned to another node is refused before any mount.
    let mut elsewhere = claim_pod(ELSEWHERE_POD, ELSEWHERE_CLAIM, false, "true");
    elsewhere.spec.as_mut().unwrap().node_name = Some(LOCAL_NODE.to_string());
    create_pod(&pods, &elsewhere).await;
    let expected = format!(
        "MountVolume.NodeAffinity check failed for volume \"{ELSEWHERE_PV}\" : no matching NodeSelectorTerms"
    );
    let message = event_starting(&client, ELSEWHERE_POD, &expected, Duration::from_secs(60)).await;
    assert_eq!(message, expected);

    // Deleted, the pod leaves no mount behind and the volume's data stays.
    delete_now(&pods, &[LOCAL_POD, ELSEWHERE_POD]).await;
    let pods_dir = k.root_dir.join("pods");
    wait_for(Duration::from_secs(60), "the pods' mounts to go", || {
        mounts_under(&pods_dir).is_empty().then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(disk.path().join("by-pod")).unwrap(),
        "hi\n"
    );

    remove_claims_and_volumes(
        &client,
        &[LOCAL_CLAIM, ELSEWHERE_CLAIM],
        &[LOCAL_PV, ELSEWHERE_PV],
    )
    .await;
    k.cleanup();
}

const EPHEMERAL_NODE: &str = "krs-pv-ephemeral-node";
const EPHEMERAL_POD: &str = "krs-pv-ephemeral";
const EPHEMERAL_PV: &str = "krs-pv-ephemeral-vol";
const IMPOSTOR_POD: &str = "krs-pv-impostor";
const IMPOSTOR_PV: &str = "krs-pv-impostor-vol";

/// A pod on EPHEMERAL_NODE whose "scratch" volume is a generic ephemeral one: its claim is
/// `<name>-scratch`.
fn ephemeral_pod(name: &str, script: &str) -> Pod {
    api_pod(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": EPHEMERAL_NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }],
            "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "resources": {"requests": {"storage": "1Mi"}},
            }}}}],
        },
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn generic_ephemeral_volumes_are_the_claims_their_pods_own() {
    // Kubelets sharing one containerd remove each other's pods.
    let _guard = serial();
    let (client, pods) = default_pods(&[EPHEMERAL_POD, IMPOSTOR_POD]).await;
    let claim_name = format!("{EPHEMERAL_POD}-scratch");
    let impostor_claim = format!("{IMPOSTOR_POD}-scratch");
    remove_claims_and_volumes(
        &client,
        &[&claim_name, &impostor_claim],
        &[EPHEMERAL_PV, IMPOSTOR_PV],
    )
    .await;
    let host = tempfile::tempdir().unwrap();
    let host_path = host.path().to_string_lossy().to_string();
    // Reserved for the claim the controller will make, so the binder binds the two.
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let post = PostParams::default();
    pvs.create(&post, &host_pv(EPHEMERAL_PV, &host_path, &claim_name))
        .await
        .unwrap();
    let mut k = Kubelet::new("persistent-ephemeral");
    k.start_as_node(EPHEMERAL_NODE, &["--sync-frequency=10s"]);

    let pod = ephemeral_pod(
        EPHEMERAL_POD,
        "echo hi > /scratch/by-pod && echo written > /dev/termination-log",
    );
    let uid = create_pod(&pods, &pod).await;
    assert_eq!(
        terminated(&pods, EPHEMERAL_POD).await,
        "0 written",
        "{}",
        tail(&k.log(), 60)
    );
    assert_eq!(
        std::fs::read_to_string(host.path().join("by-pod")).unwrap(),
        "hi\n"
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let made = claims.get(&claim_name).await.unwrap();
    let owner = made.metadata.owner_references.unwrap_or_default();
    assert!(owner.iter().any(|o| o.uid == uid), "{owner:?}");

    // A claim of the pod's volume's name that the pod does not own is not its volume.
    create_bound(
        &client,
        &host_pv(IMPOSTOR_PV, &host_path, &impostor_claim),
        &impostor_claim,
    )
    .await;
    create_pod(&pods, &ephemeral_pod(IMPOSTOR_POD, "true")).await;
    let expected = format!(
        "Unable to attach or mount volumes: unmounted volumes=[scratch], unattached volumes=[], failed to process volumes=[scratch]: error processing PVC default/{impostor_claim}: not the ephemeral PVC for the pod"
    );
    let message = event_starting(&client, IMPOSTOR_POD, &expected, Duration::from_secs(60)).await;
    assert!(message.starts_with(&expected), "{message}");
    // The status may follow the event by a moment.
    wait_async(Duration::from_secs(30), "ContainerCreating", || async {
        let p = pods.get(IMPOSTOR_POD).await.ok()?;
        (waiting_reason(&p).as_deref() == Some("ContainerCreating")).then_some(())
    })
    .await;

    delete_now(&pods, &[EPHEMERAL_POD, IMPOSTOR_POD]).await;
    wait_for(
        Duration::from_secs(30),
        "no mount under the root dir",
        || mounts_under(&k.root_dir).is_empty().then_some(()),
    );
    remove_claims_and_volumes(
        &client,
        &[&claim_name, &impostor_claim],
        &[EPHEMERAL_PV, IMPOSTOR_PV],
    )
    .await;
    k.cleanup();
}

const NFS_NODE: &str = "krs-pv-nfs-node";
const NFS_INLINE: &str = "krs-pv-nfs-inline";
const NFS_CLAIMED: &str = "krs-pv-nfs-claimed";
const NFS_PV: &str = "krs-pv-nfs";
const NFS_CLAIM: &str = "krs-pvc-nfs";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::await_holding_lock)]
async fn nfs_volumes_wait_with_the_mount_commands_words() {
    // Kubelets sharing one containerd remove each other's pods.
    let _guard = serial();
    let (client, pods) = default_pods(&[NFS_INLINE, NFS_CLAIMED]).await;
    remove_claims_and_volumes(&client, &[NFS_CLAIM], &[NFS_PV]).await;
    // Loopback only: no NFS server listens there, so the mount fails wherever it gets to.
    let mut nfs_pv = pv(
        NFS_PV,
        NFS_CLAIM,
        json!({"nfs": {"server": "127.0.0.1", "path": "/exports/claimed"}}),
    );
    if let Some(spec) = nfs_pv.spec.as_mut() {
        spec.mount_options = Some(vec!["retry=0".into(), "soft".into()]);
    }
    create_bound(&client, &nfs_pv, NFS_CLAIM).await;
    let mut k = Kubelet::new("persistent-nfs");
    k.start_as_node(NFS_NODE, &["--sync-frequency=10s"]);

    let inline = api_pod(json!({
        "metadata": {"name": NFS_INLINE},
        "spec": {
            "nodeName": NFS_NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "share", "mountPath": "/share"}],
            }],
            "volumes": [{"name": "share",
                "nfs": {"server": "127.0.0.1", "path": "/exports/inline", "readOnly": true}}],
        },
    }));
    let inline_uid = create_pod(&pods, &inline).await;
    let mut claimed = claim_pod(NFS_CLAIMED, NFS_CLAIM, false, "true");
    if let Some(spec) = claimed.spec.as_mut() {
        spec.node_name = Some(NFS_NODE.into());
    }
    let claimed_uid = create_pod(&pods, &claimed).await;

    let pods_dir = k.root_dir.join("pods");
    let expected = [
        (
            NFS_INLINE,
            format!(
                "MountVolume.SetUp failed for volume \"share\" : mount failed: exit status 32\nMounting command: mount\nMounting arguments: -t nfs -o ro 127.0.0.1:/exports/inline {}/{inline_uid}/volumes/kubernetes.io~nfs/share\nOutput: ",
                pods_dir.display()
            ),
        ),
        (
            NFS_CLAIMED,
            format!(
                "MountVolume.SetUp failed for volume \"{NFS_PV}\" : mount failed: exit status 32\nMounting command: mount\nMounting arguments: -t nfs -o retry=0,soft 127.0.0.1:/exports/claimed {}/{claimed_uid}/volumes/kubernetes.io~nfs/{NFS_PV}\nOutput: ",
                pods_dir.display()
            ),
        ),
    ];
    for (pod, prefix) in &expected {
        let message = event_starting(&client, pod, prefix, Duration::from_secs(180)).await;
        assert!(
            message.len() > prefix.len(),
            "the command's output: {message}"
        );
        let p = pods.get(pod).await.unwrap();
        assert_eq!(waiting_reason(&p).as_deref(), Some("ContainerCreating"));
    }
    // Nothing of the failed mounts stays: no NFS mount, no mount point folder (between two
    // syncs' tries).
    wait_for(
        Duration::from_secs(30),
        "no trace of the failed mounts",
        || {
            let traces: Vec<_> = [&inline_uid, &claimed_uid]
                .iter()
                .filter_map(|uid| {
                    std::fs::read_dir(pods_dir.join(uid).join("volumes/kubernetes.io~nfs")).ok()
                })
                .flat_map(|d| d.flatten().map(|e| e.path()))
                .collect();
            // The pods' token volumes stay mounted: only NFS mounts count.
            let nfs_mounts = mounts_under(&k.root_dir)
                .into_iter()
                .filter(|m| m.contains("kubernetes.io~nfs"))
                .count();
            (traces.is_empty() && nfs_mounts == 0).then_some(())
        },
    );

    delete_now(&pods, &[NFS_INLINE, NFS_CLAIMED]).await;
    remove_claims_and_volumes(&client, &[NFS_CLAIM], &[NFS_PV]).await;
    k.cleanup();
}
