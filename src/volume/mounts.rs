//! The bind mounts of one container: its volumeMounts resolved against the volumes the
//! manager set up (with subPath), then the termination-message file.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::Container;

use super::{MountError, PodVolumes};
use crate::cri::api;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> MountError + '_ {
    move |source| MountError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `subPathExpr` expanded with the container's env, like upstream: every name it refers to
/// must have a non-empty value.
fn expand_sub_path_expr(expr: &str, env: &HashMap<String, String>) -> Result<String, MountError> {
    let mut missing = BTreeSet::new();
    let expanded = crate::expansion::expand_with(expr, |name| {
        let value = env.get(name).cloned().unwrap_or_default();
        if value.is_empty() {
            missing.insert(name.to_string());
        }
        Some(value)
    });
    if !missing.is_empty() {
        let names: Vec<String> = missing.into_iter().collect();
        return Err(MountError::SubPathExpr(format!(
            "missing value for {}",
            names.join(", ")
        )));
    }
    Ok(expanded)
}

/// A subPath must stay inside its volume, also after following links a container may have
/// planted there. The messages are upstream's.
fn resolve_sub_path(
    base: &Path,
    mount: &str,
    container: &str,
    sub_path: &str,
) -> Result<PathBuf, MountError> {
    let sub = Path::new(sub_path);
    if sub.is_absolute() {
        return Err(MountError::SubPathAbsolute(sub_path.to_string()));
    }
    if sub.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(MountError::SubPathBacksteps(sub_path.to_string()));
    }
    let bad = || MountError::SubPath {
        mount: mount.to_string(),
        sub_path: sub_path.to_string(),
    };
    let path = base.join(sub);
    // Links followed, as upstream's PathExists: a link to nowhere is missing too.
    if !path.exists() {
        // Created now, with the volume's own mode, so it does not appear later with whatever
        // the runtime would give it.
        make_sub_dir(base, &path).map_err(|e| {
            tracing::warn!(path = %path.display(), err = %e, "Could not create the subPath directory");
            MountError::SubPathCreate {
                mount: mount.to_string(),
                container: container.to_string(),
            }
        })?;
    }
    let real_base = base.canonicalize().map_err(io(base))?;
    let real = path.canonicalize().map_err(io(&path))?;
    if !real.starts_with(&real_base) {
        return Err(bad());
    }
    Ok(path)
}

/// Creates `path` below `base` with `base`'s mode, refusing to create through a link that
/// leads out of the volume (the deepest part that exists must resolve inside it).
fn make_sub_dir(base: &Path, path: &Path) -> std::io::Result<()> {
    let real_base = base.canonicalize()?;
    let mut existing = path;
    while !existing.exists() {
        match existing.parent() {
            Some(parent) => existing = parent,
            None => break,
        }
    }
    if !existing.canonicalize()?.starts_with(&real_base) {
        return Err(std::io::Error::other("a link leads out of the volume"));
    }
    let mode = std::fs::metadata(base)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o755);
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

fn propagation(mode: Option<&str>) -> api::MountPropagation {
    match mode {
        Some("HostToContainer") => api::MountPropagation::PropagationHostToContainer,
        Some("Bidirectional") => api::MountPropagation::PropagationBidirectional,
        _ => api::MountPropagation::PropagationPrivate,
    }
}

/// The bind mounts for one container: its volumeMounts (`subPathExpr` expanded with `env`,
/// the container's resolved env), then the termination-message file (a new one per restart,
/// under the pod's folder). Blocking (filesystem work).
pub fn container_mounts(
    pod_dir: &Path,
    container: &Container,
    volumes: &PodVolumes,
    restart_count: u32,
    env: &HashMap<String, String>,
) -> Result<Vec<api::Mount>, MountError> {
    let mut mounts = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let base = volumes
            .path(&m.name)
            .ok_or_else(|| MountError::NotSetUp(m.name.clone()))?;
        let sub_path = match m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
            Some(expr) => Some(expand_sub_path_expr(expr, env)?),
            None => m.sub_path.clone(),
        };
        let host = match sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => resolve_sub_path(base, &m.name, &container.name, sub)?,
            None => base.to_path_buf(),
        };
        mounts.push(api::Mount {
            container_path: m.mount_path.clone(),
            host_path: host.to_string_lossy().into_owned(),
            // A read-only claim makes every mount of it read-only.
            readonly: m.read_only.unwrap_or(false) || volumes.read_only(&m.name),
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

/// The container's block volumes as devices (`volumeDevices`): the link to each device, at the
/// path the container asked for, readable, writable and mknod-able, as upstream hands them to
/// the runtime.
pub fn container_devices(
    container: &Container,
    volumes: &PodVolumes,
) -> Result<Vec<api::Device>, MountError> {
    container
        .volume_devices
        .iter()
        .flatten()
        .map(|d| {
            let host = volumes
                .path(&d.name)
                .ok_or_else(|| MountError::NotSetUp(d.name.clone()))?;
            Ok(api::Device {
                container_path: d.device_path.clone(),
                host_path: host.to_string_lossy().into_owned(),
                permissions: "mrw".to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::VolumeMount;

    fn mount(name: &str, path: &str, sub: Option<&str>) -> VolumeMount {
        VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            sub_path: sub.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn volume_mounts_sub_paths_and_termination_file() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut volumes = PodVolumes::default();
        volumes.insert("data", data.clone());
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![
                mount("data", "/data", None),
                mount("data", "/sub", Some("x/y")),
            ]),
            termination_message_path: Some("/dev/termination-log".into()),
            ..Default::default()
        };
        let pod_dir = root.path().join("pod");
        let mounts = container_mounts(&pod_dir, &c, &volumes, 3, &HashMap::new()).unwrap();
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[0].host_path, data.to_string_lossy());
        let sub = data.join("x/y");
        assert!(sub.is_dir());
        let mode = std::fs::metadata(&sub).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o777, "a subPath gets its volume's mode");
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
    }

    #[test]
    fn sub_paths_cannot_escape() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().join("v");
        std::fs::create_dir(&base).unwrap();
        let err = resolve_sub_path(&base, "m", "c", "a/../../etc").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unable to provision SubPath `a/../../etc`: must not contain '..'"
        );
        let err = resolve_sub_path(&base, "m", "c", "/etc").unwrap_err();
        assert_eq!(
            err.to_string(),
            "error SubPath `/etc` must not be an absolute path"
        );
        // A link a container left in its volume, pointing out of it.
        std::os::unix::fs::symlink("/etc", base.join("out")).unwrap();
        let err = resolve_sub_path(&base, "m", "c", "out").unwrap_err();
        assert!(err.to_string().contains("invalid subPath"), "{err}");
        // A link to nothing outside, and a folder under a link that leads out: nothing is
        // made outside, in upstream's words.
        let outside = root.path().join("outside");
        std::os::unix::fs::symlink(&outside, base.join("dangling")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, base.join("through")).unwrap();
        std::fs::remove_dir(&outside).unwrap();
        for sub in ["dangling", "through/new"] {
            let err = resolve_sub_path(&base, "m", "c", sub).unwrap_err();
            assert_eq!(
                err.to_string(),
                "failed to create subPath directory for volumeMount \"m\" of container \"c\"",
            );
        }
        std::fs::create_dir(&outside).unwrap();
        let err = resolve_sub_path(&base, "m", "c", "through/new").unwrap_err();
        assert!(
            err.to_string().contains("failed to create subPath"),
            "{err}"
        );
        assert!(!outside.join("new").exists());
        // Links that stay inside (the atomic writer's) are fine.
        std::fs::create_dir(base.join("..data")).unwrap();
        std::fs::write(base.join("..data/key"), "v").unwrap();
        std::os::unix::fs::symlink("..data/key", base.join("key")).unwrap();
        assert!(resolve_sub_path(&base, "m", "c", "key").is_ok());
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![mount("missing", "/m", None)]),
            ..Default::default()
        };
        let err = container_mounts(root.path(), &c, &PodVolumes::default(), 0, &HashMap::new())
            .unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn sub_path_expr_uses_the_container_env() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let mut volumes = PodVolumes::default();
        volumes.insert("data", data.clone());
        let expr = |e: &str| Container {
            name: "c".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "data".into(),
                mount_path: "/logs".into(),
                sub_path_expr: Some(e.into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let env = HashMap::from([
            ("POD".to_string(), "web".to_string()),
            ("UP".to_string(), "..".to_string()),
            ("ABS".to_string(), "/tmp".to_string()),
            ("EMPTY".to_string(), String::new()),
        ]);
        let mounts = container_mounts(root.path(), &expr("$(POD)/x"), &volumes, 0, &env).unwrap();
        assert_eq!(mounts[0].host_path, data.join("web/x").to_string_lossy());
        assert!(data.join("web/x").is_dir());
        let err = |e: &str| {
            container_mounts(root.path(), &expr(e), &volumes, 0, &env)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("$(EMPTY)/$(NOPE)/$(POD)"),
            "missing value for EMPTY, NOPE"
        );
        assert!(err("$(UP)").contains("must not contain '..'"));
        assert!(err("$(ABS)").contains("must not be an absolute path"));
    }
}
