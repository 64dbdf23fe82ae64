//! Go `time.Duration` text format ("1m0s", "300ms", "1h30m") for config files and flags.
//!
//! Kubelet configuration stores durations as `metav1.Duration`, which marshals with
//! Go's `Duration.String()` and parses with `time.ParseDuration`. Matching both exactly
//! matters because `/configz` output is compared against upstream by tooling.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A non-negative duration that reads and writes Go's duration syntax.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration(pub Duration);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("time: invalid duration {0:?}")]
    Invalid(String),
    #[error("time: missing unit in duration {0:?}")]
    MissingUnit(String),
    #[error("time: unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit { unit: String, input: String },
    #[error("time: invalid duration {0:?}")]
    Overflow(String),
    #[error("negative duration {0:?} is not supported")]
    Negative(String),
}

/// Largest value Go can represent (int64 nanoseconds).
const MAX_NANOS: u128 = i64::MAX as u128;

/// Parses Go's duration syntax: an optional sign, then one or more decimal numbers
/// each followed by a unit (ns, us, µs, μs, ms, s, m, h). "0" alone needs no unit.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(input.to_string());
    let mut s = input;
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-') {
        negative = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !s.is_empty() {
        let (int_part, rest) = split_digits(s);
        let (frac_part, rest) = match rest.strip_prefix('.') {
            Some(after_dot) => split_digits(after_dot),
            None => ("", rest),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        if unit_len == 0 {
            return Err(DurationError::MissingUnit(input.to_string()));
        }
        let unit = &rest[..unit_len];
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            _ => {
                return Err(DurationError::UnknownUnit {
                    unit: unit.to_string(),
                    input: input.to_string(),
                });
            }
        };
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse::<u128>()
                .map_err(|_| DurationError::Overflow(input.to_string()))?
        };
        let mut value = whole
            .checked_mul(scale)
            .ok_or_else(|| DurationError::Overflow(input.to_string()))?;
        // Fractions are truncated toward zero like Go does.
        let mut frac_scale = scale;
        for d in frac_part.bytes() {
            frac_scale /= 10;
            if frac_scale == 0 {
                break;
            }
            value += u128::from(d - b'0') * frac_scale;
        }
        total = total
            .checked_add(value)
            .ok_or_else(|| DurationError::Overflow(input.to_string()))?;
        if total > MAX_NANOS {
            return Err(DurationError::Overflow(input.to_string()));
        }
        s = &rest[unit_len..];
    }
    if negative && total != 0 {
        return Err(DurationError::Negative(input.to_string()));
    }
    let secs = (total / 1_000_000_000) as u64;
    let nanos = (total % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

fn split_digits(s: &str) -> (&str, &str) {
    let end = s
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    s.split_at(end)
}

/// Formats like Go's `time.Duration.String()`.
pub fn format_go_duration(d: Duration) -> String {
    let total = d.as_nanos();
    if total == 0 {
        return "0s".to_string();
    }
    if total < 1_000_000_000 {
        return if total < 1_000 {
            format!("{total}ns")
        } else if total < 1_000_000 {
            format!("{}\u{b5}s", fixed_fraction(total, 3))
        } else {
            format!("{}ms", fixed_fraction(total, 6))
        };
    }
    let secs_nanos = total % 60_000_000_000;
    let total_minutes = total / 60_000_000_000;
    let hours = total_minutes / 60;
    let minutes = total_minutes % 60;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&format!("{}s", fixed_fraction(secs_nanos, 9)));
    out
}

/// `value / 10^digits` printed with the fraction's trailing zeros removed.
fn fixed_fraction(value: u128, digits: u32) -> String {
    let div = 10u128.pow(digits);
    let whole = value / div;
    let frac = value % div;
    if frac == 0 {
        return whole.to_string();
    }
    let frac_str = format!("{:0width$}", frac, width = digits as usize);
    format!("{whole}.{}", frac_str.trim_end_matches('0'))
}

impl GoDuration {
    pub const ZERO: GoDuration = GoDuration(Duration::ZERO);

    pub const fn from_secs(secs: u64) -> Self {
        GoDuration(Duration::from_secs(secs))
    }

    pub const fn from_millis(ms: u64) -> Self {
        GoDuration(Duration::from_millis(ms))
    }

    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }

    pub fn as_duration(&self) -> Duration {
        self.0
    }
}

impl From<Duration> for GoDuration {
    fn from(d: Duration) -> Self {
        GoDuration(d)
    }
}

impl From<GoDuration> for Duration {
    fn from(d: GoDuration) -> Self {
        d.0
    }
}

impl std::str::FromStr for GoDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_go_duration(s).map(GoDuration)
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_go_duration(self.0))
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_go_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // metav1.Duration only accepts JSON strings; numbers are rejected upstream too.
        let s = String::deserialize(deserializer)?;
        parse_go_duration(&s)
            .map(GoDuration)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Duration {
        parse_go_duration(s).unwrap_or_else(|e| panic!("parse {s}: {e}"))
    }

    #[test]
    fn parses_go_syntax() {
        assert_eq!(d("0"), Duration::ZERO);
        assert_eq!(d("0s"), Duration::ZERO);
        assert_eq!(d("10s"), Duration::from_secs(10));
        assert_eq!(d("2m"), Duration::from_secs(120));
        assert_eq!(d("1m0s"), Duration::from_secs(60));
        assert_eq!(d("300ms"), Duration::from_millis(300));
        assert_eq!(d("1h30m"), Duration::from_secs(5400));
        assert_eq!(d("1.5h"), Duration::from_secs(5400));
        assert_eq!(d("+5s"), Duration::from_secs(5));
        assert_eq!(d("1us"), Duration::from_micros(1));
        assert_eq!(d("1\u{b5}s"), Duration::from_micros(1));
        assert_eq!(d("1\u{3bc}s"), Duration::from_micros(1));
        assert_eq!(d("100ns"), Duration::from_nanos(100));
        assert_eq!(d(".5s"), Duration::from_millis(500));
        assert_eq!(d("1.s"), Duration::from_secs(1));
        assert_eq!(
            d("2h45m10.5s"),
            Duration::from_millis((2 * 3600 + 45 * 60 + 10) * 1000 + 500)
        );
        assert_eq!(d("-0s"), Duration::ZERO);
    }

    #[test]
    fn rejects_bad_syntax() {
        for bad in ["", "s", "10", "1x", "1.2.3s", ".s", "-", "1h-2m", "abc"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} should fail");
        }
        assert!(matches!(
            parse_go_duration("10"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_go_duration("5d"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_go_duration("-5s"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(
            parse_go_duration("9999999999h"),
            Err(DurationError::Overflow(_))
        ));
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(120), "2m0s"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_secs(5400), "1h30m0s"),
            (Duration::from_secs(4 * 3600), "4h0m0s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(1500), "1.5\u{b5}s"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_secs(3600 + 1), "1h0m1s"),
        ];
        for (dur, want) in cases {
            assert_eq!(format_go_duration(dur), want);
            assert_eq!(GoDuration(dur).to_string(), want);
        }
    }

    #[test]
    fn round_trips() {
        for s in [
            "0s", "1m0s", "10s", "300ms", "1h30m0s", "2.5s", "1.001ms", "4h0m0s", "5\u{b5}s",
        ] {
            assert_eq!(format_go_duration(d(s)), s);
        }
        for s in ["2m", "1h30m", "90s", "0"] {
            let once = format_go_duration(d(s));
            assert_eq!(d(&once), d(s));
        }
    }

    #[test]
    fn serde_uses_strings() {
        let v = serde_json::to_value(GoDuration::from_secs(90)).unwrap_or_default();
        assert_eq!(v, serde_json::json!("1m30s"));
        let back: GoDuration = serde_json::from_str("\"20s\"").unwrap_or_default();
        assert_eq!(back, GoDuration::from_secs(20));
        assert!(serde_json::from_str::<GoDuration>("5").is_err());
        assert!(serde_json::from_str::<GoDuration>("\"5\"").is_err());
    }
}
