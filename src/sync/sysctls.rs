//! Sysctl admission, as upstream v1.34's: a pod may set the safe sysctls (namespaced and
//! isolated, some only on kernels where they became namespaced) and whatever
//! `allowedUnsafeSysctls` names (a trailing `*` for a prefix); anything else, or a network
//! sysctl in a host-network pod, or an IPC sysctl in a host-IPC pod, is refused with reason
//! `SysctlForbidden`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

pub const FORBIDDEN_REASON: &str = "SysctlForbidden";

const SAFE: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];

/// Safe only from the kernel (major, minor) where each became namespaced.
const SAFE_FROM_KERNEL: &[(&str, (u32, u32))] = &[
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
];

/// The regular expression upstream checks `allowedUnsafeSysctls` entries against, as its
/// error message prints it.
const PATTERN_REGEX: &str =
    r"([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]";
const MAX_LENGTH: usize = 253;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    /// How upstream prints it in "not allowed with host ... enabled".
    fn name(self) -> &'static str {
        match self {
            Namespace::Ipc => "IPC",
            Namespace::Net => "Net",
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SysctlError {
    #[error(
        "sysctl {0:?} must have at most {MAX_LENGTH} characters and match regex {PATTERN_REGEX}"
    )]
    InvalidPattern(String),
    #[error("the sysctls {0:?} are not known to be namespaced")]
    NotNamespaced(String),
}

/// Upstream writes `net/ipv4/conf/eth0.100/rp_filter` for `net.ipv4.conf.eth0/100.rp_filter`:
/// when the first separator is a `/`, dots and slashes swap.
fn normalize(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

fn namespace_of(name: &str) -> Option<Namespace> {
    const IPC_NAMES: &[&str] = &[
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
        "kernel.shm",
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.msg",
    ];
    if IPC_NAMES.contains(&name) {
        return Some(Namespace::Ipc);
    }
    if name.starts_with("net.") {
        return Some(Namespace::Net);
    }
    if name.starts_with("fs.mqueue.") {
        return Some(Namespace::Ipc);
    }
    None
}

fn segment_ok(seg: &str, last: bool) -> bool {
    let b = seg.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let inner = |c: u8| alnum(c) || c == b'-' || c == b'_';
    let Some((&end, rest)) = b.split_last() else {
        return false;
    };
    if last {
        // `([a-z0-9][-_a-z0-9]*)?[a-z0-9*]`
        (alnum(end) || end == b'*')
            && rest.first().is_none_or(|&c| alnum(c))
            && rest.iter().all(|&c| inner(c))
    } else {
        // `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`
        alnum(end) && alnum(b[0]) && b.iter().all(|&c| inner(c))
    }
}

fn valid_pattern(p: &str) -> bool {
    if p.len() > MAX_LENGTH {
        return false;
    }
    let segs: Vec<&str> = p.split(['.', '/']).collect();
    segs.iter()
        .enumerate()
        .all(|(i, s)| segment_ok(s, i + 1 == segs.len()))
}

/// Why admission refuses a pod's sysctl, in upstream's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Forbidden {
    #[error("forbidden sysctl: {0:?} not allowlisted")]
    NotAllowlisted(String),
    #[error("forbidden sysctl: {name:?} not allowed with host {namespace} enabled")]
    HostNamespace {
        name: String,
        namespace: &'static str,
    },
}

/// The sysctls pods may set on this node.
#[derive(Clone, Debug, Default)]
pub struct SysctlAllowlist {
    names: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

impl SysctlAllowlist {
    /// Upstream's safe set for `kernel` (major, minor; `None`: unknown, only the ungated ones)
    /// plus `allowed_unsafe`. A pattern that is malformed or not known to be namespaced is an
    /// error: upstream's kubelet does not start with one.
    pub fn new(kernel: Option<(u32, u32)>, allowed_unsafe: &[String]) -> Result<Self, SysctlError> {
        let safe = SAFE.iter().map(|s| s.to_string()).chain(
            SAFE_FROM_KERNEL
                .iter()
                .filter(|(_, min)| kernel.is_some_and(|k| k >= *min))
                .map(|(s, _)| s.to_string()),
        );
        let mut list = SysctlAllowlist::default();
        for p in safe.chain(allowed_unsafe.iter().cloned()) {
            if !valid_pattern(&p) {
                return Err(SysctlError::InvalidPattern(p));
            }
            let normalized = normalize(&p);
            let (name, prefixed) = match normalized.find('*') {
                Some(i) => (normalized[..i].to_string(), true),
                None => (normalized, false),
            };
            let ns = namespace_of(&name).ok_or_else(|| SysctlError::NotNamespaced(name.clone()))?;
            if prefixed {
                list.prefixes.insert(name, ns);
            } else {
                list.names.insert(name, ns);
            }
        }
        Ok(list)
    }

    fn check(&self, sysctl: &str, host_net: bool, host_ipc: bool) -> Result<(), Forbidden> {
        let name = normalize(sysctl);
        let ns = self.names.get(&name).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| name.starts_with(p.as_str()))
                .map(|(_, ns)| *ns)
        });
        match ns {
            None => Err(Forbidden::NotAllowlisted(name)),
            Some(ns @ Namespace::Ipc) if host_ipc => Err(Forbidden::HostNamespace {
                name,
                namespace: ns.name(),
            }),
            Some(ns @ Namespace::Net) if host_net => Err(Forbidden::HostNamespace {
                name,
                namespace: ns.name(),
            }),
            Some(_) => Ok(()),
        }
    }

    /// Upstream's admission: the first sysctl not allowed refuses the pod, with this message.
    pub fn admit(&self, pod: &Pod) -> Result<(), Forbidden> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|s| s.sysctls.as_ref());
        for s in sysctls.into_iter().flatten() {
            self.check(
                &s.name,
                spec.host_network.unwrap_or(false),
                spec.host_ipc.unwrap_or(false),
            )?;
        }
        Ok(())
    }
}

/// The running kernel's (major, minor), from its release string (where upstream reads it).
pub fn kernel_version() -> Option<(u32, u32)> {
    parse_release(&std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?)
}

fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSecurityContext, PodSpec, Sysctl};

    fn pod(names: &[&str], host_net: bool, host_ipc: bool) -> Pod {
        Pod {
            spec: Some(PodSpec {
                host_network: Some(host_net),
                host_ipc: Some(host_ipc),
                security_context: Some(PodSecurityContext {
                    sysctls: Some(
                        names
                            .iter()
                            .map(|n| Sysctl {
                                name: n.to_string(),
                                value: "1".into(),
                            })
                            .collect(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn safe_set_depends_on_the_kernel() {
        let old = SysctlAllowlist::new(Some((4, 4)), &[]).unwrap();
        let new = SysctlAllowlist::new(Some((6, 1)), &[]).unwrap();
        let unknown = SysctlAllowlist::new(None, &[]).unwrap();
        let rmem = pod(&["net.ipv4.tcp_rmem"], false, false);
        assert!(new.admit(&rmem).is_ok());
        assert!(old.admit(&rmem).is_err());
        assert!(unknown.admit(&rmem).is_err());
        let reserved = pod(&["net.ipv4.ip_local_reserved_ports"], false, false);
        assert!(old.admit(&reserved).is_ok());
        assert!(
            unknown
                .admit(&pod(&["kernel.shm_rmid_forced"], false, false))
                .is_ok()
        );
    }

    #[test]
    fn unsafe_sysctls_need_the_allowlist() {
        let plain = SysctlAllowlist::new(Some((6, 1)), &[]).unwrap();
        let p = pod(
            &["net.ipv4.ip_local_port_range", "kernel.msgmax"],
            false,
            false,
        );
        assert_eq!(
            plain.admit(&p).unwrap_err().to_string(),
            "forbidden sysctl: \"kernel.msgmax\" not allowlisted"
        );
        let allowed = SysctlAllowlist::new(
            Some((6, 1)),
            &["kernel.msg*".into(), "net.core.somaxconn".into()],
        )
        .unwrap();
        assert!(allowed.admit(&p).is_ok());
        assert!(
            allowed
                .admit(&pod(&["net.core.somaxconn"], false, false))
                .is_ok()
        );
        assert!(
            allowed
                .admit(&pod(&["net.core.rmem_max"], false, false))
                .is_err()
        );
    }

    #[test]
    fn host_namespaces_forbid_their_sysctls() {
        let list = SysctlAllowlist::new(Some((6, 1)), &["kernel.shm*".into()]).unwrap();
        assert_eq!(
            list.admit(&pod(&["net.ipv4.tcp_syncookies"], true, false))
                .unwrap_err()
                .to_string(),
            "forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host Net enabled"
        );
        assert_eq!(
            list.admit(&pod(&["kernel.shmmax"], false, true))
                .unwrap_err()
                .to_string(),
            "forbidden sysctl: \"kernel.shmmax\" not allowed with host IPC enabled"
        );
        assert!(list.admit(&pod(&["kernel.shmmax"], true, false)).is_ok());
        assert!(
            list.admit(&pod(&["net.ipv4.tcp_syncookies"], false, true))
                .is_ok()
        );
    }

    #[test]
    fn slash_names_are_normalized() {
        let list = SysctlAllowlist::new(Some((6, 1)), &["net.ipv4.conf.eth0/100.rp_filter".into()])
            .unwrap();
        assert!(
            list.admit(&pod(&["net/ipv4/conf/eth0.100/rp_filter"], false, false))
                .is_ok()
        );
        assert!(
            list.admit(&pod(&["net/ipv4/ip_local_port_range"], false, false))
                .is_ok()
        );
    }

    #[test]
    fn bad_patterns_stop_the_kubelet() {
        assert_eq!(
            SysctlAllowlist::new(None, &["kernel.panic".into()]).unwrap_err(),
            SysctlError::NotNamespaced("kernel.panic".into())
        );
        assert_eq!(
            SysctlAllowlist::new(None, &["Kernel.msgmax".into()]).unwrap_err(),
            SysctlError::InvalidPattern("Kernel.msgmax".into())
        );
        assert!(SysctlAllowlist::new(None, &["net.*".into()]).is_ok());
        assert!(SysctlAllowlist::new(None, &["kernel.*".into()]).is_err());
        // A lone `*` matches upstream's expression; it fails on the namespace instead.
        assert!(valid_pattern("*"));
        assert_eq!(
            SysctlAllowlist::new(None, &["*".into()]).unwrap_err(),
            SysctlError::NotNamespaced(String::new())
        );
        for bad in ["net.*.x", "net..x", "-net.x", "net.x-"] {
            assert!(!valid_pattern(bad), "{bad}");
        }
        for good in [
            "net.ipv4.tcp_rmem",
            "net.*",
            "fs.mqueue.*",
            "net.ipv4.conf.eth0/100.rp_filter",
        ] {
            assert!(valid_pattern(good), "{good}");
        }
        let e = SysctlError::InvalidPattern("A".into()).to_string();
        assert!(
            e.starts_with("sysctl \"A\" must have at most 253 characters and match regex ("),
            "{e}"
        );
    }

    #[test]
    fn kernel_release_parsing() {
        assert_eq!(parse_release("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(parse_release("4.15.0"), Some((4, 15)));
        assert_eq!(parse_release("garbage"), None);
    }
}
