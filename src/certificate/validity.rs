//! When a certificate in hand stops being good: the validity windows of PEM text and files,
//! which decide both bootstrap and the rotation schedule.

use std::path::Path;

use jiff::Timestamp;

use super::CertError;
use crate::pki;

/// The validity window of the first certificate in PEM text.
pub(super) fn first_validity(pem_text: &[u8]) -> Option<(Timestamp, Timestamp)> {
    pem::parse_many(pem_text)
        .ok()?
        .iter()
        .find(|p| p.tag() == "CERTIFICATE")
        .and_then(|p| pki::validity(p.contents()))
}

pub(super) fn read_validity(path: &Path) -> Result<(Timestamp, Timestamp), CertError> {
    let data = std::fs::read(path).map_err(|source| CertError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    first_validity(&data)
        .ok_or_else(|| CertError::BadCertificate(format!("in {} cannot be parsed", path.display())))
}

pub(super) fn certs_unexpired(pem_text: &[u8], now: Timestamp) -> bool {
    let Ok(blocks) = pem::parse_many(pem_text) else {
        return false;
    };
    let certs: Vec<_> = blocks
        .iter()
        .filter(|p| p.tag() == "CERTIFICATE")
        .map(|p| pki::validity(p.contents()))
        .collect();
    !certs.is_empty()
        && certs
            .iter()
            .all(|v| v.is_some_and(|(_, not_after)| now <= not_after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::testing::self_signed;

    #[test]
    fn reads_validity_and_decides_expiry() {
        let nb: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let na: Timestamp = "2060-01-01T00:00:00Z".parse().unwrap();
        let pem_text = self_signed(nb, na);
        assert_eq!(first_validity(pem_text.as_bytes()), Some((nb, na)));
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        assert!(certs_unexpired(pem_text.as_bytes(), now));
        let later: Timestamp = "2061-01-01T00:00:00Z".parse().unwrap();
        assert!(!certs_unexpired(pem_text.as_bytes(), later));
        assert!(!certs_unexpired(b"", now));
    }
}
