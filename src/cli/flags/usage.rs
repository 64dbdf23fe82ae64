//! `--help` text in pflag's layout.

use super::table;
use super::{FlagDef, HelpDefault, Setter};
use crate::config::{KubeletConfiguration, KubeletFlags};

/// `--help` output in pflag's layout, flags sorted by name; ignored flags stay hidden.
pub(crate) fn usage() -> String {
    let mut defs: Vec<&FlagDef> = table::all()
        .filter(|f| !matches!(f.setter, Setter::Ignored))
        .collect();
    defs.sort_by_key(|f| f.name);
    let lefts: Vec<String> = defs
        .iter()
        .map(|f| {
            let short = match f.short {
                Some(c) => format!("  -{c}, --{}", f.name),
                None => format!("      --{}", f.name),
            };
            if f.type_name.is_empty() {
                short
            } else {
                format!("{short} {}", f.type_name)
            }
        })
        .collect();
    let width = lefts.iter().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    out.push_str(
        "The kubelet is the primary \"node agent\" that runs on each node. It can register the node \
with the apiserver using one of: the hostname; a flag to override the hostname; or specific logic \
for a cloud provider.\n\nThis implementation (kubelet-rs) accepts the upstream kubelet's flags and \
configuration file.\n\nUsage:\n  kubelet [flags]\n\nFlags:\n",
    );
    let flags = KubeletFlags::default();
    let config = KubeletConfiguration::legacy_flag_defaults();
    for (f, left) in defs.iter().zip(lefts) {
        let mut line = format!("{left:<width$}   {}", f.usage);
        let default = match f.default {
            HelpDefault::None => String::new(),
            HelpDefault::Flags(get) => get(&flags),
            HelpDefault::Config(get) => get(&config),
        };
        if !default.is_empty() {
            let shown = match f.type_name {
                "string" | "ip" => format!("{default:?}"),
                _ => default,
            };
            line.push_str(&format!(" (default {shown})"));
        }
        if let Some(msg) = f.deprecated {
            line.push_str(&format!(" (DEPRECATED: {msg})"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_lists_flags_with_defaults() {
        let u = usage();
        assert!(u.contains("Usage:\n  kubelet [flags]"));
        assert!(u.contains("--root-dir string"));
        assert!(u.contains("(default \"/var/lib/kubelet\")"));
        assert!(u.contains("-v, --v Level"));
        assert!(u.contains("--max-pods int32"));
        assert!(u.contains("(default 110)"));
        assert!(!u.contains("--network-plugin"), "removed flags stay hidden");
    }
}
