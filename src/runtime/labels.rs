//! Labels and annotations the kubelet puts on sandboxes and containers. They are how a kubelet
//! (ours or upstream's, after a restart or an upgrade) recognises its own objects in the runtime,
//! so the keys are upstream's.

use std::collections::BTreeMap;
use std::hash::Hasher;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cm::checkpoint_file::{FNV_OFFSET, fnv1a};

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Our own key for the hash we compare: containers upstream's kubelet created (a node switching
/// kubelets) carry none of ours and are adopted rather than replaced.
pub const CONTAINER_HASH: &str = "io.kubelet-rs.container.hash";
/// Upstream's key, written for upstream's kubelet only (see [`upstream_hash`]); never read.
pub const UPSTREAM_CONTAINER_HASH: &str = "io.kubernetes.container.hash";
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
pub const TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";

/// Labels shared by the sandbox and every container of a pod.
pub fn pod_labels(pod: &Pod) -> BTreeMap<String, String> {
    let meta = &pod.metadata;
    let mut labels: BTreeMap<String, String> = meta.labels.clone().unwrap_or_default();
    labels.insert(POD_NAME.into(), meta.name.clone().unwrap_or_default());
    labels.insert(
        POD_NAMESPACE.into(),
        meta.namespace.clone().unwrap_or_default(),
    );
    labels.insert(POD_UID.into(), meta.uid.clone().unwrap_or_default());
    labels
}

/// Container labels: only the identifying ones, like upstream (pod labels stay on the sandbox).
pub fn container_labels(pod: &Pod, container: &Container) -> BTreeMap<String, String> {
    let meta = &pod.metadata;
    BTreeMap::from([
        (POD_NAME.to_string(), meta.name.clone().unwrap_or_default()),
        (
            POD_NAMESPACE.to_string(),
            meta.namespace.clone().unwrap_or_default(),
        ),
        (POD_UID.to_string(), meta.uid.clone().unwrap_or_default()),
        (CONTAINER_NAME.to_string(), container.name.clone()),
    ])
}

pub fn container_annotations(
    pod: &Pod,
    container: &Container,
    restart_count: u32,
) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    a.insert(
        CONTAINER_HASH.to_string(),
        format!("{:x}", container_hash(container)),
    );
    a.insert(
        UPSTREAM_CONTAINER_HASH.to_string(),
        format!("{:x}", upstream_hash(container)),
    );
    a.insert(
        CONTAINER_RESTART_COUNT.to_string(),
        restart_count.to_string(),
    );
    a.insert(
        TERMINATION_MESSAGE_PATH.to_string(),
        container
            .termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into()),
    );
    a.insert(
        TERMINATION_MESSAGE_POLICY.to_string(),
        container
            .termination_message_policy
            .clone()
            .unwrap_or_else(|| "File".into()),
    );
    let grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    a.insert(POD_TERMINATION_GRACE_PERIOD.to_string(), grace.to_string());
    if let Some(ports) = container.ports.as_ref().filter(|p| !p.is_empty())
        && let Ok(json) = serde_json::to_string(ports)
    {
        a.insert(CONTAINER_PORTS.to_string(), json);
    }
    a
}

/// A stable hash of the container spec: a change means the container must be recreated.
/// It must not change across kubelet restarts, so it hashes the canonical JSON (k8s-openapi
/// serialises fields in a fixed order and maps as BTreeMaps) with FNV-1a rather than with
/// std's randomly seeded hasher. `resources` is left out: a resize is applied in place
/// (runtime::resize) and restarts a container only when its resize policy says so.
pub fn container_hash(container: &Container) -> u64 {
    if container.resources.is_none() {
        return full_hash(container);
    }
    full_hash(&Container {
        resources: None,
        ..container.clone()
    })
}

/// The hash over the whole spec, resources included, as containers created before in-place
/// resize carry it.
fn full_hash(container: &Container) -> u64 {
    let json = serde_json::to_vec(container).unwrap_or_default();
    let mut h = Fnv1a::default();
    h.write(&json);
    h.finish()
}

/// Whether a container created with `hash` runs this spec. A hash over the whole spec (what
/// an older kubelet-rs wrote) also matches, so an upgrade restarts nothing.
pub fn hash_matches(container: &Container, hash: u64) -> bool {
    hash == container_hash(container) || hash == full_hash(container)
}

/// The hash upstream's kubelet (v1.31 and later) computes and compares, so that a node going back
/// from ours to it keeps its containers: FNV-1a (32 bit) of go-spew's `%#v` rendering of the
/// JSON `{"image":..,"name":..}`, which is `([]uint8)[` then the bytes in decimal, blank
/// separated, then `]`.
pub fn upstream_hash(container: &Container) -> u64 {
    let mut json = String::from("{\"image\":");
    go_json_string(&mut json, container.image.as_deref().unwrap_or_default());
    json.push_str(",\"name\":");
    go_json_string(&mut json, &container.name);
    json.push('}');
    let mut h = FNV_OFFSET;
    let mut write = |bytes: &[u8]| h = fnv1a(h, bytes);
    write(b"([]uint8)[");
    for (i, b) in json.bytes().enumerate() {
        if i > 0 {
            write(b" ");
        }
        write(b.to_string().as_bytes());
    }
    write(b"]");
    u64::from(h)
}

/// A JSON string as Go's encoding/json writes it: HTML-sensitive characters and U+2028/9
/// escaped as well, so the bytes (and the hash over them) are Go's.
fn go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Reads our hash annotation back; None for a container we did not create.
pub fn parse_hash(annotations: &std::collections::HashMap<String, String>) -> Option<u64> {
    annotations
        .get(CONTAINER_HASH)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(image: &str) -> Container {
        Container {
            name: "c".into(),
            image: Some(image.into()),
            ..Default::default()
        }
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let a = container("busybox:1");
        assert_eq!(container_hash(&a), container_hash(&a.clone()));
        assert_ne!(container_hash(&a), container_hash(&container("busybox:2")));
    }

    #[test]
    fn resources_are_not_part_of_the_hash_but_old_hashes_still_match() {
        use k8s_openapi::api::core::v1::ResourceRequirements;
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let plain = container("busybox");
        let mut sized = plain.clone();
        sized.resources = Some(ResourceRequirements {
            limits: Some([("memory".to_string(), Quantity("64Mi".into()))].into()),
            ..Default::default()
        });
        assert_eq!(container_hash(&plain), container_hash(&sized));
        assert!(hash_matches(&sized, full_hash(&sized)));
        assert!(hash_matches(&sized, container_hash(&sized)));
        assert!(!hash_matches(&sized, full_hash(&container("busybox:2"))));
    }

    #[test]
    fn upstream_hash_is_upstreams() {
        // Values printed by upstream's own computation (Go, go-spew) for these containers.
        let c = |name: &str, image: &str| Container {
            name: name.into(),
            image: Some(image.into()),
            command: Some(vec!["sleep".into()]),
            ..Default::default()
        };
        assert_eq!(upstream_hash(&c("app", "busybox")), 0x3ada_567e);
        assert_eq!(
            upstream_hash(&c("web", "registry.k8s.io/e2e-test-images/agnhost:2.39")),
            0xfb30_afce
        );
        assert_eq!(upstream_hash(&c("x<&>", "img")), 0x37ea_5e33);
        let pod = Pod::default();
        let ann = container_annotations(&pod, &c("app", "busybox"), 0);
        assert_eq!(ann[UPSTREAM_CONTAINER_HASH], "3ada567e");
    }

    #[test]
    fn hash_round_trips_through_annotation() {
        let c = container("busybox");
        let pod = Pod::default();
        let ann: std::collections::HashMap<_, _> =
            container_annotations(&pod, &c, 0).into_iter().collect();
        assert_eq!(parse_hash(&ann), Some(container_hash(&c)));
    }
}
