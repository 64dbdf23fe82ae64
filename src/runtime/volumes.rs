//! Volumes the kubelet can provide without an API server: hostPath and emptyDir (on disk or
//! in memory), plus the per-container termination-message file; and the writing of the files
//! `api_volumes` fetched. Everything is prepared on the host and handed to the runtime as bind
//! mounts.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, Volume};

use crate::cri::api;
use crate::runtime::paths;

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("volume {volume:?}: {kind} volumes are not supported by this version of kubelet-rs")]
    Unsupported { volume: String, kind: &'static str },
    #[error("volume {volume:?}: hostPath {path} {problem}")]
    HostPath {
        volume: String,
        path: String,
        problem: String,
    },
    #[error("volume {volume:?}: {reason}")]
    Source { volume: String, reason: String },
    #[error("volumeMount {mount:?}: invalid subPath {sub_path:?}")]
    SubPath { mount: String, sub_path: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One file of a volume: its path inside the volume, contents and mode. The API-backed
/// volumes (see `api_volumes`) are fetched into these and written here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEntry {
    pub path: String,
    pub data: Vec<u8>,
    pub mode: u32,
}

/// The files of every API-backed volume a pod uses, by volume name.
pub type Fetched = HashMap<String, Vec<FileEntry>>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where an emptyDir lives on the host, as upstream lays it out.
pub fn empty_dir_path(pod_dir: &Path, volume: &str) -> PathBuf {
    pod_dir
        .join("volumes")
        .join("kubernetes.io~empty-dir")
        .join(volume)
}

fn volume_kind(v: &Volume) -> &'static str {
    match v {
        v if v.config_map.is_some() => "configMap",
        v if v.secret.is_some() => "secret",
        v if v.projected.is_some() => "projected",
        v if v.downward_api.is_some() => "downwardAPI",
        v if v.persistent_volume_claim.is_some() => "persistentVolumeClaim",
        v if v.csi.is_some() => "csi",
        v if v.nfs.is_some() => "nfs",
        v if v.ephemeral.is_some() => "ephemeral",
        v if v.image.is_some() => "image",
        _ => "this kind of",
    }
}

/// Checks or creates a hostPath per its `type`, like upstream's hostPath type checker.
fn prepare_host_path(volume: &str, path: &str, kind: &str) -> Result<(), VolumeError> {
    let p = Path::new(path);
    let bad = |problem: &str| VolumeError::HostPath {
        volume: volume.to_string(),
        path: path.to_string(),
        problem: problem.to_string(),
    };
    let meta = std::fs::metadata(p);
    use std::os::unix::fs::FileTypeExt;
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => match meta {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(bad("is not a directory")),
            Err(_) => std::fs::create_dir_all(p).map_err(io(p)),
        },
        "FileOrCreate" => match meta {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(bad("is not a file")),
            Err(_) => {
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent).map_err(io(parent))?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map(|_| ())
                    .map_err(io(p))
            }
        },
        _ => {
            let m = meta.map_err(|_| bad("does not exist"))?;
            let ft = m.file_type();
            let ok = match kind {
                "Directory" => ft.is_dir(),
                "File" => ft.is_file(),
                "Socket" => ft.is_socket(),
                "CharDevice" => ft.is_char_device(),
                "BlockDevice" => ft.is_block_device(),
                _ => return Err(bad(&format!("has unknown type {kind:?}"))),
            };
            if ok {
                Ok(())
            } else {
                Err(bad(&format!("is not a {kind}")))
            }
        }
    }
}

fn is_mount_point(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = path.to_string_lossy();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mp| mp == wanted)
}

/// An emptyDir with medium Memory is a tmpfs of its own, so its contents never touch disk.
fn mount_tmpfs(path: &Path) -> Result<(), VolumeError> {
    if is_mount_point(path) {
        return Ok(());
    }
    crate::sys::mount_tmpfs(path).map_err(|source| VolumeError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// An emptyDir is open to every user (0777, as upstream makes it, whatever the umask): a
/// container running as a non-root user must be able to write to it.
const EMPTY_DIR_MODE: u32 = 0o777;

fn prepare_empty_dir(pod_dir: &Path, v: &Volume) -> Result<PathBuf, VolumeError> {
    let dir = empty_dir_path(pod_dir, &v.name);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let memory = v
        .empty_dir
        .as_ref()
        .and_then(|e| e.medium.as_deref())
        .is_some_and(|m| m == "Memory");
    if memory {
        mount_tmpfs(&dir)?;
    }
    // After the mount: the mode that counts is the tmpfs root's, not the folder's beneath it.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(EMPTY_DIR_MODE))
        .map_err(io(&dir))?;
    Ok(dir)
}

/// Writes the files of a secret/configMap/projected volume into its folder (a tmpfs for
/// anything holding secrets), replacing what an earlier container start wrote.
fn prepare_api_volume(
    pod_dir: &Path,
    v: &Volume,
    files: &[FileEntry],
) -> Result<PathBuf, VolumeError> {
    let kind = if v.secret.is_some() {
        "kubernetes.io~secret"
    } else if v.config_map.is_some() {
        "kubernetes.io~configmap"
    } else {
        "kubernetes.io~projected"
    };
    let dir = pod_dir.join("volumes").join(kind).join(&v.name);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    if v.config_map.is_none() {
        mount_tmpfs(&dir)?;
    }
    for f in files {
        let target = join_sub_path(&dir, &v.name, &f.path)?;
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let tmp = target.with_extension("krs-tmp");
        std::fs::write(&tmp, &f.data).map_err(io(&tmp))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(f.mode))
            .map_err(io(&tmp))?;
        std::fs::rename(&tmp, &target).map_err(io(&target))?;
    }
    Ok(dir)
}

/// A subPath must stay inside its volume.
fn join_sub_path(base: &Path, mount: &str, sub_path: &str) -> Result<PathBuf, VolumeError> {
    let sub = Path::new(sub_path);
    let escapes = sub.is_absolute()
        || sub
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)));
    if escapes {
        return Err(VolumeError::SubPath {
            mount: mount.to_string(),
            sub_path: sub_path.to_string(),
        });
    }
    Ok(base.join(sub))
}

fn propagation(mode: Option<&str>) -> api::MountPropagation {
    match mode {
        Some("HostToContainer") => api::MountPropagation::PropagationHostToContainer,
        Some("Bidirectional") => api::MountPropagation::PropagationBidirectional,
        _ => api::MountPropagation::PropagationPrivate,
    }
}

/// The bind mounts for one container: its volumeMounts, then the termination-message file.
/// Blocking (filesystem work); call it off the async threads.
pub fn container_mounts(
    pod: &Pod,
    container: &Container,
    root_dir: &Path,
    restart_count: u32,
    fetched: &Fetched,
) -> Result<Vec<api::Mount>, VolumeError> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let pod_dir = paths::pod_dir(root_dir, uid);
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or(&[]);
    let mut mounts = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        // Validation guarantees the volume exists; a missing one is simply not mounted.
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else {
            continue;
        };
        let base = if let Some(hp) = &v.host_path {
            prepare_host_path(&v.name, &hp.path, hp.type_.as_deref().unwrap_or(""))?;
            PathBuf::from(&hp.path)
        } else if v.empty_dir.is_some() {
            prepare_empty_dir(&pod_dir, v)?
        } else if let Some(files) = fetched.get(&v.name) {
            prepare_api_volume(&pod_dir, v, files)?
        } else {
            return Err(VolumeError::Unsupported {
                volume: v.name.clone(),
                kind: volume_kind(v),
            });
        };
        let host = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => {
                let p = join_sub_path(&base, &m.name, sub)?;
                if !p.exists() {
                    std::fs::create_dir_all(&p).map_err(io(&p))?;
                }
                p
            }
            None => base,
        };
        mounts.push(api::Mount {
            container_path: m.mount_path.clone(),
            host_path: host.to_string_lossy().into_owned(),
            readonly: m.read_only.unwrap_or(false),
            propagation: propagation(m.mount_propagation.as_deref()) as i32,
            ..Default::default()
        });
    }
    if let Some(target) = container
        .termination_message_path
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        let dir = pod_dir.join("containers").join(&container.name);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let file = dir.join(format!("{restart_count:08x}"));
        std::fs::write(&file, b"").map_err(io(&file))?;
        // Writable by any user, as upstream makes it: the container may run as non-root.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666))
            .map_err(io(&file))?;
        mounts.push(api::Mount {
            container_path: target.to_string(),
            host_path: file.to_string_lossy().into_owned(),
            ..Default::default()
        });
    }
    Ok(mounts)
}

/// The kubelet-managed /etc/hosts: localhost entries, the pod's own name on each pod IP, and
/// the pod's hostAliases; host-network pods get the node's file plus their aliases.
pub fn etc_hosts_content(
    pod: &Pod,
    pod_ips: &[String],
    cluster_domain: &str,
    node_hosts: &str,
) -> String {
    let spec = pod.spec.as_ref();
    let mut out = String::new();
    if spec.and_then(|s| s.host_network).unwrap_or(false) {
        out.push_str(node_hosts);
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
    } else {
        out.push_str(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
        );
        let hostname = crate::runtime::sandbox::pod_hostname(pod);
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let domain = spec
            .and_then(|s| s.subdomain.as_deref())
            .filter(|d| !d.is_empty() && !cluster_domain.is_empty())
            .map(|sub| format!("{sub}.{ns}.svc.{cluster_domain}"));
        for ip in pod_ips {
            match &domain {
                Some(d) => out.push_str(&format!("{ip}\t{hostname}.{d}\t{hostname}\n")),
                None => out.push_str(&format!("{ip}\t{hostname}\n")),
            }
        }
    }
    let aliases = spec.and_then(|s| s.host_aliases.as_deref()).unwrap_or(&[]);
    if !aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.clone().unwrap_or_default().join("\t");
            out.push_str(&format!("{}\t{names}\n", a.ip));
        }
    }
    out
}

/// Writes the pod's hosts file and returns its mount, unless the container mounts its own
/// /etc/hosts or the pod has no IP yet (upstream's conditions).
pub fn etc_hosts_mount(
    pod: &Pod,
    container: &Container,
    root_dir: &Path,
    pod_ips: &[String],
    cluster_domain: &str,
) -> Result<Option<api::Mount>, VolumeError> {
    let own = container
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == "/etc/hosts");
    if own || pod_ips.is_empty() {
        return Ok(None);
    }
    let node_hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let content = etc_hosts_content(pod, pod_ips, cluster_domain, &node_hosts);
    let dir = paths::pod_dir(root_dir, pod.metadata.uid.as_deref().unwrap_or_default());
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let file = dir.join("etc-hosts");
    let tmp = dir.join(".etc-hosts.tmp");
    std::fs::write(&tmp, content).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &file).map_err(io(&file))?;
    Ok(Some(api::Mount {
        container_path: "/etc/hosts".into(),
        host_path: file.to_string_lossy().into_owned(),
        ..Default::default()
    }))
}

/// Upstream caps the termination message at 4 KiB.
pub const MAX_TERMINATION_MESSAGE: u64 = 4096;

/// The termination message a container left in its mounted file, if any.
pub fn read_termination_message(status: &api::ContainerStatus, target: &str) -> Option<String> {
    use std::io::Read;
    let mount = status.mounts.iter().find(|m| m.container_path == target)?;
    let mut buf = Vec::new();
    std::fs::File::open(&mount.host_path)
        .ok()?
        .take(MAX_TERMINATION_MESSAGE)
        .read_to_end(&mut buf)
        .ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    (!text.is_empty()).then_some(text)
}

/// Upstream's fallback: the end of the container's log (at most 80 lines, 2 KiB), used as the
/// message when the container failed without writing one and asked for FallbackToLogsOnError.
pub fn message_from_log(log_path: &str) -> Option<String> {
    const MAX_BYTES: usize = 2048;
    const MAX_LINES: usize = 80;
    let text = std::fs::read_to_string(log_path).ok()?;
    let lines: Vec<&str> = text
        .lines()
        // CRI log lines: <time> <stream> <P|F> <content>
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect();
    let mut out = lines[lines.len().saturating_sub(MAX_LINES)..].join("\n");
    if out.len() > MAX_BYTES {
        let mut cut = out.len() - MAX_BYTES;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = out[cut..].to_string();
    }
    (!out.is_empty()).then_some(out)
}

/// Unmounts in-memory emptyDirs and removes the pod's folder, refusing to descend into any
/// other mount (a volume still mounted there must not have its contents deleted).
pub fn remove_pod_dir(root_dir: &Path, uid: &str) -> Result<(), VolumeError> {
    let pod_dir = paths::pod_dir(root_dir, uid);
    if !pod_dir.exists() {
        return Ok(());
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = format!("{}/", pod_dir.to_string_lossy());
    let mounted: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|mp| mp.starts_with(&prefix))
        .map(PathBuf::from)
        .collect();
    // Only the tmpfs mounts this kubelet makes itself may be taken down here.
    let ours: Vec<PathBuf> = [
        "kubernetes.io~empty-dir",
        "kubernetes.io~secret",
        "kubernetes.io~projected",
    ]
    .iter()
    .map(|k| pod_dir.join("volumes").join(k))
    .collect();
    for mp in &mounted {
        if !mp.parent().is_some_and(|p| ours.iter().any(|o| o == p)) {
            return Err(VolumeError::HostPath {
                volume: String::new(),
                path: mp.to_string_lossy().into_owned(),
                problem: "is still mounted; the pod folder is left in place".into(),
            });
        }
        crate::sys::unmount_detach(mp).map_err(|source| VolumeError::Io {
            path: mp.clone(),
            source,
        })?;
    }
    std::fs::remove_dir_all(&pod_dir).map_err(io(&pod_dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        EmptyDirVolumeSource, HostPathVolumeSource, PodSpec, VolumeMount,
    };

    fn pod_with(volumes: Vec<Volume>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u1".into());
        pod.spec = Some(PodSpec {
            volumes: Some(volumes),
            ..Default::default()
        });
        pod
    }

    fn mount(name: &str, path: &str, sub: Option<&str>) -> VolumeMount {
        VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            sub_path: sub.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn host_path_and_empty_dir_become_bind_mounts() {
        let root = tempfile::tempdir().unwrap();
        let host = root.path().join("data");
        let pod = pod_with(vec![
            Volume {
                name: "data".into(),
                host_path: Some(HostPathVolumeSource {
                    path: host.to_string_lossy().into(),
                    type_: Some("DirectoryOrCreate".into()),
                }),
                ..Default::default()
            },
            Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
        ]);
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![
                mount("data", "/data", None),
                mount("scratch", "/tmp/s", Some("x/y")),
            ]),
            termination_message_path: Some("/dev/termination-log".into()),
            ..Default::default()
        };
        let mounts = container_mounts(&pod, &c, root.path(), 3, &Fetched::new()).unwrap();
        assert_eq!(mounts.len(), 3);
        assert!(host.is_dir(), "DirectoryOrCreate did not create the folder");
        assert_eq!(mounts[0].host_path, host.to_string_lossy());
        let scratch_root = empty_dir_path(&paths::pod_dir(root.path(), "u1"), "scratch");
        let scratch = scratch_root.join("x/y");
        assert!(scratch.is_dir());
        let mode = std::fs::metadata(&scratch_root)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o7777,
            0o777,
            "an emptyDir is writable by every user"
        );
        assert_eq!(mounts[2].container_path, "/dev/termination-log");
        assert!(mounts[2].host_path.ends_with("containers/c/00000003"));
        let mode = std::fs::metadata(&mounts[2].host_path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o777,
            0o666,
            "any user may write the termination message"
        );
        remove_pod_dir(root.path(), "u1").unwrap();
        assert!(!paths::pod_dir(root.path(), "u1").exists());
        assert!(host.is_dir(), "hostPath data must survive pod removal");
    }

    #[test]
    fn managed_hosts_file() {
        use k8s_openapi::api::core::v1::HostAlias;
        let mut pod = pod_with(vec![]);
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("ns".into());
        let spec = pod.spec.as_mut().unwrap();
        spec.subdomain = Some("sub".into());
        spec.host_aliases = Some(vec![HostAlias {
            ip: "1.2.3.4".into(),
            hostnames: Some(vec!["foo".into(), "bar".into()]),
        }]);
        let text = etc_hosts_content(&pod, &["10.0.0.7".into()], "cluster.local", "");
        assert!(text.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(
            text.contains("10.0.0.7\tweb.sub.ns.svc.cluster.local\tweb\n"),
            "{text}"
        );
        assert!(
            text.ends_with("\n# Entries added by HostAliases.\n1.2.3.4\tfoo\tbar\n"),
            "{text}"
        );
        pod.spec.as_mut().unwrap().host_network = Some(true);
        let text = etc_hosts_content(
            &pod,
            &["10.0.0.7".into()],
            "cluster.local",
            "127.0.0.1 node\n",
        );
        assert!(
            text.starts_with("127.0.0.1 node\n\n# Entries added by HostAliases."),
            "{text}"
        );
    }

    #[test]
    fn host_path_types_are_checked() {
        let root = tempfile::tempdir().unwrap();
        let missing = root.path().join("nope");
        let err = prepare_host_path("v", &missing.to_string_lossy(), "Directory").unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        let file = root.path().join("f");
        prepare_host_path("v", &file.to_string_lossy(), "FileOrCreate").unwrap();
        assert!(file.is_file());
        assert!(prepare_host_path("v", &file.to_string_lossy(), "Directory").is_err());
    }

    #[test]
    fn sub_path_cannot_escape_and_unsupported_volumes_are_named() {
        assert!(join_sub_path(Path::new("/v"), "m", "../etc").is_err());
        assert!(join_sub_path(Path::new("/v"), "m", "/etc").is_err());
        let pod = pod_with(vec![Volume {
            name: "cfg".into(),
            config_map: Some(Default::default()),
            ..Default::default()
        }]);
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![mount("cfg", "/cfg", None)]),
            ..Default::default()
        };
        let err =
            container_mounts(&pod, &c, Path::new("/nonexistent"), 0, &Fetched::new()).unwrap_err();
        assert!(err.to_string().contains("configMap"), "{err}");
    }
}
