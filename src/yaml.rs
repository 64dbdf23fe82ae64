//! YAML read the way upstream reads config files and static pod manifests, and written so
//! that any YAML reader gets the same values back.
//!
//! Upstream converts the first YAML document to JSON and decodes the JSON; reading into a
//! loosely typed [`Value`] first and the target type second keeps that two-step shape. Like
//! upstream, later documents are ignored, `<<` merges mappings, a repeated key keeps its last
//! value, custom tags are ignored, `!!binary` is decoded and infinities are refused (JSON has
//! none).
//!
//! Plain scalars resolve by YAML 1.2's core schema, as they always have in this kubelet:
//! upstream's YAML 1.1 rules would also read `yes`/`no`/`on`/`off`/`y`/`n` as booleans and
//! `0755` as octal, which would turn a manifest's `image: y` into a boolean and reject it.

use serde::Serialize;
use serde_json::Value;
use serde_saphyr::{DuplicateKeyPolicy, Options};

#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    #[error(transparent)]
    Parse(#[from] serde_saphyr::Error),
    #[error(transparent)]
    Write(#[from] serde_saphyr::SerializeError),
}

fn options(duplicate_keys: DuplicateKeyPolicy) -> Options {
    serde_saphyr::options! {
        duplicate_keys: duplicate_keys,
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        // Messages end up in one log line or one error string.
        with_snippet: false,
    }
}

/// The first document of `data` as JSON (`Null` when there is none). Later documents are
/// not looked at, as upstream ignores them.
pub fn to_json(data: &[u8]) -> Result<Value, YamlError> {
    let mut input = data;
    match serde_saphyr::read_with_options(&mut input, options(DuplicateKeyPolicy::LastWins)).next()
    {
        Some(doc) => Ok(doc?),
        None => Ok(Value::Null),
    }
}

/// The first key repeated within one mapping of the first document, described for the
/// strict-decoding warning upstream logs before it falls back to the last value.
pub fn duplicate_key(data: &[u8]) -> Option<String> {
    let mut input = data;
    let first =
        serde_saphyr::read_with_options::<_, Value>(&mut input, options(DuplicateKeyPolicy::Error))
            .next()?;
    match first {
        Err(e) => match e.without_snippet() {
            serde_saphyr::Error::DuplicateMappingKey { key, location } => Some(format!(
                "duplicate entry with key {:?} at line {} column {}",
                key.as_deref().unwrap_or("?"),
                location.line(),
                location.column()
            )),
            _ => None,
        },
        Ok(_) => None,
    }
}

/// `value` as a YAML document. Strings that YAML 1.1 readers would take for booleans,
/// numbers or null are quoted, so upstream tools read back exactly what was written.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, YamlError> {
    Ok(serde_saphyr::to_string(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_of(data: &str) -> Value {
        match to_json(data.as_bytes()) {
            Ok(v) => v,
            Err(e) => panic!("{data:?}: {e}"),
        }
    }

    #[test]
    fn booleans_are_yaml_1_2() {
        for (text, want) in [
            ("true", json!(true)),
            ("True", json!(true)),
            ("TRUE", json!(true)),
            ("false", json!(false)),
            ("False", json!(false)),
            ("FALSE", json!(false)),
        ] {
            assert_eq!(
                json_of(&format!("a: {text}")),
                json!({ "a": want }),
                "{text}"
            );
        }
        for text in ["yes", "No", "on", "OFF", "y", "n", "tRue"] {
            assert_eq!(
                json_of(&format!("a: {text}")),
                json!({ "a": text }),
                "{text}"
            );
        }
        assert_eq!(
            json_of("a: 'true'\nb: !!str false"),
            json!({"a": "true", "b": "false"})
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(json_of("a: 0o17"), json!({"a": 15}));
        assert_eq!(json_of("a: 0x1F"), json!({"a": 31}));
        assert_eq!(json_of("a: 0X1f"), json!({"a": 31}));
        assert_eq!(json_of("a: 0b101"), json!({"a": 5}));
        assert_eq!(json_of("a: +12"), json!({"a": 12}));
        assert_eq!(json_of("a: -0"), json!({"a": 0}));
        assert_eq!(json_of("a: 0"), json!({"a": 0}));
        assert_eq!(json_of("a: 1.5"), json!({"a": 1.5}));
        assert_eq!(json_of("a: 1e3"), json!({"a": 1000.0}));
        assert_eq!(json_of("a: 18446744073709551615"), json!({ "a": u64::MAX }));
        // Leading zeros and underscores are not YAML 1.2 numbers.
        assert_eq!(json_of("a: 0755"), json!({"a": "0755"}));
        assert_eq!(json_of("a: 1_000"), json!({"a": "1_000"}));
        // Too large for any integer: a float, as upstream.
        assert_eq!(json_of("a: 99999999999999999999"), json!({"a": 1e20}));
        // JSON cannot carry infinities; upstream's conversion fails on them too.
        assert!(to_json(b"a: .inf").is_err());
        assert!(to_json(b"a: -.Inf").is_err());
        assert!(to_json(b"a: .nan").is_err());
        assert!(to_json(b"a: 1.5e400").is_err());
    }

    #[test]
    fn tags() {
        assert_eq!(json_of("a: !!str 12"), json!({"a": "12"}));
        assert_eq!(json_of("a: !!int \"12\""), json!({"a": 12}));
        assert_eq!(json_of("a: !custom x"), json!({"a": "x"}));
        assert_eq!(json_of("a: !!binary aGVsbG8="), json!({"a": "hello"}));
    }

    #[test]
    fn strings_nulls_and_times() {
        assert_eq!(
            json_of("a: ~\nb: null\nc:\nd: Null"),
            json!({"a": null, "b": null, "c": null, "d": null})
        );
        assert_eq!(
            json_of("a: 2001-12-14\nb: 12:30\nc: 190:20:30\nd: 1e\ne: 0xG"),
            json!({"a": "2001-12-14", "b": "12:30", "c": "190:20:30", "d": "1e", "e": "0xG"})
        );
        assert_eq!(
            json_of("a: |\n  x\n  y\nb: >\n  x\n  y\nc: \"\\u00e9\\tz\""),
            json!({"a": "x\ny\n", "b": "x y\n", "c": "é\tz"})
        );
        assert_eq!(json_of("1: a\nb: 2"), json!({"1": "a", "b": 2}));
    }

    #[test]
    fn merge_keys_and_anchors() {
        let doc = "base: &b {x: 1, y: 1}\nd:\n  <<: *b\n  y: 2\ne: *b\nf:\n  <<: [*b, {z: 3}]\n";
        assert_eq!(
            json_of(doc),
            json!({
                "base": {"x": 1, "y": 1},
                "d": {"x": 1, "y": 2},
                "e": {"x": 1, "y": 1},
                "f": {"x": 1, "y": 1, "z": 3},
            })
        );
    }

    #[test]
    fn repeated_keys_keep_the_last_value_and_are_reported() {
        let doc = "a: 1\nb:\n  c: 1\n  c: 2\na: 3\n";
        assert_eq!(json_of(doc), json!({"a": 3, "b": {"c": 2}}));
        assert_eq!(
            duplicate_key(doc.as_bytes()).as_deref(),
            Some("duplicate entry with key \"c\" at line 4 column 3")
        );
        assert_eq!(duplicate_key(b"a: 1\nb: 2\n"), None);
        assert_eq!(
            duplicate_key(b"a: ["),
            None,
            "syntax errors are not duplicates"
        );
    }

    #[test]
    fn only_the_first_document_counts() {
        assert_eq!(json_of("a: 1\n---\nb: 2\n"), json!({"a": 1}));
        assert_eq!(json_of("---\na: 1\n...\n"), json!({"a": 1}));
        assert_eq!(json_of("a: 1\n---\nb: [\n"), json!({"a": 1}));
        for empty in ["", "\n", "# just a comment\n", "---\n"] {
            assert_eq!(json_of(empty), Value::Null, "{empty:?}");
        }
    }

    #[test]
    fn json_is_yaml() {
        assert_eq!(
            json_of(r#"{"a": 1, "b": [true, null, "x"], "c": {"d": 1.5}}"#),
            json!({"a": 1, "b": [true, null, "x"], "c": {"d": 1.5}})
        );
    }

    #[test]
    fn syntax_errors_say_where() {
        for bad in ["a: [1, 2", "a: b: c", "a: 1\n  b: 2", "a: \"x\"y"] {
            let e = match to_json(bad.as_bytes()) {
                Ok(v) => panic!("{bad:?} parsed as {v}"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains("line "), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "{bad:?}: one line: {e}");
        }
    }

    #[test]
    fn written_strings_read_back_as_strings() {
        let doc = json!({
            "apiVersion": "v1",
            "list": ["yes", "no", "on", "off", "y", "0755", "1_000", "", "~", "null", "12",
                     "1.5", "true", "a: b", "#c", "-x", "x\ny", "é"],
            "flag": true,
            "n": 5,
        });
        let text = match to_string(&doc) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        };
        assert!(text.starts_with("apiVersion: v1\n"), "{text}");
        assert!(text.contains("- \"yes\"\n"), "{text}");
        assert_eq!(json_of(&text), doc);
    }
}
