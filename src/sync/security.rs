//! The security part of admission, which upstream applies to every pod, static ones included:
//! sysctls, `supplementalGroupsPolicy: Strict` on a runtime that cannot honour it, and AppArmor
//! on a host without it. A refused pod fails with upstream's reason and message.

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use super::admission::Rejection;
use super::sysctls::{FORBIDDEN_REASON, SysctlAllowlist};
use crate::runtime::apparmor;

pub const SUPPLEMENTAL_GROUPS_POLICY_REASON: &str = "SupplementalGroupsPolicyNotSupported";

pub struct SecurityAdmission {
    pub sysctls: SysctlAllowlist,
    /// Whether this kernel enforces AppArmor (read once at start, as upstream does).
    pub apparmor_enabled: bool,
    /// Whether the runtime reports `features.supplemental_groups_policy` in its CRI status;
    /// false until it has answered once.
    pub supplemental_groups_policy: watch::Receiver<bool>,
}

fn reject(reason: &str, message: String) -> Result<(), Rejection> {
    Err(Rejection {
        reason: reason.to_string(),
        message,
    })
}

impl SecurityAdmission {
    pub fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        if let Err(forbidden) = self.sysctls.admit(pod) {
            return reject(FORBIDDEN_REASON, forbidden.to_string());
        }
        let strict = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.supplemental_groups_policy.as_deref())
            == Some("Strict");
        if strict && !*self.supplemental_groups_policy.borrow() {
            return reject(
                SUPPLEMENTAL_GROUPS_POLICY_REASON,
                "SupplementalGroupsPolicy=Strict is not supported in this node".into(),
            );
        }
        if let Err(unenforceable) = apparmor::admit(pod, self.apparmor_enabled) {
            return reject(apparmor::REJECT_REASON, unenforceable.to_string());
        }
        Ok(())
    }
}

/// Keeps `tx` at the runtime's `features.supplemental_groups_policy`: asked every 5 s until the
/// runtime answers, then every minute (a runtime upgrade restarts it, and the kubelet with it
/// in practice, but a late start of the runtime must not leave the flag false forever).
pub async fn watch_runtime_features(
    cri: crate::cri::RuntimeClient,
    tx: watch::Sender<bool>,
    cancel: tokio_util::sync::CancellationToken,
) {
    loop {
        let wait = match cri.status(false).await {
            Ok(status) => {
                let on = status
                    .features
                    .is_some_and(|f| f.supplemental_groups_policy);
                tx.send_if_modified(|v| std::mem::replace(v, on) != on);
                std::time::Duration::from_secs(60)
            }
            Err(e) => {
                tracing::debug!(err = %e, "Asking the runtime for its features failed");
                std::time::Duration::from_secs(5)
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{AppArmorProfile, PodSecurityContext, PodSpec, Sysctl};

    fn admission(runtime_strict: bool, apparmor_enabled: bool) -> SecurityAdmission {
        SecurityAdmission {
            sysctls: SysctlAllowlist::new(Some((6, 1)), &[]).unwrap(),
            apparmor_enabled,
            supplemental_groups_policy: watch::channel(runtime_strict).1,
        }
    }

    fn pod(sc: PodSecurityContext) -> Pod {
        Pod {
            spec: Some(PodSpec {
                security_context: Some(sc),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn each_check_has_upstreams_reason() {
        let a = admission(false, false);
        assert!(a.admit(&Pod::default()).is_ok());
        let r = a
            .admit(&pod(PodSecurityContext {
                sysctls: Some(vec![Sysctl {
                    name: "kernel.msgmax".into(),
                    value: "1".into(),
                }]),
                ..Default::default()
            }))
            .unwrap_err();
        assert_eq!(r.reason, "SysctlForbidden");
        assert_eq!(
            r.message,
            "forbidden sysctl: \"kernel.msgmax\" not allowlisted"
        );

        let strict = pod(PodSecurityContext {
            supplemental_groups_policy: Some("Strict".into()),
            ..Default::default()
        });
        let r = a.admit(&strict).unwrap_err();
        assert_eq!(r.reason, "SupplementalGroupsPolicyNotSupported");
        assert_eq!(
            r.message,
            "SupplementalGroupsPolicy=Strict is not supported in this node"
        );
        assert!(admission(true, false).admit(&strict).is_ok());
        let merge = pod(PodSecurityContext {
            supplemental_groups_policy: Some("Merge".into()),
            ..Default::default()
        });
        assert!(a.admit(&merge).is_ok());

        let confined = pod(PodSecurityContext {
            app_armor_profile: Some(AppArmorProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        });
        let r = a.admit(&confined).unwrap_err();
        assert_eq!(r.reason, "AppArmor");
        assert_eq!(
            r.message,
            "Cannot enforce AppArmor: AppArmor is not enabled on the host"
        );
        assert!(admission(false, true).admit(&confined).is_ok());
    }
}
