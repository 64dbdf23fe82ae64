//! Test support: a runtime manager over the in-memory CRI fake, with pods to feed it, for the
//! runtime's own tests and those of the parts that drive it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::backoff::Backoff;
use super::images::ImagePuller;
use super::observed::ObservedPod;
use super::{RuntimeError, RuntimeManager, RuntimeSettings, SyncOutcome, dns};
use crate::cm::CgroupManager;
use crate::cri::fake::{FakeCri, FakeRuntime};
use crate::events::EventRecorder;
use crate::pod::paths;
use crate::podinputs::PodInputSource;
use crate::volume::{PodVolumes, VolumeManager};

/// Present on the node in every harness.
pub(crate) const APP_IMAGE: &str = "registry.test/app:1";

/// A runtime manager wired to a fresh fake runtime, with its logs, root dir and a cgroup v2
/// tree in a temporary directory.
pub(crate) struct Harness {
    pub cri: FakeCri,
    pub runtime: Arc<RuntimeManager>,
    pub volumes: Arc<VolumeManager>,
    pub dir: tempfile::TempDir,
    /// What the OOM watcher would have read from the kernel log.
    pub oom_kills: Arc<crate::oom::OomKills>,
}

impl Harness {
    pub async fn new() -> Harness {
        let cri = FakeCri::start(Duration::from_secs(5)).await;
        cri.runtime.add_image(APP_IMAGE);
        let dir = tempfile::tempdir().expect("tempdir");
        let cgroup_fs = dir.path().join("cgroupfs");
        let base = cgroup_fs.join("sys/fs/cgroup");
        std::fs::create_dir_all(&base).expect("cgroup tree");
        std::fs::write(base.join("cgroup.controllers"), "cpu memory pids\n").expect("controllers");
        let cgroups = CgroupManager::with_fs_root(&cgroup_fs, "", true).expect("cgroup manager");
        let images = ImagePuller::new(cri.client.clone(), 4, Duration::from_secs(60));
        let oom_kills = Arc::new(crate::oom::OomKills::default());
        let runtime = RuntimeManager::new(
            cri.client.clone(),
            Arc::new(cgroups),
            images,
            EventRecorder::default(),
            RuntimeSettings {
                node_ip: "192.0.2.10".into(),
                logs_root: dir.path().join("logs"),
                root_dir: dir.path().join("root"),
                dns: dns::DnsSettings::default(),
                machine_memory: 8 << 30,
                machine_cpu_millis: 2000,
                cgroup_options: Default::default(),
                runtime_handler: String::new(),
                seccomp: Default::default(),
            },
        )
        .with_oom_kills(oom_kills.clone());
        let volumes = VolumeManager::new(
            dir.path().join("root"),
            Arc::default(),
            runtime.settings().node_allocatable(),
            EventRecorder::default(),
        );
        Harness {
            cri,
            runtime: Arc::new(runtime),
            volumes: Arc::new(volumes),
            dir,
            oom_kills,
        }
    }

    pub fn fake(&self) -> &FakeRuntime {
        &self.cri.runtime
    }

    /// One worker step: observe, then converge.
    pub async fn sync(&self, pod: &Pod, backoff: &mut Backoff) -> SyncOutcome {
        let observed = self.runtime.pod_status(uid(pod)).await.expect("pod status");
        // Boxed: the sync future is large, and a test awaits many of them.
        let volumes = self.volumes.setup(pod).await.expect("volumes");
        Box::pin(self.step(pod, &observed, backoff, &volumes))
            .await
            .expect("sync pod")
    }

    /// Plans a step, reads its inputs as a standalone kubelet does (none), and runs it.
    pub async fn step(
        &self,
        pod: &Pod,
        observed: &ObservedPod,
        backoff: &mut Backoff,
        volumes: &PodVolumes,
    ) -> Result<SyncOutcome, RuntimeError> {
        let plan = self
            .runtime
            .plan(pod, observed, backoff, &Default::default());
        let handler = &self.runtime.settings().runtime_handler;
        let inputs = PodInputSource::default()
            .resolve(pod, plan.needs(), handler)
            .await;
        self.runtime
            .sync_pod(pod, observed, plan, inputs, backoff, volumes)
            .await
    }

    pub fn pod_log_dir(&self, pod: &Pod) -> PathBuf {
        let m = &pod.metadata;
        paths::pod_log_dir(
            &self.dir.path().join("logs"),
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
            uid(pod),
        )
    }

    /// Where a BestEffort pod's cgroup lives in the fake cgroup tree.
    pub fn pod_cgroup(&self, uid: &str) -> PathBuf {
        self.dir
            .path()
            .join("cgroupfs/sys/fs/cgroup/kubepods/besteffort")
            .join(format!("pod{uid}"))
    }

    /// Id of the newest attempt of a container, by name.
    pub fn container_id(&self, name: &str) -> String {
        self.fake()
            .container(name)
            .map(|c| c.id)
            .unwrap_or_else(|| panic!("no container {name} in the fake"))
    }
}

pub(crate) fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

pub(crate) fn container(name: &str, image: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        ..Default::default()
    }
}

/// A BestEffort pod whose containers all use [`APP_IMAGE`].
pub(crate) fn pod(uid: &str, policy: &str, init: &[&str], regular: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("web-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            termination_grace_period_seconds: Some(7),
            init_containers: Some(init.iter().map(|n| container(n, APP_IMAGE)).collect()),
            containers: regular.iter().map(|n| container(n, APP_IMAGE)).collect(),
            ..Default::default()
        }),
        status: None,
    }
}
