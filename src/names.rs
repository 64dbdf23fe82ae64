//! Kubernetes name syntax: DNS-1123 labels and subdomains, qualified names (label and
//! annotation keys, taint keys) and label values.
//!
//! The command line (node labels, taints) and pod validation both check names here so that a
//! name one accepts the other accepts too. The rules are upstream's apimachinery ones, lengths
//! included: a subdomain is limited to 253 characters as a whole, and upstream sets no
//! 63-character limit on its dot-separated parts, so neither does this module.

/// Longest DNS-1123 label, and longest name part of a qualified name or label value.
pub const DNS1123_LABEL_MAX: usize = 63;
/// Longest DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;

/// Why a value is not a DNS-1123 label, in upstream's words.
pub const DNS1123_LABEL_MESSAGE: &str = "a lowercase RFC 1123 label must consist of lower case \
     alphanumeric characters or '-', and must start and end with an alphanumeric character";
/// Why a value is not a DNS-1123 subdomain, in upstream's words.
pub const DNS1123_SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower \
     case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
     character";

fn lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// One dot-free part of a DNS name, with no length limit of its own.
fn is_dns1123_part(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().copied().is_some_and(lower_alnum)
        && b.last().copied().is_some_and(lower_alnum)
        && b.iter().all(|&c| lower_alnum(c) || c == b'-')
}

/// A DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters (namespaces,
/// container and volume names).
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= DNS1123_LABEL_MAX && is_dns1123_part(s)
}

/// A DNS-1123 subdomain: labels joined by dots, at most 253 characters (pod names, the
/// prefix of a qualified name).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= DNS1123_SUBDOMAIN_MAX && s.split('.').all(is_dns1123_part)
}

/// The name part of a qualified name, also the syntax of a non-empty label value:
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= DNS1123_LABEL_MAX
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A qualified name (label key, annotation key, taint key): an optional DNS-1123 subdomain
/// prefix and `/`, then a name part.
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns1123_subdomain(prefix) && is_name_part(name),
        None => is_name_part(s),
    }
}

/// A label value: empty, or a name part.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_name_part(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        assert!(is_dns1123_label("a-b0"));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("kube-apiserver.node-1"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain("under_score"));
    }

    #[test]
    fn labels() {
        assert!(is_dns1123_label("a-b0"));
        assert!(is_dns1123_label("0"));
        assert!(is_dns1123_label(&"a".repeat(63)));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label("a.b"));
        assert!(!is_dns1123_label(""));
    }

    #[test]
    fn subdomains() {
        assert!(is_dns1123_subdomain("kube-apiserver.node-1"));
        assert!(is_dns1123_subdomain("example.com"));
        assert!(!is_dns1123_subdomain(""));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain(".a"));
        assert!(!is_dns1123_subdomain("a."));
        assert!(!is_dns1123_subdomain("under_score"));
        assert!(!is_dns1123_subdomain("Upper.case"));
        assert!(!is_dns1123_subdomain("a.-b"));
    }

    /// Upstream limits the whole subdomain to 253 characters and its parts not at all: a pod
    /// named `etcd-<long node name>` stays valid past 63 characters.
    #[test]
    fn subdomain_lengths_follow_upstream() {
        let long_part = "a".repeat(64);
        assert!(is_dns1123_subdomain(&long_part));
        assert!(is_dns1123_subdomain(&format!("x.{long_part}.y")));
        assert!(is_dns1123_subdomain(&"a".repeat(253)));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
        let parts = vec!["abc"; 64].join(".");
        assert_eq!(parts.len(), 255);
        assert!(!is_dns1123_subdomain(&parts));
    }

    #[test]
    fn qualified_names() {
        assert!(is_qualified_name("foo"));
        assert!(is_qualified_name("Foo_bar.baz-1"));
        assert!(is_qualified_name("example.com/foo"));
        assert!(is_qualified_name("node-role.kubernetes.io/worker"));
        assert!(is_qualified_name(&format!("{}/x", "a".repeat(64))));
        assert!(is_qualified_name(&format!("x/{}", "a".repeat(63))));
        assert!(!is_qualified_name(&format!("x/{}", "a".repeat(64))));
        assert!(!is_qualified_name(""));
        assert!(!is_qualified_name("/foo"));
        assert!(!is_qualified_name("example.com/"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(!is_qualified_name("-bad"));
        assert!(!is_qualified_name("Example.com/foo"));
        assert!(!is_qualified_name(&format!("{}/x", "a".repeat(254))));
    }

    #[test]
    fn label_values() {
        assert!(is_label_value(""));
        assert!(is_label_value("yes"));
        assert!(is_label_value("A.b-c_d"));
        assert!(is_label_value(&"v".repeat(63)));
        assert!(!is_label_value(&"v".repeat(64)));
        assert!(!is_label_value("-b"));
        assert!(!is_label_value("b-"));
        assert!(!is_label_value("a b"));
        assert!(!is_label_value("a/b"));
    }
}
