//! Quantity-valued settings (eviction thresholds, reservations, log sizes) are validated at
//! load time with the same exact parser the cgroup code uses, so bad values fail at startup.

pub use crate::quantity::QuantityError;

/// The numeric value of a quantity (bytes for memory, cores for cpu).
pub fn parse_quantity(input: &str) -> Result<f64, QuantityError> {
    crate::quantity::Amount::parse(input).map(crate::quantity::Amount::as_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse_quantity("100Mi"), Ok(100.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("1Gi"), Ok(1_073_741_824.0));
        assert_eq!(parse_quantity("1e3"), Ok(1000.0));
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
