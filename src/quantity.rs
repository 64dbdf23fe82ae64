//! Kubernetes resource quantities ("100m", "0.5", "128Mi", "1e3"), exactly.
//!
//! k8s-openapi keeps a Quantity as its string. [`Amount`] holds the value in nano-units (1e-9
//! of the base unit) in an i128, which covers every suffix from `n` to `E`/`Ei` without
//! floating point, and prints it back the way the API server does, so a status we compute
//! compares equal to the one we read. Conversions to coarser units round away from zero, as
//! upstream's `MilliValue`/`Value` do.

use std::ops::{Add, AddAssign, Sub};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Nano-units in one base unit (one core, one byte, one pod).
pub const NANO: i128 = 1_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantity {0:?} is not a valid number with an optional suffix")]
    Syntax(String),
    #[error("quantity {0:?} is out of range")]
    Overflow(String),
}

/// An exact resource amount in nano-units. Sums and differences saturate rather than wrap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(i128);

/// How an amount is printed: decimal (cpu, pods: "4", "3900m", "1k") or binary (bytes:
/// "2Mi", "16283436Ki", or a plain integer when no power of 1024 divides it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Decimal,
    Binary,
}

const BINARY_SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

impl Amount {
    pub const ZERO: Amount = Amount(0);

    pub const fn from_nano(nano: i128) -> Self {
        Amount(nano)
    }

    pub const fn from_units(units: i64) -> Self {
        Amount(units as i128 * NANO)
    }

    pub const fn from_millis(millis: i64) -> Self {
        Amount(millis as i128 * (NANO / 1000))
    }

    pub const fn nano(self) -> i128 {
        self.0
    }

    /// Parses upstream's quantity syntax. Amounts finer than a nano-unit round up.
    pub fn parse(raw: &str) -> Result<Self, QuantityError> {
        parse_nano_str(raw).map(Amount)
    }

    pub fn of(q: &Quantity) -> Result<Self, QuantityError> {
        Self::parse(&q.0)
    }

    /// Whole base units, rounded away from zero ("500m" of memory is 1 byte).
    pub fn units(self) -> Option<i64> {
        self.in_steps_of(NANO)
    }

    /// Thousandths of the base unit, rounded away from zero ("1n" of cpu is 1m).
    pub fn millis(self) -> Option<i64> {
        self.in_steps_of(NANO / 1000)
    }

    fn in_steps_of(self, step: i128) -> Option<i64> {
        let v = if self.0 >= 0 {
            div_ceil(self.0, step)
        } else {
            -div_ceil(-self.0, step)
        };
        i64::try_from(v).ok()
    }

    pub fn max(self, other: Amount) -> Amount {
        Amount(self.0.max(other.0))
    }

    /// Upstream's canonical spelling in `style`.
    pub fn format(self, style: Style) -> String {
        match style {
            Style::Decimal => format_decimal(self.0),
            Style::Binary => format_binary(self.0),
        }
    }

    pub fn to_quantity(self, style: Style) -> Quantity {
        Quantity(self.format(style))
    }
}

impl Add for Amount {
    type Output = Amount;
    fn add(self, rhs: Amount) -> Amount {
        Amount(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for Amount {
    fn add_assign(&mut self, rhs: Amount) {
        *self = *self + rhs;
    }
}

impl Sub for Amount {
    type Output = Amount;
    fn sub(self, rhs: Amount) -> Amount {
        Amount(self.0.saturating_sub(rhs.0))
    }
}

impl std::iter::Sum for Amount {
    fn sum<I: Iterator<Item = Amount>>(iter: I) -> Amount {
        iter.fold(Amount::ZERO, Add::add)
    }
}

impl Style {
    /// The style a quantity was written in: binary when it carries a binary suffix.
    pub fn of(q: &Quantity) -> Style {
        let s = q.0.trim();
        if BINARY_SUFFIXES.iter().any(|suffix| s.ends_with(suffix)) {
            Style::Binary
        } else {
            Style::Decimal
        }
    }
}

/// A byte count in the binary style ("2Mi").
pub fn bytes(b: u64) -> Quantity {
    Amount(i128::from(b) * NANO).to_quantity(Style::Binary)
}

/// Whether two quantities denote the same amount ("1Gi" equals "1073741824").
pub fn same_amount(a: &Quantity, b: &Quantity) -> bool {
    match (Amount::of(a), Amount::of(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.0 == b.0,
    }
}

/// CPU in millicores, rounded up ("100m" = 100, "0.5" = 500, "2" = 2000, "1n" = 1).
pub fn parse_cpu_millis(q: &Quantity) -> Result<i64, QuantityError> {
    Amount::of(q)?
        .millis()
        .ok_or_else(|| QuantityError::Overflow(q.0.clone()))
}

/// Bytes (or any whole base unit), rounded up ("128Mi" = 134217728, "1e3" = 1000).
pub fn parse_bytes(q: &Quantity) -> Result<i64, QuantityError> {
    Amount::of(q)?
        .units()
        .ok_or_else(|| QuantityError::Overflow(q.0.clone()))
}

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

fn parse_nano_str(raw: &str) -> Result<i128, QuantityError> {
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

/// Decimal style: the largest power-of-1000 suffix that keeps an integer mantissa.
fn format_decimal(nano: i128) -> String {
    if nano == 0 {
        return "0".to_string();
    }
    let sign = if nano < 0 { "-" } else { "" };
    let mut mantissa = nano.unsigned_abs();
    let mut exp: i32 = -9;
    while mantissa.is_multiple_of(1000) && exp < 18 {
        mantissa /= 1000;
        exp += 3;
    }
    let suffix = match exp {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        _ => "E",
    };
    format!("{sign}{mantissa}{suffix}")
}

/// Binary style: whole amounts of at least 1024 take the largest power-of-1024 suffix that
/// divides them exactly; fractional or small amounts fall back to the decimal style.
fn format_binary(nano: i128) -> String {
    if nano % NANO != 0 {
        return format_decimal(nano);
    }
    let units = nano / NANO;
    if units.abs() < 1024 {
        return format_decimal(nano);
    }
    let sign = if units < 0 { "-" } else { "" };
    let mut n = units.unsigned_abs();
    let mut idx = 0;
    while n.is_multiple_of(1024) && idx < 6 {
        n /= 1024;
        idx += 1;
    }
    let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][idx];
    format!("{sign}{n}{suffix}")
}

#[cfg(test)]
mod tests;
