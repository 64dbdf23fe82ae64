//! The CRI ImageService as the fake answers it: a node's images and a registry to pull from,
//! under docker-style names.

use tonic::{Request, Response, Status};

use super::FakeRuntime;
use crate::cri::api;
use crate::cri::api::image_service_server::ImageService;

/// Docker-style reference normalisation, as containerd applies it to CRI image names:
/// a missing registry is docker.io (plus `library/` for single names), a missing tag is
/// `latest`. Image ids (`sha256:…`) are returned as they are.
pub fn normalize_image(reference: &str) -> String {
    if reference.starts_with("sha256:") {
        return reference.to_string();
    }
    let (first, rest) = reference.split_once('/').unwrap_or(("", reference));
    let has_registry =
        !first.is_empty() && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = if has_registry {
        reference.to_string()
    } else if first.is_empty() {
        format!("docker.io/library/{rest}")
    } else {
        format!("docker.io/{reference}")
    };
    let last = full.rsplit('/').next().unwrap_or_default();
    if full.contains('@') || last.contains(':') {
        full
    } else {
        format!("{full}:latest")
    }
}

#[tonic::async_trait]
impl ImageService for FakeRuntime {
    async fn list_images(
        &self,
        request: Request<api::ListImagesRequest>,
    ) -> Result<Response<api::ListImagesResponse>, Status> {
        self.enter("ListImages", |_| String::new(), None).await?;
        let wanted = request
            .into_inner()
            .filter
            .and_then(|f| f.image)
            .map(|i| i.image)
            .filter(|i| !i.is_empty());
        let s = self.lock();
        let images = match wanted {
            Some(w) => s.image(&w).cloned().into_iter().collect(),
            None => s.images.clone(),
        };
        Ok(Response::new(api::ListImagesResponse { images }))
    }

    async fn image_status(
        &self,
        request: Request<api::ImageStatusRequest>,
    ) -> Result<Response<api::ImageStatusResponse>, Status> {
        let image = request
            .into_inner()
            .image
            .map(|i| i.image)
            .unwrap_or_default();
        self.enter("ImageStatus", |_| image.clone(), None).await?;
        // An absent image is an empty answer, not an error.
        let found = self.lock().image(&image).cloned();
        Ok(Response::new(api::ImageStatusResponse {
            image: found,
            ..Default::default()
        }))
    }

    async fn pull_image(
        &self,
        request: Request<api::PullImageRequest>,
    ) -> Result<Response<api::PullImageResponse>, Status> {
        let image = request
            .into_inner()
            .image
            .map(|i| i.image)
            .unwrap_or_default();
        self.enter("PullImage", |_| image.clone(), None).await?;
        let name = normalize_image(&image);
        let pullable = self.lock().registry.contains(&name);
        if !pullable {
            return Err(Status::not_found(format!(
                "failed to pull and unpack image {name:?}: failed to resolve reference {name:?}: {name}: not found"
            )));
        }
        let image_ref = self.add_image(&name);
        Ok(Response::new(api::PullImageResponse { image_ref }))
    }

    async fn remove_image(
        &self,
        request: Request<api::RemoveImageRequest>,
    ) -> Result<Response<api::RemoveImageResponse>, Status> {
        let image = request
            .into_inner()
            .image
            .map(|i| i.image)
            .unwrap_or_default();
        self.enter("RemoveImage", |_| image.clone(), None).await?;
        let mut s = self.lock();
        let id = s.image(&image).map(|i| i.id.clone());
        if let Some(id) = id {
            s.images.retain(|i| i.id != id);
        }
        Ok(Response::new(api::RemoveImageResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeCri;
    use std::time::Duration;

    #[test]
    fn image_names_normalise_like_docker() {
        assert_eq!(
            normalize_image("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(normalize_image("me/app:1"), "docker.io/me/app:1");
        assert_eq!(
            normalize_image("localhost:5000/app"),
            "localhost:5000/app:latest"
        );
        assert_eq!(
            normalize_image("registry.test/a/b@sha256:ab"),
            "registry.test/a/b@sha256:ab"
        );
        assert_eq!(normalize_image("sha256:ab"), "sha256:ab");
    }

    #[tokio::test]
    async fn images_pull_from_the_registry_only() {
        let cri = FakeCri::start(Duration::from_secs(5)).await;
        let (fake, c) = (&cri.runtime, &cri.client);
        assert!(c.image_status("app:1").await.expect("status").is_none());
        let err = c
            .pull_image("app:1", None, None, Duration::from_secs(5))
            .await
            .expect_err("not in the registry");
        assert!(err.is_not_found(), "{err}");
        fake.add_remote_image("docker.io/library/app:1");
        let image_ref = c
            .pull_image("app:1", None, None, Duration::from_secs(5))
            .await
            .expect("pull");
        let found = c.image_status("app:1").await.expect("status");
        assert_eq!(found.map(|i| i.id), Some(image_ref));
        assert_eq!(c.list_images().await.expect("list").len(), 1);
        c.remove_image("app:1").await.expect("remove");
        assert!(!fake.has_image("app:1"));
    }
}
