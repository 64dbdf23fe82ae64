//! One sync's plan for a pod's volumes, and its blocking file work: what each volume takes
//! (decided and fetched before, in `VolumeManager::setup`), carried out on a blocking thread
//! (hostPath checks, emptyDir folders and tmpfs, the kubelet-written volumes, local and NFS
//! mounts), and the failures as upstream words them.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Volume;
use tracing::debug;

use super::atomic_writer::{self, FileEntry, Ownership};
use super::empty_dir::{self, Medium};
use super::in_place::MeasuredBy;
use super::{
    CONFIG_MAP, DOWNWARD_API, PROJECTED, PodVolumes, SECRET, csi, host_path, nfs, persistent,
    volume_dir,
};

pub(super) fn kind_name(v: &Volume) -> &'static str {
    match v {
        v if v.persistent_volume_claim.is_some() => "persistentVolumeClaim",
        v if v.csi.is_some() => "csi",
        v if v.nfs.is_some() => "nfs",
        v if v.ephemeral.is_some() => "ephemeral",
        v if v.image.is_some() => "image",
        _ => "this kind of",
    }
}

/// What setting up one volume takes, decided (and fetched) before the blocking file work.
pub(super) enum Plan {
    HostPath {
        path: String,
        kind: String,
        read_only: bool,
    },
    EmptyDir {
        medium: Medium,
    },
    Write {
        plugin: &'static str,
        files: Vec<FileEntry>,
        /// The size of its tmpfs, for the plugins that keep their files in memory.
        memory_size: Option<u64>,
    },
    /// The contents could not be had; an earlier copy, if there is one, stays in use.
    FetchFailed {
        plugin: &'static str,
        reason: String,
    },
    Unsupported(&'static str),
    /// A claim or an inline CSI volume, resolved as far as it could be (a CSI volume is set up
    /// apart: it is not blocking work).
    Resolved(persistent::Resolved),
    Nfs(nfs::NfsMount),
    /// An image volume, which only the runtime can mount.
    Image {
        reason: String,
    },
}

pub(super) fn written_plugin(v: &Volume) -> &'static str {
    if v.secret.is_some() {
        SECRET
    } else if v.config_map.is_some() {
        CONFIG_MAP
    } else if v.downward_api.is_some() {
        DOWNWARD_API
    } else {
        PROJECTED
    }
}

/// A volume that could not be set up (or refreshed) this time.
pub(super) struct Failure {
    pub(super) volume: String,
    pub(super) reason: String,
    /// An earlier setup is in place and stays in use.
    pub(super) stale_copy_in_use: bool,
    pub(super) kind: FailureKind,
}

/// Which step failed, which decides how upstream words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FailureKind {
    SetUp,
    /// The volume could not be worked out from the API: nothing was tried on the node.
    Process,
    NodeAffinity,
    /// The volume is not attached to the node (yet).
    WaitForAttach,
    /// The node-wide staging of the volume.
    MountDevice,
    /// The volume's plugin refused it before any work (an inline CSI volume whose driver does
    /// not take inline volumes).
    NewMounter,
}

impl FailureKind {
    /// The step as upstream's "MountVolume.<step> failed" names it; None for a volume that
    /// never reached the node.
    pub(super) fn step(self) -> Option<&'static str> {
        match self {
            FailureKind::Process => None,
            FailureKind::SetUp => Some("SetUp"),
            FailureKind::NodeAffinity => Some("NodeAffinity check"),
            FailureKind::WaitForAttach => Some("WaitForAttach"),
            FailureKind::MountDevice => Some("MountDevice"),
            FailureKind::NewMounter => Some("NewMounter initialization"),
        }
    }
}

#[derive(Default)]
pub(super) struct Applied {
    pub(super) volumes: PodVolumes,
    pub(super) failures: Vec<Failure>,
}

pub(super) fn apply(pod_dir: &Path, plans: Vec<(String, Plan)>, own: Ownership) -> Applied {
    let mut out = Applied::default();
    for (name, plan) in plans {
        // On failure: why, and the earlier copy that stays in use, if any.
        let mut kind = FailureKind::SetUp;
        // Upstream names a claim's volume by the PersistentVolume's name.
        let mut shown = name.clone();
        let result: Result<PathBuf, (String, Option<PathBuf>)> = match plan {
            Plan::HostPath {
                path,
                kind,
                read_only,
            } => {
                if read_only {
                    out.volumes.set_read_only(&name);
                }
                host_path::prepare(&path, &kind)
                    .map(|()| PathBuf::from(path))
                    .map_err(|e| (e.to_string(), None))
            }
            Plan::EmptyDir { medium } => {
                let dir = empty_dir::path(pod_dir, &name);
                empty_dir::prepare(&dir, medium, own.fs_group)
                    .map(|()| dir.clone())
                    .map_err(|e| (format!("{}: {e}", dir.display()), None))
            }
            Plan::Write {
                plugin,
                files,
                memory_size,
            } => {
                let dir = volume_dir(pod_dir, plugin, &name);
                write_volume(&dir, plugin, &files, own, memory_size).map(|()| dir)
            }
            Plan::FetchFailed { plugin, reason } => {
                let dir = volume_dir(pod_dir, plugin, &name);
                Err((reason, has_copy(&dir).then_some(dir)))
            }
            Plan::Nfs(m) => {
                if m.read_only {
                    out.volumes.set_read_only(&name);
                }
                let dir = volume_dir(pod_dir, nfs::NFS, &name);
                nfs::set_up(&dir, &m).map(|()| dir).map_err(|e| (e, None))
            }
            Plan::Image { reason } => Err((reason, None)),
            Plan::Unsupported(kind) => Err((
                format!("{kind} volumes are not supported by this version of kubelet-rs"),
                None,
            )),
            Plan::Resolved(resolved) => match resolved {
                persistent::Resolved::HostPath {
                    path,
                    kind: type_,
                    read_only,
                } => {
                    if read_only {
                        out.volumes.set_read_only(&name);
                    }
                    host_path::prepare(&path, &type_)
                        .map(|()| PathBuf::from(path))
                        .map_err(|e| (e.to_string(), None))
                }
                persistent::Resolved::Nfs { pv, mount } => {
                    if mount.read_only {
                        out.volumes.set_read_only(&name);
                    }
                    let dir = volume_dir(pod_dir, nfs::NFS, &pv);
                    shown = pv;
                    nfs::set_up(&dir, &mount)
                        .map(|()| dir)
                        .map_err(|e| (e, None))
                }
                persistent::Resolved::Local(m) => {
                    shown = m.pv.clone();
                    if m.read_only {
                        out.volumes.set_read_only(&name);
                    }
                    persistent::local::set_up(pod_dir, &m).map_err(|e| (e, None))
                }
                // Only without a plugin manager (unit tests): nothing could mount it.
                persistent::Resolved::Csi(_) => Err((
                    "no CSI driver is registered with this kubelet".to_string(),
                    None,
                )),
                persistent::Resolved::Failed {
                    shown: s,
                    kind: k,
                    reason,
                } => {
                    shown = s;
                    kind = k;
                    Err((reason, None))
                }
            },
        };
        match result {
            Ok(dir) => out.volumes.insert(&name, dir),
            Err((reason, stale)) => {
                let stale_copy_in_use = stale.is_some();
                if let Some(dir) = stale {
                    out.volumes.insert(&name, dir);
                }
                out.failures.push(Failure {
                    volume: shown,
                    reason,
                    stale_copy_in_use,
                    kind,
                });
            }
        }
    }
    out
}

/// What a claim or inline CSI volume set up once per pod keeps: its claim (namespace, name),
/// if any, how its usage is read, and how it grows when its claim does.
pub(super) struct Kept {
    pub claim: Option<(String, String)>,
    pub measured_by: MeasuredBy,
    pub expandable: Option<std::sync::Arc<csi::expand::Expandable>>,
    pub republish: bool,
}

/// How the stats provider reads a claim's volume, as upstream's plugin of its kind does.
pub(super) fn measured_by(resolved: &persistent::Resolved) -> MeasuredBy {
    match resolved {
        // A device has no file system the kubelet could measure (upstream's v1.20 neither).
        persistent::Resolved::Local(m) if m.block => MeasuredBy::Nothing,
        persistent::Resolved::Csi(vol) if vol.block => MeasuredBy::Nothing,
        persistent::Resolved::Local(_) | persistent::Resolved::Nfs { .. } => MeasuredBy::StatFs,
        persistent::Resolved::Csi(vol) => csi_measured(vol),
        persistent::Resolved::HostPath { .. } | persistent::Resolved::Failed { .. } => {
            MeasuredBy::Nothing
        }
    }
}

pub(super) fn csi_measured(vol: &csi::mount::CsiVolume) -> MeasuredBy {
    MeasuredBy::Csi {
        driver: vol.driver.clone(),
        handle: vol.handle.clone(),
    }
}

pub(super) fn has_copy(dir: &Path) -> bool {
    dir.join("..data").exists()
}

fn write_volume(
    dir: &Path,
    plugin: &str,
    files: &[FileEntry],
    own: Ownership,
    memory_size: Option<u64>,
) -> Result<(), (String, Option<PathBuf>)> {
    let had_copy = has_copy(dir);
    let fail = |reason: String| (reason, had_copy.then(|| dir.to_path_buf()));
    // Secrets never touch the disk; downwardAPI and projected volumes are a tmpfs upstream too.
    let medium = if plugin == CONFIG_MAP {
        Medium::Disk
    } else {
        Medium::Memory { size: memory_size }
    };
    empty_dir::prepare(dir, medium, own.fs_group)
        .map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    match atomic_writer::write(dir, files, own) {
        Ok(changed) => {
            if changed && had_copy {
                debug!(volume = %dir.display(), "Volume contents updated");
            }
            Ok(())
        }
        Err(e) => Err(fail(e.to_string())),
    }
}
