//! The v1alpha1 pod-resources API, which upstream still serves beside v1 on the same socket
//! and under the same rate limit: each pod's app containers with their devices (no sidecars,
//! CPUs or memory), for every pod the kubelet knows, as upstream's v1alpha1 lists them.

#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
pub mod api {
    tonic::include_proto!("v1alpha1");
}

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::PodResourcesService;
use api::pod_resources_lister_server::PodResourcesLister;

pub struct V1Alpha1(pub Arc<PodResourcesService>);

#[tonic::async_trait]
impl PodResourcesLister for V1Alpha1 {
    async fn list(
        &self,
        _: Request<api::ListPodResourcesRequest>,
    ) -> Result<Response<api::ListPodResourcesResponse>, Status> {
        let service = &self.0;
        service.admit()?;
        let pod_resources = service
            .status
            .pods()
            .iter()
            .map(|pod| {
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                let containers = pod.spec.as_ref().map(|s| s.containers.as_slice());
                api::PodResources {
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                    containers: containers
                        .unwrap_or_default()
                        .iter()
                        .map(|c| api::ContainerResources {
                            name: c.name.clone(),
                            devices: service
                                .devices
                                .as_ref()
                                .map(|d| d.container_devices(uid, &c.name))
                                .unwrap_or_default()
                                .into_iter()
                                .map(|h| api::ContainerDevices {
                                    resource_name: h.resource,
                                    device_ids: h.ids,
                                })
                                .collect(),
                        })
                        .collect(),
                }
            })
            .collect();
        Ok(Response::new(api::ListPodResourcesResponse {
            pod_resources,
        }))
    }
}
