//! Every flag the kubelet accepts, each declared once: name, help and setter together.

mod flags_only;
mod legacy;
mod node;
mod resources;
mod serving;

use super::shown::{Shown, thresholds_shown};
use super::values::{
    assign, bool_map, boolean, duration, header_map, int32, int64, ip, label_pairs, level,
    node_ips, optional_path, optional_text, path, quantity_text, reserved_memory, string_map,
    strings, taints, text, unsplit_string_map, vmodule,
};
use super::{Arity, FlagDef, HelpDefault, Setter, ValueError};
use crate::config::{FlushFrequency, KubeletConfiguration, KubeletFlags};

/// Upstream deprecates every flag that sets a `KubeletConfiguration` field with this notice.
const CONFIG_DEPRECATION: &str = "This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information.";
const CADVISOR_DEPRECATION: &str = "This is a cadvisor flag that was mistakenly registered with the Kubelet. Due to legacy concerns, it will follow the standard CLI deprecation timeline before being removed.";

/// How a flag takes its value, and the type name `--help` shows for it.
struct Kind(Arity, &'static str);

const BOOL: Kind = Kind(Arity::Bool, "");
const STRING: Kind = Kind(Arity::Value, "string");
const STRINGS: Kind = Kind(Arity::Value, "strings");
const INT32: Kind = Kind(Arity::Value, "int32");
const INT: Kind = Kind(Arity::Value, "int");
const DURATION: Kind = Kind(Arity::Value, "duration");
const IP: Kind = Kind(Arity::Value, "ip");
const QUANTITY: Kind = Kind(Arity::Value, "quantity");
const MAP_STRING_STRING: Kind = Kind(Arity::Value, "mapStringString");
const MAP_STRING_BOOL: Kind = Kind(Arity::Value, "mapStringBool");
const HEADERS: Kind = Kind(Arity::Value, "colonSeparatedMultimapStringString");
const LEVEL: Kind = Kind(Arity::Value, "Level");
const MODULE_LEVELS: Kind = Kind(Arity::Value, "pattern=N,...");
const VERSION: Kind = Kind(Arity::Bool, "version[=true]");
/// Ignored flags show no type.
const ANY: Kind = Kind(Arity::Value, "");

type FlagsSetter = fn(&mut KubeletFlags, &str) -> Result<(), ValueError>;
type ConfigSetter = fn(&mut KubeletConfiguration, &str, bool) -> Result<(), ValueError>;

/// No default shown.
const NONE: HelpDefault = HelpDefault::None;

/// The default of a flag-only setting, read from `KubeletFlags::default()`.
const fn flags_default(get: fn(&KubeletFlags) -> String) -> HelpDefault {
    HelpDefault::Flags(get)
}

/// The default of a configuration flag, read from the legacy command-line defaults.
const fn config_default(get: fn(&KubeletConfiguration) -> String) -> HelpDefault {
    HelpDefault::Config(get)
}

const fn def(
    name: &'static str,
    kind: Kind,
    default: HelpDefault,
    usage: &'static str,
    deprecated: Option<&'static str>,
    setter: Setter,
) -> FlagDef {
    FlagDef {
        name,
        short: None,
        arity: kind.0,
        type_name: kind.1,
        default,
        usage,
        deprecated,
        setter,
    }
}

/// A setting that exists only as a flag.
const fn flag(
    name: &'static str,
    kind: Kind,
    default: HelpDefault,
    usage: &'static str,
    set: FlagsSetter,
) -> FlagDef {
    def(name, kind, default, usage, None, Setter::Flags(set))
}

/// A flag that sets a `KubeletConfiguration` field, deprecated in favour of the file.
const fn config(
    name: &'static str,
    kind: Kind,
    default: HelpDefault,
    usage: &'static str,
    set: ConfigSetter,
) -> FlagDef {
    def(
        name,
        kind,
        default,
        usage,
        Some(CONFIG_DEPRECATION),
        Setter::Config(set),
    )
}

/// A flag removed upstream: accepted, warned about, hidden from `--help`.
const fn ignored(name: &'static str, kind: Kind) -> FlagDef {
    def(name, kind, NONE, "", None, Setter::Ignored)
}

/// A cadvisor flag upstream still registers, deprecated, with no effect.
const fn cadvisor(name: &'static str, kind: Kind) -> FlagDef {
    def(
        name,
        kind,
        NONE,
        "",
        Some(CADVISOR_DEPRECATION),
        Setter::Ignored,
    )
}

impl FlagDef {
    const fn short(mut self, c: char) -> Self {
        self.short = Some(c);
        self
    }

    const fn deprecated(mut self, notice: &'static str) -> Self {
        self.deprecated = Some(notice);
        self
    }

    /// For the configuration flags upstream does not deprecate (the logging flags and
    /// `--provider-id`).
    const fn not_deprecated(mut self) -> Self {
        self.deprecated = None;
        self
    }
}

/// Every flag the kubelet accepts, in upstream's groups. Help output sorts by name.
static GROUPS: [&[FlagDef]; 5] = [
    flags_only::FLAGS_ONLY,
    serving::SERVING,
    resources::RESOURCES,
    node::NODE,
    legacy::LEGACY,
];

/// Every flag, group by group.
pub(crate) fn all() -> impl Iterator<Item = &'static FlagDef> {
    GROUPS.iter().flat_map(|g| g.iter())
}

/// pflag's word-separator normalisation: `--node_ip` is `--node-ip`.
fn normalize(name: &str) -> String {
    name.replace('_', "-")
}

pub(crate) fn lookup(name: &str) -> Option<&'static FlagDef> {
    let n = normalize(name);
    all().find(|f| f.name == n)
}

pub(crate) fn lookup_short(c: char) -> Option<&'static FlagDef> {
    all().find(|f| f.short == Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a configuration flag's setter as the command line would.
    fn apply_config(
        c: &mut KubeletConfiguration,
        name: &str,
        v: &str,
        first: bool,
    ) -> Result<(), String> {
        let def = lookup(name).ok_or_else(|| format!("no flag --{name}"))?;
        let Setter::Config(set) = def.setter else {
            return Err(format!("--{name} is not a configuration flag"));
        };
        set(c, v, first).map_err(|reason| {
            super::super::FlagError::InvalidValue {
                flag: def.name,
                value: v.to_string(),
                reason,
            }
            .to_string()
        })
    }

    #[test]
    fn map_flags_replace_then_merge() {
        let mut c = KubeletConfiguration::defaulted();
        assert!(apply_config(&mut c, "eviction-hard", "memory.available<1Gi", true).is_ok());
        assert!(apply_config(&mut c, "eviction-hard", "nodefs.available<5%", false).is_ok());
        assert_eq!(c.eviction_hard.len(), 2);
        assert_eq!(c.eviction_hard["memory.available"], "1Gi");
        assert!(apply_config(&mut c, "eviction-hard", "memory.available=1Gi", true).is_err());
        c.feature_gates.insert("FromFile".into(), true);
        c.feature_gates.insert("Both".into(), true);
        assert!(apply_config(&mut c, "feature-gates", "Both=false,New=true", true).is_ok());
        assert_eq!(c.feature_gates.get("FromFile"), Some(&true));
        assert_eq!(c.feature_gates.get("Both"), Some(&false));
        assert_eq!(c.feature_gates.get("New"), Some(&true));
        assert!(apply_config(&mut c, "cluster-dns", "10.0.0.10,10.0.0.11", true).is_ok());
        assert!(apply_config(&mut c, "cluster-dns", "10.0.0.12", false).is_ok());
        assert_eq!(c.cluster_dns.len(), 3);
        assert!(apply_config(&mut c, "enforce-node-allocatable", "", true).is_ok());
        assert!(c.enforce_node_allocatable.is_empty());
        let e = apply_config(&mut c, "port", "http", true)
            .err()
            .unwrap_or_default();
        assert!(
            e.starts_with("invalid argument \"http\" for \"--port\" flag"),
            "{e}"
        );
    }

    /// Each setter accepts a typical value of the type its help names.
    #[test]
    fn every_flag_has_a_handler() {
        for f in all() {
            let sample = match (f.arity, f.type_name) {
                (Arity::Bool, _) => "true",
                (_, "duration") => "1s",
                (_, "int32" | "int" | "Level") => "1",
                (_, "ip") => "1.2.3.4",
                (_, "mapStringBool") => "A=true",
                (_, "mapStringString") => "a=b",
                (_, "quantity") => "1Ki",
                _ => "x=1",
            };
            let sample = match f.name {
                "eviction-hard" | "eviction-soft" => "memory.available<1Gi",
                "register-with-taints" => "k=v:NoSchedule",
                "reserved-memory" => "0:memory=1Gi",
                "manifest-url-header" => "a:b",
                "node-ip" => "10.0.0.1",
                "vmodule" => "foo=2",
                _ => sample,
            };
            let res = match f.setter {
                Setter::Flags(set) => set(&mut KubeletFlags::default(), sample),
                Setter::Config(set) => set(&mut KubeletConfiguration::defaulted(), sample, true),
                _ => Ok(()),
            };
            assert!(res.is_ok(), "--{} {sample}: {res:?}", f.name);
        }
    }

    /// A default as `--help` shows it, given back to its flag, changes nothing: the help
    /// says the value the kubelet starts from, in the form the flag takes.
    #[test]
    fn shown_defaults_read_back_as_the_defaults() {
        let config = KubeletConfiguration::legacy_flag_defaults();
        let flags = KubeletFlags::default();
        let mut shown = 0;
        for f in all() {
            match (f.default, f.setter) {
                (HelpDefault::Config(get), Setter::Config(set)) => {
                    let text = get(&config);
                    // pflag shows a list in brackets and takes it without.
                    let text = text.trim_start_matches('[').trim_end_matches(']');
                    let mut c = config.clone();
                    set(&mut c, text, true).unwrap();
                    assert_eq!(c, config, "--{}", f.name);
                }
                (HelpDefault::Flags(get), Setter::Flags(set)) => {
                    let mut fl = flags.clone();
                    set(&mut fl, &get(&flags)).unwrap();
                    assert_eq!(fl, flags, "--{}", f.name);
                }
                (HelpDefault::None, _) => continue,
                _ => panic!(
                    "--{}: its default and its setter read different settings",
                    f.name
                ),
            }
            shown += 1;
        }
        assert_eq!(shown, 70, "flags that show a default");
    }

    #[test]
    fn no_duplicate_names() {
        let mut names: Vec<&str> = all().map(|f| f.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }
}
