//! The Registration service on `kubelet.sock`: a plugin names its API version, its socket
//! and its resource; the kubelet checks them as upstream does, dials the plugin back and
//! starts following its devices before it answers.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::api;
use super::{DeviceManager, SUPPORTED_VERSIONS};

/// Upstream's IsExtendedResourceName: a domain-prefixed name outside kubernetes.io whose
/// quota form (`requests.<name>`) is a qualified name.
pub fn is_extended_resource_name(name: &str) -> bool {
    if !name.contains('/') || name.contains("kubernetes.io/") || name.starts_with("requests.") {
        return false;
    }
    is_qualified_name(&format!("requests.{name}"))
}

fn is_qualified_name(name: &str) -> bool {
    let (prefix, local) = match name.split_once('/') {
        Some((p, l)) if !l.contains('/') => (Some(p), l),
        Some(_) => return false,
        None => (None, name),
    };
    if let Some(p) = prefix
        && !is_dns1123_subdomain(p)
    {
        return false;
    }
    let bytes = local.as_bytes();
    let alnum = |b: &u8| b.is_ascii_alphanumeric();
    !local.is_empty()
        && local.len() <= 63
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn is_dns1123_subdomain(s: &str) -> bool {
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        !l.is_empty()
            && b.first()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && b.last()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label_ok)
}

/// Go's `%q` of a string list: `["v1beta1"]`.
fn go_quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// Why a registration is refused, in upstream's words.
pub fn check(req: &api::RegisterRequest) -> Result<(), String> {
    if !SUPPORTED_VERSIONS.contains(&req.version.as_str()) {
        return Err(format!(
            "requested API version {:?} is not supported by kubelet. Supported versions are {}",
            req.version,
            go_quoted_list(SUPPORTED_VERSIONS)
        ));
    }
    if !is_extended_resource_name(&req.resource_name) {
        return Err(format!(
            "the ResourceName {:?} is invalid",
            req.resource_name
        ));
    }
    // The plugin's socket is a file of the device-plugins folder, never a path out of it.
    let endpoint = std::path::Path::new(&req.endpoint);
    let plain = endpoint
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if req.endpoint.is_empty() || !plain {
        return Err(format!(
            "the endpoint {:?} is not a socket name in the device plugin folder",
            req.endpoint
        ));
    }
    Ok(())
}

/// A device plugin announced in `plugins_registry/`, checked as upstream's ValidatePlugin
/// checks it: its name is the resource.
pub fn validate(name: &str, versions: &[String]) -> Result<(), String> {
    if !versions
        .iter()
        .any(|v| SUPPORTED_VERSIONS.contains(&v.as_str()))
    {
        return Err(format!(
            "manager version, {}, is not among plugin supported versions [{}]",
            SUPPORTED_VERSIONS[0],
            versions.join(" ")
        ));
    }
    if !is_extended_resource_name(name) {
        return Err(format!(
            "invalid name of device plugin socket: the ResourceName {name:?} is invalid"
        ));
    }
    Ok(())
}

pub struct RegistrationService {
    pub manager: Arc<DeviceManager>,
}

#[tonic::async_trait]
impl api::registration_server::Registration for RegistrationService {
    async fn register(
        &self,
        request: Request<api::RegisterRequest>,
    ) -> Result<Response<api::Empty>, Status> {
        let req = request.into_inner();
        info!(resource_name = %req.resource_name, endpoint = %req.endpoint, version = %req.version, "Got registration request from device plugin with resource");
        if let Err(message) = check(&req) {
            warn!(resource_name = %req.resource_name, err = %message, "Bad registration request from device plugin");
            return Err(Status::unknown(message));
        }
        match self
            .manager
            .connect(&req.resource_name, &req.endpoint)
            .await
        {
            Ok(()) => Ok(Response::new(api::Empty {})),
            Err(e) => {
                warn!(resource_name = %req.resource_name, err = %e, "Error connecting to device plugin client");
                Err(Status::unknown(e.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(version: &str, resource: &str, endpoint: &str) -> api::RegisterRequest {
        api::RegisterRequest {
            version: version.into(),
            endpoint: endpoint.into(),
            resource_name: resource.into(),
            options: None,
        }
    }

    #[test]
    fn extended_resource_names_as_upstream_checks_them() {
        for ok in [
            "example.com/gpu",
            "nvidia.com/gpu",
            "a.b/c_d.e-f",
            "x.io/A1",
        ] {
            assert!(is_extended_resource_name(ok), "{ok}");
        }
        for bad in [
            "gpu",
            "kubernetes.io/gpu",
            "foo.kubernetes.io/gpu",
            "requests.example.com/gpu",
            "Example.com/gpu",
            "example.com/",
            "example.com/-gpu",
            "example.com/a/b",
            "",
        ] {
            assert!(!is_extended_resource_name(bad), "{bad}");
        }
        let long = format!("example.com/{}", "a".repeat(64));
        assert!(!is_extended_resource_name(&long));
    }

    #[test]
    fn refusals_carry_upstreams_reasons() {
        assert_eq!(
            check(&req("v1alpha", "example.com/dev", "p.sock")).unwrap_err(),
            "requested API version \"v1alpha\" is not supported by kubelet. Supported versions are [\"v1beta1\"]"
        );
        assert_eq!(
            check(&req("v1beta1", "dev", "p.sock")).unwrap_err(),
            "the ResourceName \"dev\" is invalid"
        );
        assert!(check(&req("v1beta1", "example.com/dev", "../x.sock")).is_err());
        assert!(check(&req("v1beta1", "example.com/dev", "/tmp/x.sock")).is_err());
        assert!(check(&req("v1beta1", "example.com/dev", "")).is_err());
        check(&req("v1beta1", "example.com/dev", "p.sock")).unwrap();
    }

    #[test]
    fn plugins_from_the_registry_folder_are_checked_alike() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        validate("example.com/dev", &v(&["v1alpha1", "v1beta1"])).unwrap();
        assert_eq!(
            validate("example.com/dev", &v(&["v1", "v2"])).unwrap_err(),
            "manager version, v1beta1, is not among plugin supported versions [v1 v2]"
        );
        assert_eq!(
            validate("dev", &v(&["v1beta1"])).unwrap_err(),
            "invalid name of device plugin socket: the ResourceName \"dev\" is invalid"
        );
    }
}
