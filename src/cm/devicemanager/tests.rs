//! The manager against an in-process plugin over real unix sockets: registration and its
//! refusals, capacity following ListAndWatch, admission, Allocate into run options, the
//! checkpoint across a restart, and a plugin that goes away.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::watch;
use tokio_stream::wrappers::{UnixListenerStream, WatchStream};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::api::{self, device_plugin_server::DevicePlugin};
use super::*;

const RES: &str = "example.com/widget";

#[derive(Clone)]
struct Plugin {
    devices: watch::Receiver<Vec<api::Device>>,
    allocations: Arc<Mutex<Vec<Vec<String>>>>,
    hang: bool,
    /// Ends the plugin's streams, as its process ending would.
    stop: CancellationToken,
}

type DeviceStream = std::pin::Pin<
    Box<dyn tokio_stream::Stream<Item = Result<api::ListAndWatchResponse, Status>> + Send>,
>;

#[tonic::async_trait]
impl DevicePlugin for Plugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<api::DevicePluginOptions>, Status> {
        Ok(Response::new(api::DevicePluginOptions::default()))
    }

    async fn list_and_watch(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<DeviceStream>, Status> {
        let stream = tokio_stream::StreamExt::map(WatchStream::new(self.devices.clone()), |d| {
            Ok(api::ListAndWatchResponse { devices: d })
        });
        let stream = futures::StreamExt::take_until(stream, self.stop.clone().cancelled_owned());
        Ok(Response::new(Box::pin(stream)))
    }

    async fn allocate(
        &self,
        req: Request<api::AllocateRequest>,
    ) -> Result<Response<api::AllocateResponse>, Status> {
        if self.hang {
            std::future::pending::<()>().await;
        }
        let mut answers = Vec::new();
        for c in req.into_inner().container_requests {
            self.allocations.lock().unwrap().push(c.devices_ids.clone());
            answers.push(api::ContainerAllocateResponse {
                envs: HashMap::from([("WIDGETS".to_string(), c.devices_ids.join(","))]),
                devices: vec![api::DeviceSpec {
                    container_path: "/dev/widget".into(),
                    host_path: "/dev/null".into(),
                    permissions: "rw".into(),
                }],
                ..Default::default()
            });
        }
        Ok(Response::new(api::AllocateResponse {
            container_responses: answers,
        }))
    }
}

fn device(id: &str, healthy: bool) -> api::Device {
    api::Device {
        id: id.into(),
        health: if healthy { "Healthy" } else { "Unhealthy" }.into(),
        topology: None,
    }
}

struct Bed {
    dir: tempfile::TempDir,
    cancel: CancellationToken,
}

impl Bed {
    fn new() -> Self {
        Bed {
            dir: tempfile::tempdir().unwrap(),
            cancel: CancellationToken::new(),
        }
    }

    fn manager(&self) -> Arc<DeviceManager> {
        let m = DeviceManager::new(self.dir.path(), "boot-1", self.cancel.child_token());
        let listener = m.bind().unwrap();
        tokio::spawn(m.clone().serve(listener));
        m
    }

    /// Serves `plugin` on `<dir>/<name>`; dropped with the returned token.
    fn serve_plugin(&self, name: &str, mut plugin: Plugin) -> CancellationToken {
        let path = self.dir.path().join(name);
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let stop = CancellationToken::new();
        plugin.stop = stop.clone();
        let s = stop.clone();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(api::device_plugin_server::DevicePluginServer::new(plugin))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), s.cancelled())
                .await
        });
        stop
    }

    async fn register(&self, version: &str, resource: &str, endpoint: &str) -> Result<(), Status> {
        let channel = crate::grpc_uds::dial(
            &self.dir.path().join(KUBELET_SOCKET),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        api::registration_client::RegistrationClient::new(channel)
            .register(api::RegisterRequest {
                version: version.into(),
                endpoint: endpoint.into(),
                resource_name: resource.into(),
                options: None,
            })
            .await
            .map(|_| ())
    }
}

fn pod(uid: &str, n: u32) -> Pod {
    Pod {
        metadata: ObjectMeta {
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    limits: Some(BTreeMap::from([(RES.to_string(), Quantity(n.to_string()))])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn a_plugin_registers_its_devices_are_admitted_allocated_and_checkpointed() {
    let bed = Bed::new();
    // A socket left from an earlier run goes at start; the checkpoint would stay.
    let stale = bed.dir.path().join("old-plugin.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let m = bed.manager();
    assert!(!stale.exists());

    let (tx, rx) = watch::channel(vec![
        device("w1", true),
        device("w2", true),
        device("w3", false),
    ]);
    let plugin = Plugin {
        devices: rx,
        allocations: Arc::default(),
        hang: false,
        stop: CancellationToken::new(),
    };
    let stop = bed.serve_plugin("widget.sock", plugin.clone());

    let refused = bed
        .register("v1alpha1", RES, "widget.sock")
        .await
        .unwrap_err();
    assert!(
        refused.message().contains("is not supported by kubelet"),
        "{refused:?}"
    );
    let refused = bed
        .register("v1beta1", "widget", "widget.sock")
        .await
        .unwrap_err();
    assert_eq!(refused.message(), "the ResourceName \"widget\" is invalid");
    bed.register("v1beta1", RES, "widget.sock").await.unwrap();

    wait_for("the devices", || m.capacity().capacity.get(RES) == Some(&3)).await;
    assert_eq!(m.capacity().allocatable[RES], 2);

    // Two healthy: a pod of two fits, then nothing more does.
    m.admit(&pod("p1", 2)).unwrap();
    let err = m.admit(&pod("p2", 1)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "requested number of devices unavailable for example.com/widget. Requested: 1, Available: 0"
    );
    let p1 = pod("p1", 2);
    let opts = m
        .run_options(&p1, &p1.spec.as_ref().unwrap().containers[0])
        .await
        .unwrap();
    assert_eq!(
        opts.envs,
        vec![("WIDGETS".to_string(), "w1,w2".to_string())]
    );
    assert_eq!(opts.devices[0].container_path, "/dev/widget");
    // A restart of the container asks the plugin nothing new.
    m.run_options(&p1, &p1.spec.as_ref().unwrap().containers[0])
        .await
        .unwrap();
    assert_eq!(plugin.allocations.lock().unwrap().len(), 1);
    let held = m.container_devices("p1", "c");
    assert_eq!(held.len(), 1);
    assert_eq!(
        (held[0].ids.clone(), held[0].numa),
        (vec!["w1".to_string(), "w2".to_string()], None)
    );

    // A new kubelet over the same folder keeps p1's devices and the plugin's answer.
    bed.cancel.cancel();
    let bed2 = Bed {
        dir: bed.dir,
        cancel: CancellationToken::new(),
    };
    let m2 = bed2.manager();
    assert_eq!(m2.container_devices("p1", "c"), held);
    let opts2 = m2
        .run_options(&p1, &p1.spec.as_ref().unwrap().containers[0])
        .await
        .unwrap();
    assert_eq!(opts2, opts);
    // Known, but without devices until the plugin registers again.
    assert_eq!(m2.capacity().capacity.get(RES), Some(&0));
    // Its socket went with the kubelet's start, as upstream clears the folder: a plugin serves
    // anew and registers again when it sees the new kubelet socket.
    assert!(!bed2.dir.path().join("widget.sock").exists());
    stop.cancel();
    let stop = bed2.serve_plugin("widget.sock", plugin.clone());
    bed2.register("v1beta1", RES, "widget.sock").await.unwrap();
    wait_for("the devices again", || {
        m2.capacity().allocatable.get(RES) == Some(&2)
    })
    .await;
    assert!(m2.admit(&pod("p2", 1)).is_err(), "p1 still holds both");

    // Health follows the plugin's list; its going makes every device unhealthy.
    tx.send(vec![
        device("w1", true),
        device("w2", true),
        device("w3", true),
    ])
    .unwrap();
    wait_for("w3 healthy", || {
        m2.capacity().allocatable.get(RES) == Some(&3)
    })
    .await;
    m2.admit(&pod("p2", 1)).unwrap();
    stop.cancel();
    wait_for("the plugin to go", || {
        m2.capacity().allocatable.get(RES) == Some(&0)
    })
    .await;
    assert_eq!(m2.capacity().capacity[RES], 3);
    m2.forget("p1");
    assert!(m2.container_devices("p1", "c").is_empty());
    bed2.cancel.cancel();
}

#[tokio::test]
async fn a_hanging_allocate_fails_the_container_and_gives_the_devices_back() {
    let bed = Bed::new();
    let m = bed.manager();
    let (_tx, rx) = watch::channel(vec![device("w1", true)]);
    let plugin = Plugin {
        devices: rx,
        allocations: Arc::default(),
        hang: true,
        stop: CancellationToken::new(),
    };
    let _stop = bed.serve_plugin("widget.sock", plugin);
    bed.register("v1beta1", RES, "widget.sock").await.unwrap();
    wait_for("the device", || {
        m.capacity().allocatable.get(RES) == Some(&1)
    })
    .await;
    let p = pod("p", 1);
    m.admit(&p).unwrap();
    let err = m
        .run_options(&p, &p.spec.as_ref().unwrap().containers[0])
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("Allocate of device plugin example.com/widget timed out"),
        "{err}"
    );
    assert!(m.container_devices("p", "c").is_empty());
    // Still the pod's: another pod does not get it.
    assert!(m.admit(&pod("q", 1)).is_err());
    bed.cancel.cancel();
}

#[tokio::test]
async fn a_corrupt_checkpoint_is_set_aside_with_a_warning() {
    let bed = Bed::new();
    std::fs::write(
        checkpoint::path_in(bed.dir.path()),
        b"{\"Data\":{},\"Checksum\":1}",
    )
    .unwrap();
    let m = bed.manager();
    assert!(m.capacity().capacity.is_empty());
    m.admit(&pod("p", 1)).unwrap();
    bed.cancel.cancel();
}

/// The marker that tells stub-based plugins to announce themselves through plugins_registry
/// is made in the folder and outlives a later start's sweep of stale sockets.
#[tokio::test]
async fn the_deprecation_marker_is_made_and_kept_across_a_restart() {
    let bed = Bed::new();
    let marker = bed.dir.path().join(DEPRECATION_MARKER);
    let m = bed.manager();
    assert!(
        !marker.exists(),
        "made before the plugin watcher asked for it"
    );
    m.mark_registry_announcements();
    assert!(marker.is_file());
    let again = DeviceManager::new(bed.dir.path(), "boot-1", bed.cancel.child_token());
    drop(again.bind().unwrap());
    assert!(
        marker.is_file(),
        "the sweep of stale sockets removed the marker"
    );
    bed.cancel.cancel();
}

/// Two plugins' answers for one container: the first setting of an env, a mount's or a
/// device's container path stays; a later different one is left out.
#[test]
fn the_first_answer_for_a_container_path_or_env_stays() {
    let mount = |c: &str, h: &str| api::Mount {
        container_path: c.into(),
        host_path: h.into(),
        read_only: false,
    };
    let device = |c: &str, h: &str| api::DeviceSpec {
        container_path: c.into(),
        host_path: h.into(),
        permissions: "rw".into(),
    };
    let first = api::ContainerAllocateResponse {
        envs: [("A".to_string(), "1".to_string())].into(),
        mounts: vec![mount("/data", "/host/a")],
        devices: vec![device("/dev/w0", "/dev/widget0")],
        ..Default::default()
    };
    let second = api::ContainerAllocateResponse {
        envs: [
            ("A".to_string(), "2".to_string()),
            ("B".to_string(), "3".to_string()),
        ]
        .into(),
        mounts: vec![mount("/data", "/host/b"), mount("/cache", "/host/c")],
        devices: vec![
            device("/dev/w0", "/dev/widget9"),
            device("/dev/w1", "/dev/widget1"),
        ],
        ..Default::default()
    };
    let mut options = RunOptions::default();
    options.merge(&first);
    options.merge(&second);
    assert_eq!(
        options.envs,
        [("A".into(), "1".into()), ("B".into(), "3".into())]
    );
    assert_eq!(
        options.mounts,
        [mount("/data", "/host/a"), mount("/cache", "/host/c")]
    );
    assert_eq!(
        options.devices,
        [
            device("/dev/w0", "/dev/widget0"),
            device("/dev/w1", "/dev/widget1")
        ]
    );
}
