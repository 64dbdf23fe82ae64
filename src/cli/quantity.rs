//! Minimal Kubernetes resource quantity parsing ("100Mi", "1.5G", "250m", "1e3").
//!
//! Used to validate quantity-valued settings (eviction thresholds, reservations,
//! log sizes) when the configuration is loaded, so bad values fail at startup.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// Parses a quantity into its numeric value (bytes for memory, cores for cpu).
pub fn parse_quantity(input: &str) -> Result<f64, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(QuantityError::Format);
    }
    let (sign, rest) = match s.as_bytes()[0] {
        b'-' => (-1.0, &s[1..]),
        b'+' => (1.0, &s[1..]),
        _ => (1.0, s),
    };
    let num_end = rest
        .bytes()
        .position(|b| !(b.is_ascii_digit() || b == b'.'))
        .unwrap_or(rest.len());
    let (num, suffix) = rest.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(QuantityError::Format);
    }
    let base: f64 = num.parse().map_err(|_| QuantityError::Format)?;
    let mult = suffix_multiplier(suffix)?;
    Ok(sign * base * mult)
}

fn suffix_multiplier(suffix: &str) -> Result<f64, QuantityError> {
    let m = match suffix {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        other => {
            let exp = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))
                .ok_or(QuantityError::Suffix)?;
            let e: i32 = exp.parse().map_err(|_| QuantityError::Suffix)?;
            10f64.powi(e)
        }
    };
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse_quantity("100Mi"), Ok(100.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("10Mi"), Ok(10_485_760.0));
        assert_eq!(parse_quantity("1Gi"), Ok(1_073_741_824.0));
        assert_eq!(parse_quantity("1k"), Ok(1000.0));
        assert_eq!(parse_quantity("1e3"), Ok(1000.0));
        assert_eq!(parse_quantity("512"), Ok(512.0));
        assert_eq!(parse_quantity("0"), Ok(0.0));
        assert!((parse_quantity("250m").unwrap_or_default() - 0.25).abs() < 1e-12);
        assert_eq!(parse_quantity("1.5Gi"), Ok(1.5 * 1_073_741_824.0));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "Mi", "1.2.3", "10MB", "abc", "1 Gi", "."] {
            assert!(parse_quantity(bad).is_err(), "{bad:?}");
        }
    }
}
