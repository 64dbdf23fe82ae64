//! The API server's v1 defaults for pods.
//!
//! Pods from the API server arrive defaulted; pods from local files do not, yet the rest of the
//! kubelet relies on the same fields being set. Values follow upstream's core/v1 defaulting.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, Lifecycle, LifecycleHandler, Pod, PodSecurityContext,
    PodSpec, Probe, ResourceRequirements, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// Mode for secret, configMap, downwardAPI and projected volume files (0644).
pub const DEFAULT_VOLUME_FILE_MODE: i32 = 0o644;

/// Fills every unset field the API server would default on create.
pub fn apply_api_defaults(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    default_pod_spec(spec);
}

fn default_pod_spec(spec: &mut PodSpec) {
    set_if_none(&mut spec.restart_policy, || "Always".to_string());
    set_if_none(&mut spec.dns_policy, || "ClusterFirst".to_string());
    set_if_none(&mut spec.termination_grace_period_seconds, || {
        DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
    });
    set_if_none(&mut spec.scheduler_name, || {
        DEFAULT_SCHEDULER_NAME.to_string()
    });
    set_if_none(&mut spec.security_context, PodSecurityContext::default);
    set_if_none(&mut spec.enable_service_links, || true);
    // A deprecated alias kept in sync by the API server.
    if spec.service_account.is_none() {
        spec.service_account = spec.service_account_name.clone();
    }

    let host_network = spec.host_network.unwrap_or(false);
    let inits = spec.init_containers.iter_mut().flatten();
    for c in spec.containers.iter_mut().chain(inits) {
        default_container(c, host_network);
    }
    for v in spec.volumes.iter_mut().flatten() {
        default_volume(v);
    }
}

fn set_if_none<T>(field: &mut Option<T>, value: impl FnOnce() -> T) {
    if field.is_none() {
        *field = Some(value());
    }
}

fn set_if_empty(field: &mut Option<String>, value: &str) {
    if field.as_deref().is_none_or(str::is_empty) {
        *field = Some(value.to_string());
    }
}

fn default_container(c: &mut Container, host_network: bool) {
    if c.image_pull_policy.as_deref().is_none_or(str::is_empty) {
        let policy = default_pull_policy(c.image.as_deref().unwrap_or_default());
        c.image_pull_policy = Some(policy.to_string());
    }
    set_if_empty(
        &mut c.termination_message_path,
        DEFAULT_TERMINATION_MESSAGE_PATH,
    );
    set_if_empty(&mut c.termination_message_policy, "File");
    for p in c.ports.iter_mut().flatten() {
        default_port(p, host_network);
    }
    if let Some(r) = c.resources.as_mut() {
        default_requests_from_limits(r);
    }
    for probe in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ] {
        if let Some(p) = probe.as_mut() {
            default_probe(p);
        }
    }
    if let Some(l) = c.lifecycle.as_mut() {
        default_lifecycle(l);
    }
    for env in c.env.iter_mut().flatten() {
        if let Some(f) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            set_if_empty(&mut f.api_version, "v1");
        }
    }
}

/// `Always` for `:latest` or untagged images without a digest, `IfNotPresent` otherwise.
pub fn default_pull_policy(image: &str) -> &'static str {
    match image_tag(image) {
        Some("latest") => "Always",
        Some(_) => "IfNotPresent",
        None if image.contains('@') => "IfNotPresent",
        None => "Always",
    }
}

/// The tag of an image reference, if one is written (the part after ':' in the last path
/// component, ignoring any digest). A ':' before the last '/' belongs to a registry port.
fn image_tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or_default();
    let last = without_digest.rsplit('/').next().unwrap_or_default();
    last.split_once(':').map(|(_, tag)| tag)
}

fn default_port(p: &mut ContainerPort, host_network: bool) {
    set_if_empty(&mut p.protocol, "TCP");
    // With the host network the container port is the host port; the API server records that.
    if host_network && p.host_port.unwrap_or(0) == 0 {
        p.host_port = Some(p.container_port);
    }
}

/// A resource that only has a limit gets an equal request, so the pod's QoS is computed right.
fn default_requests_from_limits(r: &mut ResourceRequirements) {
    let Some(limits) = r.limits.as_ref() else {
        return;
    };
    if limits.is_empty() {
        return;
    }
    let requests: &mut BTreeMap<String, Quantity> = r.requests.get_or_insert_with(BTreeMap::new);
    for (name, value) in limits {
        requests
            .entry(name.clone())
            .or_insert_with(|| value.clone());
    }
}

fn default_probe(p: &mut Probe) {
    set_if_none(&mut p.timeout_seconds, || 1);
    set_if_none(&mut p.period_seconds, || 10);
    set_if_none(&mut p.success_threshold, || 1);
    set_if_none(&mut p.failure_threshold, || 3);
    if let Some(h) = p.http_get.as_mut() {
        default_http_get(h);
    }
}

fn default_http_get(h: &mut HTTPGetAction) {
    set_if_empty(&mut h.path, "/");
    set_if_empty(&mut h.scheme, "HTTP");
}

fn default_lifecycle(l: &mut Lifecycle) {
    let handlers: [&mut Option<LifecycleHandler>; 2] = [&mut l.post_start, &mut l.pre_stop];
    for h in handlers.into_iter().flatten() {
        if let Some(g) = h.http_get.as_mut() {
            default_http_get(g);
        }
    }
}

fn default_volume(v: &mut Volume) {
    let has_source = v.host_path.is_some()
        || v.empty_dir.is_some()
        || v.secret.is_some()
        || v.config_map.is_some()
        || v.downward_api.is_some()
        || v.projected.is_some()
        || v.persistent_volume_claim.is_some()
        || v.nfs.is_some()
        || v.csi.is_some()
        || v.ephemeral.is_some()
        || v.image.is_some()
        || v.iscsi.is_some()
        || v.fc.is_some()
        || v.rbd.is_some()
        || v.cephfs.is_some()
        || v.glusterfs.is_some()
        || v.git_repo.is_some()
        || v.flex_volume.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.gce_persistent_disk.is_some()
        || v.azure_disk.is_some()
        || v.azure_file.is_some()
        || v.cinder.is_some()
        || v.flocker.is_some()
        || v.photon_persistent_disk.is_some()
        || v.portworx_volume.is_some()
        || v.quobyte.is_some()
        || v.scale_io.is_some()
        || v.storageos.is_some()
        || v.vsphere_volume.is_some();
    if !has_source {
        v.empty_dir = Some(Default::default());
    }
    if let Some(h) = v.host_path.as_mut() {
        set_if_none(&mut h.type_, String::new);
    }
    if let Some(s) = v.secret.as_mut() {
        set_if_none(&mut s.default_mode, || DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(c) = v.config_map.as_mut() {
        set_if_none(&mut c.default_mode, || DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(d) = v.downward_api.as_mut() {
        set_if_none(&mut d.default_mode, || DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(p) = v.projected.as_mut() {
        set_if_none(&mut p.default_mode, || DEFAULT_VOLUME_FILE_MODE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};

    fn container(image: &str) -> Container {
        Container {
            name: "c".into(),
            image: Some(image.into()),
            ..Default::default()
        }
    }

    fn defaulted(spec: PodSpec) -> PodSpec {
        let mut pod = Pod {
            spec: Some(spec),
            ..Default::default()
        };
        apply_api_defaults(&mut pod);
        pod.spec.unwrap_or_default()
    }

    #[test]
    fn pull_policy_from_tag() {
        assert_eq!(default_pull_policy("nginx"), "Always");
        assert_eq!(default_pull_policy("nginx:latest"), "Always");
        assert_eq!(default_pull_policy("nginx:1.27"), "IfNotPresent");
        assert_eq!(default_pull_policy("reg:5000/nginx"), "Always");
        assert_eq!(
            default_pull_policy("reg:5000/team/nginx:v1"),
            "IfNotPresent"
        );
        assert_eq!(default_pull_policy("nginx@sha256:abcd"), "IfNotPresent");
        assert_eq!(default_pull_policy("nginx:latest@sha256:abcd"), "Always");
    }

    #[test]
    fn pod_spec_defaults() {
        let spec = defaulted(PodSpec {
            containers: vec![container("busybox:1.36")],
            ..Default::default()
        });
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.security_context, Some(PodSecurityContext::default()));
        assert_eq!(spec.enable_service_links, Some(true));
        let c = &spec.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            c.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
    }

    #[test]
    fn explicit_values_are_kept() {
        let mut c = container("busybox");
        c.image_pull_policy = Some("Never".into());
        let spec = defaulted(PodSpec {
            containers: vec![c],
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(0),
            ..Default::default()
        });
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(0));
        assert_eq!(
            spec.containers[0].image_pull_policy.as_deref(),
            Some("Never")
        );
    }

    #[test]
    fn init_containers_ports_probes_env() {
        let mut c = container("app:v1");
        c.ports = Some(vec![ContainerPort {
            container_port: 8080,
            ..Default::default()
        }]);
        c.liveness_probe = Some(Probe {
            http_get: Some(HTTPGetAction::default()),
            ..Default::default()
        });
        c.env = Some(vec![EnvVar {
            name: "NODE".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "spec.nodeName".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        let spec = defaulted(PodSpec {
            containers: vec![c],
            init_containers: Some(vec![container("init")]),
            host_network: Some(true),
            ..Default::default()
        });
        let init = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(init.image_pull_policy.as_deref(), Some("Always"));
        let c = &spec.containers[0];
        let port = &c.ports.as_ref().unwrap()[0];
        assert_eq!(port.protocol.as_deref(), Some("TCP"));
        assert_eq!(port.host_port, Some(8080));
        let probe = c.liveness_probe.as_ref().unwrap();
        assert_eq!(
            (
                probe.timeout_seconds,
                probe.period_seconds,
                probe.success_threshold,
                probe.failure_threshold
            ),
            (Some(1), Some(10), Some(1), Some(3))
        );
        let http = probe.http_get.as_ref().unwrap();
        assert_eq!(http.path.as_deref(), Some("/"));
        assert_eq!(http.scheme.as_deref(), Some("HTTP"));
        let field = c.env.as_ref().unwrap()[0]
            .value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap();
        assert_eq!(field.api_version.as_deref(), Some("v1"));
    }

    #[test]
    fn requests_default_to_limits() {
        let mut c = container("app:v1");
        c.resources = Some(ResourceRequirements {
            limits: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("500m".into())),
                ("memory".to_string(), Quantity("128Mi".into())),
            ])),
            requests: Some(BTreeMap::from([(
                "cpu".to_string(),
                Quantity("100m".into()),
            )])),
            ..Default::default()
        });
        let spec = defaulted(PodSpec {
            containers: vec![c],
            ..Default::default()
        });
        let req = spec.containers[0]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap();
        assert_eq!(req["cpu"], Quantity("100m".into()));
        assert_eq!(req["memory"], Quantity("128Mi".into()));
    }

    #[test]
    fn volume_without_source_becomes_empty_dir() {
        let spec = defaulted(PodSpec {
            containers: vec![container("a:1")],
            volumes: Some(vec![Volume {
                name: "scratch".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(spec.volumes.unwrap()[0].empty_dir.is_some());
    }
}
