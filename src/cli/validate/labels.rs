//! Upstream's `ValidateKubeletFlags`: the node labels a kubelet may set on itself.

use std::collections::BTreeMap;

use crate::names;

const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
];

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or("")
}

fn is_kubernetes_label(key: &str) -> bool {
    let ns = label_namespace(key);
    ns == "kubernetes.io"
        || ns.ends_with(".kubernetes.io")
        || ns == "k8s.io"
        || ns.ends_with(".k8s.io")
}

fn is_kubelet_label(key: &str) -> bool {
    if KUBELET_LABELS.contains(&key) {
        return true;
    }
    let ns = label_namespace(key);
    KUBELET_LABEL_NAMESPACES
        .iter()
        .any(|allowed| ns == *allowed || ns.ends_with(&format!(".{allowed}")))
}

/// Upstream `ValidateKubeletFlags`: node labels must be well formed and may only
/// use the kubernetes.io namespaces a kubelet is allowed to set.
pub fn validate_node_labels(labels: &BTreeMap<String, String>) -> Vec<String> {
    let mut errs = Vec::new();
    let unknown: Vec<&str> = labels
        .keys()
        .filter(|k| is_kubernetes_label(k) && !is_kubelet_label(k))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        errs.push(format!(
            "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{}]\n--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix ({}) or be in the specifically allowed set ({})",
            unknown.join(" "),
            KUBELET_LABEL_NAMESPACES.join(", "),
            KUBELET_LABELS.join(", ")
        ));
    }
    let mut invalid = Vec::new();
    for (k, v) in labels {
        if !names::is_qualified_name(k) {
            invalid.push(format!("'{k}' - name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        }
        if !names::is_label_value(v) {
            invalid.push(format!("'{v}' - a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        }
    }
    if !invalid.is_empty() {
        errs.push(format!("invalid node labels: {}", invalid.join("; ")));
    }
    errs
}
