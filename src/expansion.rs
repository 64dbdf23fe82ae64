//! `$(NAME)` references in env values, command, args and `subPathExpr`, with upstream's
//! rules: `$$` escapes a `$`, and a reference to an unknown name stays as written.

use std::collections::HashMap;

/// Expands with a lookup: `None` keeps the reference verbatim.
pub fn expand_with(input: &str, mut lookup: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match lookup(name) {
                        Some(v) => out.push_str(&v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `$(NAME)` is replaced when NAME is defined; anything else is kept verbatim.
pub fn expand(input: &str, vars: &HashMap<String, String>) -> String {
    expand_with(input, |name| vars.get(name).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_rules() {
        let vars = HashMap::from([("A".to_string(), "x".to_string())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$-$(", &vars), "x-$(B)-$(A)-$-$(");
    }
}
