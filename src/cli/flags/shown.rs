//! Settings' values as pflag shows defaults in `--help`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::config::GoDuration;

/// A setting's value as pflag shows a default: a zero value shows nothing.
pub(super) trait Shown {
    fn shown(&self) -> String;
}

impl Shown for String {
    fn shown(&self) -> String {
        self.clone()
    }
}

impl Shown for PathBuf {
    fn shown(&self) -> String {
        self.display().to_string()
    }
}

impl Shown for bool {
    fn shown(&self) -> String {
        if *self { "true".into() } else { String::new() }
    }
}

impl Shown for i32 {
    fn shown(&self) -> String {
        i64::from(*self).shown()
    }
}

impl Shown for i64 {
    fn shown(&self) -> String {
        if *self == 0 {
            String::new()
        } else {
            self.to_string()
        }
    }
}

impl Shown for GoDuration {
    fn shown(&self) -> String {
        if self.is_zero() {
            String::new()
        } else {
            self.to_string()
        }
    }
}

impl Shown for Vec<String> {
    fn shown(&self) -> String {
        if self.is_empty() {
            String::new()
        } else {
            format!("[{}]", self.join(","))
        }
    }
}

/// Eviction thresholds as their flags take them (`signal<quantity`, comma-separated).
pub(super) fn thresholds_shown(thresholds: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = thresholds.iter().map(|(k, v)| format!("{k}<{v}")).collect();
    pairs.join(",")
}
