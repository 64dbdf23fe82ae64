//! Printing resource amounts the way the API server prints them back, so that a status we
//! compute compares equal to the one we read and no update is sent for a formatting difference.
//!
//! Amounts are nano-units (1e-9 of the base unit) in an i128, as `crate::cm::quantity` parses
//! them. Two styles exist: decimal (cpu, pods: "4", "3900m", "1k") and binary (bytes: "2Mi",
//! "16283436Ki", or a plain integer when no power of 1024 divides it).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::cm::quantity::parse_str_nano;

pub const NANO: i128 = 1_000_000_000;

/// How an amount is printed; a difference keeps the style of the amount it was taken from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Decimal,
    Binary,
}

/// Decimal style: the largest power-of-1000 suffix that keeps an integer mantissa.
pub fn format_decimal(nano: i128) -> String {
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
pub fn format_binary(nano: i128) -> String {
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

pub fn format(nano: i128, style: Style) -> Quantity {
    Quantity(match style {
        Style::Decimal => format_decimal(nano),
        Style::Binary => format_binary(nano),
    })
}

pub fn bytes(b: u64) -> Quantity {
    format(i128::from(b) * NANO, Style::Binary)
}

pub fn units(n: i64) -> Quantity {
    format(i128::from(n) * NANO, Style::Decimal)
}

/// The printing style a quantity string was written in; binary when it carries a binary
/// suffix, decimal otherwise.
pub fn style_of(q: &Quantity) -> Style {
    let s = q.0.trim();
    if ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
        .iter()
        .any(|suffix| s.ends_with(suffix))
    {
        Style::Binary
    } else {
        Style::Decimal
    }
}

/// Whether two quantities denote the same amount ("1Gi" equals "1073741824").
pub fn same_amount(a: &Quantity, b: &Quantity) -> bool {
    match (parse_str_nano(&a.0), parse_str_nano(&b.0)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.0 == b.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_like_the_api_server() {
        let cases = [
            (0, "0"),
            (4 * NANO, "4"),
            (3_900_000_000, "3900m"),
            (110 * NANO, "110"),
            (1000 * NANO, "1k"),
            (1500 * NANO, "1500"),
            (2_000_000 * NANO, "2M"),
            (1, "1n"),
            (-250_000_000, "-250m"),
        ];
        for (nano, want) in cases {
            assert_eq!(format_decimal(nano), want, "{nano}");
        }
    }

    #[test]
    fn binary_like_the_api_server() {
        let cases = [
            (0u64, "0"),
            (512, "512"),
            (1000, "1k"),
            (1024, "1Ki"),
            (1536, "1536"),
            (2 * 1024 * 1024, "2Mi"),
            (1 << 30, "1Gi"),
            (16_283_436 * 1024, "16283436Ki"),
            (47_060_403_316, "47060403316"),
        ];
        for (b, want) in cases {
            assert_eq!(bytes(b).0, want, "{b}");
        }
    }

    #[test]
    fn styles_and_equality() {
        assert_eq!(style_of(&Quantity("100Mi".into())), Style::Binary);
        assert_eq!(style_of(&Quantity("100M".into())), Style::Decimal);
        assert!(same_amount(
            &Quantity("1Gi".into()),
            &Quantity("1073741824".into())
        ));
        assert!(!same_amount(
            &Quantity("1Gi".into()),
            &Quantity("1G".into())
        ));
    }
}
