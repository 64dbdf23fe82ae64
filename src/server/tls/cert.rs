//! The serving certificate: tlsCertFile/tlsPrivateKeyFile when given, else a self-signed
//! pair kept in the certificate directory as kubelet.crt/kubelet.key (upstream's names), made
//! once and reused while it can be loaded and has not expired.
//!
//! Like upstream, the generated file holds the leaf followed by a throw-away CA that signed it
//! ("<host>-ca@<unix time>"), so the file doubles as a CA bundle for clients that pin it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use jiff::{SignedDuration, Timestamp, tz::TimeZone};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tracing::{info, warn};

use super::TlsError;
use crate::certificate::store;

pub const SELF_SIGNED_CERT: &str = "kubelet.crt";
pub const SELF_SIGNED_KEY: &str = "kubelet.key";
/// Upstream's lifetime for the self-signed pair.
const VALIDITY_DAYS: i64 = 365;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingCertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub struct ServingCert {
    pub files: ServingCertFiles,
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

fn read_pair(files: &ServingCertFiles) -> Result<ServingCert, String> {
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| format!("{}: {e}", files.cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", files.cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("{}: {e}", files.key.display()))?;
    Ok(ServingCert {
        files: files.clone(),
        chain,
        key,
    })
}

/// Whether the leaf of a self-signed pair is still inside its validity window.
fn still_valid(cert: &ServingCert, now: Timestamp) -> bool {
    cert.chain
        .first()
        .and_then(|c| crate::pki::validity(c))
        .is_some_and(|(from, until)| from <= now && now < until)
}

/// The pair to serve with. Files named in the configuration must load; the self-signed pair
/// is (re)made when missing, unreadable or expired.
pub fn serving_cert(
    cert_file: &str,
    key_file: &str,
    cert_dir: &Path,
    host: &str,
    ips: &[IpAddr],
) -> Result<ServingCert, TlsError> {
    match (cert_file.is_empty(), key_file.is_empty()) {
        (false, false) => {
            let files = ServingCertFiles {
                cert: PathBuf::from(cert_file),
                key: PathBuf::from(key_file),
            };
            return read_pair(&files).map_err(TlsError::ServingCert);
        }
        (true, true) => {}
        _ => {
            return Err(TlsError::ServingCert(
                "tlsCertFile and tlsPrivateKeyFile must be set together".into(),
            ));
        }
    }
    let files = ServingCertFiles {
        cert: cert_dir.join(SELF_SIGNED_CERT),
        key: cert_dir.join(SELF_SIGNED_KEY),
    };
    if files.cert.exists() || files.key.exists() {
        match read_pair(&files) {
            Ok(c) if still_valid(&c, Timestamp::now()) => return Ok(c),
            Ok(_) => {
                warn!(cert = %files.cert.display(), "Self-signed serving certificate expired; making a new one")
            }
            Err(err) => warn!(%err, "Self-signed serving certificate unusable; making a new one"),
        }
    }
    let (cert_pem, key_pem) = self_signed(host, ips, Timestamp::now())?;
    store::write_atomic(&files.key, &key_pem)?;
    store::write_atomic(&files.cert, &cert_pem)?;
    info!(cert = %files.cert.display(), key = %files.key.display(), "Using self-signed cert");
    read_pair(&files).map_err(TlsError::ServingCert)
}

/// Year, month and day (UTC) of `t`: certificate times here have day precision.
fn ymd(t: Timestamp) -> (i32, u8, u8) {
    let d = t.to_zoned(TimeZone::UTC).date();
    (i32::from(d.year()), d.month() as u8, d.day() as u8)
}

/// A leaf for `host` (plus "localhost" and `ips`) signed by a fresh CA; PEM of leaf + CA, and
/// of the leaf's key. Valid from a day back (clock skew) for a year.
pub fn self_signed(
    host: &str,
    ips: &[IpAddr],
    now: Timestamp,
) -> Result<(String, String), TlsError> {
    let unix = now.as_second();
    let from = now - SignedDuration::from_hours(24);
    let until = from + SignedDuration::from_hours(24 * VALIDITY_DAYS);

    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, format!("{host}-ca@{unix}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
    ];
    let ((fy, fm, fd), (uy, um, ud)) = (ymd(from), ymd(until));
    ca.not_before = rcgen::date_time_ymd(fy, fm, fd);
    ca.not_after = rcgen::date_time_ymd(uy, um, ud);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut names = vec![host.to_string(), "localhost".to_string()];
    names.extend(ips.iter().map(IpAddr::to_string));
    names.push("127.0.0.1".into());
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    let leaf_key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(names)?;
    leaf.distinguished_name
        .push(DnType::CommonName, format!("{host}@{unix}"));
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = rcgen::date_time_ymd(fy, fm, fd);
    leaf.not_after = rcgen::date_time_ymd(uy, um, ud);
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
    Ok((
        format!("{}{}", leaf_cert.pem(), ca_cert.pem()),
        leaf_key.serialize_pem(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::auth::x509::subject;

    #[test]
    fn self_signed_pair_is_made_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let ips = ["10.0.0.5".parse().unwrap()];
        let first = serving_cert("", "", dir.path(), "node-a", &ips).unwrap();
        assert_eq!(first.files.cert, dir.path().join("kubelet.crt"));
        assert_eq!(first.chain.len(), 2, "leaf then CA");
        let s = subject(&first.chain[0]).unwrap();
        assert!(s.common_name.starts_with("node-a@"), "{s:?}");
        let ca = subject(&first.chain[1]).unwrap();
        assert!(ca.common_name.starts_with("node-a-ca@"), "{ca:?}");
        let again = serving_cert("", "", dir.path(), "node-a", &ips).unwrap();
        assert_eq!(again.chain, first.chain, "valid files are reused");
        assert!(still_valid(&again, Timestamp::now()));
        let in_two_years = Timestamp::now() + SignedDuration::from_hours(24 * 730);
        assert!(!still_valid(&again, in_two_years));
    }

    #[test]
    fn broken_self_signed_files_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kubelet.crt"), "garbage").unwrap();
        let c = serving_cert("", "", dir.path(), "node-a", &[]).unwrap();
        assert_eq!(c.chain.len(), 2);
    }

    #[test]
    fn configured_files_must_load() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("x.crt");
        let m = missing.to_string_lossy();
        assert!(matches!(
            serving_cert(&m, &m, dir.path(), "n", &[]),
            Err(TlsError::ServingCert(_))
        ));
        assert!(matches!(
            serving_cert(&m, "", dir.path(), "n", &[]),
            Err(TlsError::ServingCert(_))
        ));
        let (cert, key) = self_signed("n", &[], Timestamp::now()).unwrap();
        let cp = dir.path().join("own.crt");
        let kp = dir.path().join("own.key");
        std::fs::write(&cp, cert).unwrap();
        std::fs::write(&kp, key).unwrap();
        let c = serving_cert(
            &cp.to_string_lossy(),
            &kp.to_string_lossy(),
            dir.path(),
            "n",
            &[],
        )
        .unwrap();
        assert_eq!(c.files.cert, cp);
        assert!(!dir.path().join("kubelet.crt").exists());
    }
}
