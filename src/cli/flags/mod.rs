//! Command-line flags with Go pflag semantics, as the upstream kubelet parses them.
//!
//! Scripts and kubeadm drop-ins rely on pflag behaviours that general-purpose Rust argument
//! parsers lack (boolean flags never consume the next word, `_` and `-` are interchangeable
//! in names, a value may start with `-`, per-flag deprecation notices, map flags whose first
//! use replaces the configured value), so every flag is one entry of a table that carries its
//! name, help and setter, and the tokenizer follows pflag's rules directly.

mod shown;
mod table;
mod tokenize;
mod usage;
mod values;

pub(crate) use tokenize::tokenize;
pub(crate) use usage::usage;
pub use values::ValueError;
pub(crate) use values::parse_bool;

use crate::config::KubeletConfiguration;
use crate::config::KubeletFlags;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arity {
    /// `--flag` means true; a value must be attached with `=`.
    Bool,
    /// Takes `--flag=value` or `--flag value`.
    Value,
}

/// Where a flag's value goes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Setter {
    /// `--help`: print usage and exit.
    Help,
    /// `--version`: print the version and exit.
    Version,
    /// A setting that exists only as a flag.
    Flags(fn(&mut KubeletFlags, &str) -> Result<(), ValueError>),
    /// A `KubeletConfiguration` field. The `bool` is true on the flag's first use: list and
    /// map flags then replace what the config file set instead of adding to it.
    Config(fn(&mut KubeletConfiguration, &str, bool) -> Result<(), ValueError>),
    /// Removed upstream; accepted so old units keep starting.
    Ignored,
}

/// Where `--help` reads a flag's default: the value the kubelet starts from when the flag is
/// not given (`KubeletFlags::default()`, or the configuration's legacy command-line defaults),
/// so the help cannot tell another default than the one in force.
#[derive(Clone, Copy, Debug)]
pub(crate) enum HelpDefault {
    /// Nothing shown: the default is the type's zero value.
    None,
    Flags(fn(&KubeletFlags) -> String),
    Config(fn(&KubeletConfiguration) -> String),
}

#[derive(Debug)]
pub(crate) struct FlagDef {
    pub name: &'static str,
    pub short: Option<char>,
    pub arity: Arity,
    /// The value's type as pflag names it in `--help`.
    pub type_name: &'static str,
    /// Where `--help` reads the default.
    pub default: HelpDefault,
    pub usage: &'static str,
    /// Printed when the flag is used, and in `--help`.
    pub deprecated: Option<&'static str>,
    pub setter: Setter,
}

/// A command line pflag would refuse, worded as pflag words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    #[error("unknown flag: --{0}")]
    Unknown(String),
    #[error("unknown shorthand flag: '{short}' in {arg}")]
    UnknownShorthand { short: char, arg: String },
    #[error("bad flag syntax: {0}")]
    BadSyntax(String),
    #[error("flag needs an argument: --{0}")]
    MissingValue(String),
    #[error("flag needs an argument: '{short}' in {arg}")]
    MissingShorthandValue { short: char, arg: String },
    #[error("unknown command {0:?}")]
    UnknownCommand(String),
    #[error("invalid argument {value:?} for \"--{flag}\" flag: {reason}")]
    InvalidValue {
        flag: &'static str,
        value: String,
        reason: ValueError,
    },
}

const REMOVED: &str = "it has been removed upstream and is ignored by this kubelet";

/// The notice pflag prints when a deprecated flag is used, or ours for ignored ones.
pub(crate) fn usage_warning(def: &FlagDef) -> Option<String> {
    match (def.deprecated, def.setter) {
        (Some(msg), _) => Some(format!("Flag --{} has been deprecated, {msg}", def.name)),
        (None, Setter::Ignored) => Some(format!("Flag --{} is not supported, {REMOVED}", def.name)),
        (None, _) => None,
    }
}
