//! Kubernetes resource quantities ("100m", "0.5", "128Mi", "1e3").
//!
//! k8s-openapi keeps a Quantity as its string; this parses it exactly into nano-units (1e-9 of
//! the base unit) held in an i128, which covers every suffix from `n` to `E`/`Ei` without
//! floating point. Conversions to coarser units round up, as upstream's `MilliValue`/`Value` do.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantity {0:?} is not a valid number with an optional suffix")]
    Syntax(String),
    #[error("quantity {0:?} is out of range")]
    Overflow(String),
}

const NANO: i128 = 1_000_000_000;

/// Power-of-ten or power-of-two multiplier of a suffix.
enum Scale {
    Decimal(i32),
    Binary(u32),
}

fn suffix_scale(suffix: &str) -> Option<Scale> {
    let s = match suffix {
        "" => Scale::Decimal(0),
        "n" => Scale::Decimal(-9),
        "u" => Scale::Decimal(-6),
        "m" => Scale::Decimal(-3),
        "k" => Scale::Decimal(3),
        "M" => Scale::Decimal(6),
        "G" => Scale::Decimal(9),
        "T" => Scale::Decimal(12),
        "P" => Scale::Decimal(15),
        "E" => Scale::Decimal(18),
        "Ki" => Scale::Binary(10),
        "Mi" => Scale::Binary(20),
        "Gi" => Scale::Binary(30),
        "Ti" => Scale::Binary(40),
        "Pi" => Scale::Binary(50),
        "Ei" => Scale::Binary(60),
        _ => {
            // Decimal exponent: "e3", "E-2", "e+6".
            let rest = suffix.strip_prefix(['e', 'E'])?;
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Scale::Decimal(rest.parse().ok()?)
        }
    };
    Some(s)
}

/// The value in nano-units. Amounts finer than a nano-unit round up (away from zero is not
/// needed: such amounts are meaningless for resources).
pub fn parse_nano(q: &Quantity) -> Result<i128, QuantityError> {
    parse_str_nano(&q.0)
}

pub fn parse_str_nano(raw: &str) -> Result<i128, QuantityError> {
    let syntax = || QuantityError::Syntax(raw.to_string());
    let overflow = || QuantityError::Overflow(raw.to_string());
    let s = raw.trim();
    let (negative, unsigned) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let number_len = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() || frac_part.contains('.') {
        return Err(syntax());
    }
    let scale = suffix_scale(suffix).ok_or_else(syntax)?;

    // mantissa * 10^(-frac_digits), all digits kept exactly.
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 36 {
        return Err(overflow());
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| overflow())?
    };
    let frac_digits = i32::try_from(frac_part.len()).map_err(|_| overflow())?;

    let (mut value, exp10) = match scale {
        Scale::Decimal(e) => (mantissa, e + 9 - frac_digits),
        Scale::Binary(bits) => (
            mantissa.checked_mul(1i128 << bits).ok_or_else(overflow)?,
            9 - frac_digits,
        ),
    };
    if exp10 >= 0 {
        let factor = 10i128
            .checked_pow(exp10.unsigned_abs())
            .ok_or_else(overflow)?;
        value = value.checked_mul(factor).ok_or_else(overflow)?;
    } else {
        let divisor = 10i128.checked_pow(exp10.unsigned_abs());
        value = match divisor {
            Some(d) => div_ceil(value, d),
            // Smaller than any representable amount: a non-zero remainder rounds up to 1.
            None => i128::from(value > 0),
        };
    }
    Ok(if negative { -value } else { value })
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b > 0 { q + 1 } else { q }
}

fn to_i64(nano: i128, unit: i128, raw: &str) -> Result<i64, QuantityError> {
    let v = if nano >= 0 {
        div_ceil(nano, unit)
    } else {
        -div_ceil(-nano, unit)
    };
    i64::try_from(v).map_err(|_| QuantityError::Overflow(raw.to_string()))
}

/// CPU in millicores, rounded up ("100m" = 100, "0.5" = 500, "2" = 2000, "1n" = 1).
pub fn parse_cpu_millis(q: &Quantity) -> Result<i64, QuantityError> {
    nano_to_millis(parse_nano(q)?, &q.0)
}

/// Bytes (or any whole base unit), rounded up ("128Mi" = 134217728, "1G" = 1e9, "1e3" = 1000).
pub fn parse_bytes(q: &Quantity) -> Result<i64, QuantityError> {
    nano_to_units(parse_nano(q)?, &q.0)
}

pub(crate) fn nano_to_millis(nano: i128, raw: &str) -> Result<i64, QuantityError> {
    to_i64(nano, NANO / 1000, raw)
}

pub(crate) fn nano_to_units(nano: i128, raw: &str) -> Result<i64, QuantityError> {
    to_i64(nano, NANO, raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.to_string())
    }

    #[test]
    fn cpu() {
        let cases = [
            ("100m", 100),
            ("0.5", 500),
            ("2", 2000),
            (".1", 100),
            ("1.", 1000),
            ("1n", 1),
            ("250000u", 250),
            ("1.0001", 1001),
            ("0", 0),
            ("1e-3", 1),
            ("+3", 3000),
            ("-1", -1000),
        ];
        for (s, want) in cases {
            assert_eq!(parse_cpu_millis(&q(s)), Ok(want), "{s}");
        }
    }

    #[test]
    fn memory() {
        let cases = [
            ("128Mi", 134_217_728),
            ("1G", 1_000_000_000),
            ("1e3", 1000),
            ("1E3", 1000),
            ("1E", 1_000_000_000_000_000_000),
            ("1Ki", 1024),
            ("1.5Gi", 1_610_612_736),
            ("1k", 1000),
            ("100", 100),
            ("0.5", 1),
            ("500m", 1),
            ("12e+2", 1200),
            ("  64Mi ", 67_108_864),
        ];
        for (s, want) in cases {
            assert_eq!(parse_bytes(&q(s)), Ok(want), "{s}");
        }
    }

    #[test]
    fn exact_comparison_across_forms() {
        assert_eq!(parse_nano(&q("100m")), parse_nano(&q("0.1")));
        assert_eq!(parse_nano(&q("1Gi")), parse_nano(&q("1024Mi")));
        assert_ne!(parse_nano(&q("1G")), parse_nano(&q("1Gi")));
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "", "abc", "1.2.3", "1Qi", "Mi", ".", "1e", "1e+", "1 Mi", "--1", "1ee3",
        ] {
            assert!(
                matches!(parse_bytes(&q(s)), Err(QuantityError::Syntax(_))),
                "{s:?} should be rejected"
            );
        }
        assert!(matches!(
            parse_bytes(&q("100Ei")),
            Err(QuantityError::Overflow(_))
        ));
        assert!(matches!(
            parse_bytes(&q("1e40")),
            Err(QuantityError::Overflow(_))
        ));
    }
}
