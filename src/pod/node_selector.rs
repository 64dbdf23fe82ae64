//! Whether a node matches a NodeSelector (a pod's required node affinity, a volume's node
//! affinity): any one term must match, and within a term every expression (labels) and every
//! field (`metadata.name`, the only field upstream selects on). An empty term matches nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement};

pub fn matches(
    selector: &NodeSelector,
    labels: &BTreeMap<String, String>,
    node_name: Option<&str>,
) -> bool {
    selector.node_selector_terms.iter().any(|term| {
        let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
        let fields = term.match_fields.as_deref().unwrap_or(&[]);
        (!exprs.is_empty() || !fields.is_empty())
            && exprs
                .iter()
                .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
            && fields
                .iter()
                .all(|r| r.key == "metadata.name" && requirement_matches(r, node_name))
    })
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    let num = |v: Option<&str>| v.and_then(|s| s.parse::<i64>().ok());
    let first = values.first().map(String::as_str);
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((num(value), num(first)), (Some(a), Some(b)) if a > b),
        "Lt" => matches!((num(value), num(first)), (Some(a), Some(b)) if a < b),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSelectorTerm;

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn terms_are_ored_and_their_requirements_anded() {
        let labels: BTreeMap<String, String> = [
            ("zone".to_string(), "a".to_string()),
            ("cpus".to_string(), "8".to_string()),
        ]
        .into();
        let sel = |terms: Vec<NodeSelectorTerm>| NodeSelector {
            node_selector_terms: terms,
        };
        let term = |exprs: Vec<NodeSelectorRequirement>, fields: Vec<NodeSelectorRequirement>| {
            NodeSelectorTerm {
                match_expressions: Some(exprs),
                match_fields: Some(fields),
            }
        };
        let zone_a = term(
            vec![req("zone", "In", &["a", "b"]), req("cpus", "Gt", &["4"])],
            vec![],
        );
        assert!(matches(&sel(vec![zone_a.clone()]), &labels, Some("n1")));
        let zone_c = term(vec![req("zone", "In", &["c"])], vec![]);
        assert!(!matches(&sel(vec![zone_c.clone()]), &labels, Some("n1")));
        assert!(matches(&sel(vec![zone_c, zone_a]), &labels, Some("n1")));
        let by_name = term(vec![], vec![req("metadata.name", "In", &["n1"])]);
        assert!(matches(&sel(vec![by_name.clone()]), &labels, Some("n1")));
        assert!(!matches(&sel(vec![by_name]), &labels, Some("n2")));
        assert!(!matches(
            &sel(vec![term(vec![], vec![])]),
            &labels,
            Some("n1")
        ));
        let absent = term(
            vec![
                req("gpu", "DoesNotExist", &[]),
                req("zone", "NotIn", &["b"]),
            ],
            vec![],
        );
        assert!(matches(&sel(vec![absent]), &labels, None));
    }
}
