//! `hostUsers: false`: the pod wants a user namespace of its own. Upstream v1.34 asks the
//! runtime (CRI `Status`, `runtime_handlers[].features.user_namespaces`) and fails the pod's
//! sandbox with a clear message when the handler cannot do it; containerd before 2.0 lists no
//! handlers at all, which means no support.

use k8s_openapi::api::core::v1::Pod;

use crate::cri::api;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UsernsError {
    /// Upstream's words (kubelet v1.30+ after kubernetes#131623).
    #[error("can't set `spec.hostUsers: false`, runtime does not support user namespaces")]
    Runtime,
    #[error(
        "can't set `spec.hostUsers: false`, RuntimeClass handler {0:?} does not support user namespaces"
    )]
    Handler(String),
    #[error(
        "can't set `spec.hostUsers: false`, RuntimeClass handler {0:?} does not support user namespaces: the handler {0:?} is not known"
    )]
    UnknownHandler(String),
    /// The runtime could do it, but this kubelet does not allocate the pod's ID ranges yet.
    #[error(
        "can't set `spec.hostUsers: false`: this kubelet does not allocate user namespace ID mappings yet"
    )]
    NoMappings,
}

/// Whether the pod asks for a user namespace of its own.
pub fn wanted(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.host_users) == Some(false)
}

/// Whether `handler` (empty: the runtime's default) supports user namespaces, from the
/// runtime's `Status` answer.
pub fn check(handlers: &[api::RuntimeHandler], handler: &str) -> Result<(), UsernsError> {
    if handlers.is_empty() {
        return Err(UsernsError::Runtime);
    }
    let Some(h) = handlers.iter().find(|h| h.name == handler) else {
        return Err(UsernsError::UnknownHandler(handler.to_string()));
    };
    if !h.features.as_ref().is_some_and(|f| f.user_namespaces) {
        return Err(UsernsError::Handler(handler.to_string()));
    }
    Err(UsernsError::NoMappings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(name: &str, userns: bool) -> api::RuntimeHandler {
        api::RuntimeHandler {
            name: name.into(),
            features: Some(api::RuntimeHandlerFeatures {
                user_namespaces: userns,
                ..Default::default()
            }),
        }
    }

    #[test]
    fn runtimes_without_handlers_cannot() {
        let e = check(&[], "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
        );
        assert_eq!(
            check(&[handler("", false)], ""),
            Err(UsernsError::Handler(String::new()))
        );
        assert_eq!(
            check(&[handler("", true)], "kata"),
            Err(UsernsError::UnknownHandler("kata".into()))
        );
        assert_eq!(
            check(&[handler("", true)], ""),
            Err(UsernsError::NoMappings)
        );
    }

    #[test]
    fn only_an_explicit_false_asks() {
        let mut pod = Pod::default();
        assert!(!wanted(&pod));
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            host_users: Some(true),
            ..Default::default()
        });
        assert!(!wanted(&pod));
        pod.spec.as_mut().unwrap().host_users = Some(false);
        assert!(wanted(&pod));
    }
}
