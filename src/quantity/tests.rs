//! Parsing (from cm/quantity.rs), formatting (from node/quantity.rs) and arithmetic.

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
    assert_eq!(Amount::of(&q("100m")), Amount::of(&q("0.1")));
    assert_eq!(Amount::of(&q("1Gi")), Amount::of(&q("1024Mi")));
    assert_ne!(Amount::of(&q("1G")), Amount::of(&q("1Gi")));
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
        assert_eq!(
            Amount::from_nano(nano).format(Style::Decimal),
            want,
            "{nano}"
        );
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
    assert_eq!(Style::of(&Quantity("100Mi".into())), Style::Binary);
    assert_eq!(Style::of(&Quantity("100M".into())), Style::Decimal);
    assert!(same_amount(
        &Quantity("1Gi".into()),
        &Quantity("1073741824".into())
    ));
    assert!(!same_amount(
        &Quantity("1Gi".into()),
        &Quantity("1G".into())
    ));
}

#[test]
fn arithmetic_is_exact_and_saturates() {
    let a = Amount::parse("1.5Gi").unwrap();
    let b = Amount::parse("512Mi").unwrap();
    assert_eq!((a - b).format(Style::Binary), "1Gi");
    assert_eq!((a + b).format(Style::Binary), "2Gi");
    assert_eq!([a, b].into_iter().sum::<Amount>(), a + b);
    assert_eq!(Amount::from_millis(250).format(Style::Decimal), "250m");
    assert_eq!(
        Amount::from_nano(i128::MAX) + a,
        Amount::from_nano(i128::MAX)
    );
    assert_eq!(Amount::parse("1n").unwrap().millis(), Some(1));
    assert_eq!(Amount::parse("-1n").unwrap().millis(), Some(-1));
    assert_eq!(Amount::from_nano(i128::MAX).units(), None);
}

/// Moved from the command line's quantity settings, which parse with `Amount` now.
#[test]
fn parses_common_forms() {
    let parse_quantity = |s: &str| Amount::parse(s).map(|a| a.nano() as f64 / NANO as f64);
    assert_eq!(parse_quantity("100Mi"), Ok(100.0 * 1024.0 * 1024.0));
    assert_eq!(parse_quantity("1Gi"), Ok(1_073_741_824.0));
    assert_eq!(parse_quantity("1e3"), Ok(1000.0));
    assert!((parse_quantity("250m").unwrap_or_default() - 0.25).abs() < 1e-12);
    assert_eq!(parse_quantity("1.5Gi"), Ok(1.5 * 1_073_741_824.0));
    for bad in ["", "Mi", "1.2.3", "10MB", "abc", "1 Gi", "."] {
        assert!(parse_quantity(bad).is_err(), "{bad:?}");
    }
}
