//! Test helpers shared by the tests of several certificate files.

use jiff::Timestamp;

pub(super) fn self_signed(not_before: Timestamp, not_after: Timestamp) -> String {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["x".into()]).unwrap();
    // rcgen takes whole days; tests pick instants at or around midnight.
    let to_odt = |t: Timestamp| {
        let d = t.to_zoned(jiff::tz::TimeZone::UTC).date();
        rcgen::date_time_ymd(i32::from(d.year()), d.month() as u8, d.day() as u8)
    };
    params.not_before = to_odt(not_before);
    params.not_after = to_odt(not_after);
    params.self_signed(&key).unwrap().pem()
}
