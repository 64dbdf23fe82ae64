//! `volumes[].image`: an OCI image mounted read-only by the container runtime itself. The CRI
//! has no feature flag for it, and a runtime that predates the `Mount.image` field ignores it
//! and fails the container with an unrelated mount error, so the kubelet judges the runtime by
//! its name and version and says plainly why such a pod cannot start.

/// The runtime as its CRI `Version` answer names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeVersion {
    pub name: String,
    pub version: String,
}

/// The first releases that mount image volumes.
const FIRST_WITH_IMAGE_VOLUMES: &[(&str, (u32, u32), &str)] = &[
    ("containerd", (2, 1), "containerd 2.1"),
    ("cri-o", (1, 31), "CRI-O 1.31"),
];

/// `major.minor` from versions such as `1.6.20`, `v2.1.0` or `1.6.20~ds1`.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let v = version.trim().trim_start_matches('v');
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether the runtime is known to mount image volumes (`None`: not known either way).
pub fn runtime_mounts_images(rt: &RuntimeVersion) -> Option<bool> {
    let name = rt.name.to_ascii_lowercase();
    let (_, first, _) = FIRST_WITH_IMAGE_VOLUMES
        .iter()
        .find(|(n, _, _)| name == *n)?;
    Some(major_minor(&rt.version)? >= *first)
}

/// Why an image volume cannot be set up on this node.
pub fn unsupported_reason(rt: Option<&RuntimeVersion>) -> String {
    let wanted = FIRST_WITH_IMAGE_VOLUMES
        .iter()
        .map(|(_, _, label)| format!("{label} or later"))
        .collect::<Vec<_>>()
        .join(", ");
    match rt {
        Some(rt) if runtime_mounts_images(rt) == Some(false) => format!(
            "image volumes need a container runtime that mounts images ({wanted}); this node runs {} {}",
            rt.name, rt.version
        ),
        // A runtime that could mount it: the missing piece is ours.
        _ => "image volumes are not supported by this version of kubelet-rs".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(name: &str, version: &str) -> RuntimeVersion {
        RuntimeVersion {
            name: name.into(),
            version: version.into(),
        }
    }

    #[test]
    fn runtimes_are_judged_by_name_and_version() {
        assert_eq!(
            runtime_mounts_images(&rt("containerd", "1.6.20~ds1")),
            Some(false)
        );
        assert_eq!(
            runtime_mounts_images(&rt("containerd", "v2.0.4")),
            Some(false)
        );
        assert_eq!(
            runtime_mounts_images(&rt("containerd", "v2.1.0")),
            Some(true)
        );
        assert_eq!(runtime_mounts_images(&rt("cri-o", "1.30.2")), Some(false));
        assert_eq!(runtime_mounts_images(&rt("cri-o", "1.31.0")), Some(true));
        assert_eq!(runtime_mounts_images(&rt("other", "9.9")), None);
        assert_eq!(runtime_mounts_images(&rt("containerd", "")), None);
    }

    #[test]
    fn the_reason_names_the_runtime() {
        assert_eq!(
            unsupported_reason(Some(&rt("containerd", "1.6.20~ds1"))),
            "image volumes need a container runtime that mounts images (containerd 2.1 or later, CRI-O 1.31 or later); this node runs containerd 1.6.20~ds1"
        );
        assert_eq!(
            unsupported_reason(None),
            "image volumes are not supported by this version of kubelet-rs"
        );
    }
}
