//! Client certificate authentication: a chain the client presented during the handshake is
//! verified here, per request, against authentication.x509.clientCAFile. The handshake itself
//! only asks for a certificate (see tls.rs), like upstream's RequestClientCert: a bad or
//! untrusted certificate then fails the request with 401 instead of failing TLS.
//!
//! The CA file is re-read when it changes, so CA rotation needs no restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use tracing::{info, warn};

use super::AuthError;
use super::user::{Outcome, UserInfo};
use x509_parser::oid_registry::{OID_X509_COMMON_NAME, OID_X509_ORGANIZATION_NAME};
use x509_parser::x509::X509Name;

use crate::pki;

/// How often, at most, the CA file's modification time is looked at.
const RELOAD_CHECK: Duration = Duration::from_secs(5);

/// The client's certificate chain (leaf first), as presented on this connection; put in every
/// request's extensions by the TLS server. Empty when the client sent none.
#[derive(Clone, Debug, Default)]
pub struct PeerCertificates(pub Arc<Vec<CertificateDer<'static>>>);

/// Size and modification time: a rewrite of the file changes at least one of them.
type Stamp = Option<(SystemTime, u64)>;

struct Loaded {
    verifier: Arc<dyn ClientCertVerifier>,
    /// The same CAs, for chains webpki cannot read (v1 leaves).
    roots: Arc<Vec<CertificateDer<'static>>>,
    stamp: Stamp,
    checked: Instant,
}

pub struct X509Authenticator {
    path: PathBuf,
    current: Mutex<Loaded>,
}

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

type Trusted = (
    Arc<dyn ClientCertVerifier>,
    Arc<Vec<CertificateDer<'static>>>,
);

/// A verifier trusting exactly the certificates in `pem`, and those certificates.
fn verifier_from_pem(pem: &[u8]) -> Result<Trusted, String> {
    let mut roots = RootCertStore::empty();
    let mut ders = Vec::new();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| e.to_string())?;
        roots.add(cert.clone()).map_err(|e| e.to_string())?;
        ders.push(cert);
    }
    if roots.is_empty() {
        return Err("data does not contain any valid RSA or ECDSA certificates".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| e.to_string())?;
    Ok((verifier, Arc::new(ders)))
}

fn load(path: &Path) -> Result<Loaded, String> {
    let before = stamp(path);
    let pem = std::fs::read(path).map_err(|e| e.to_string())?;
    let (verifier, roots) = verifier_from_pem(&pem)?;
    Ok(Loaded {
        verifier,
        roots,
        stamp: before,
        checked: Instant::now(),
    })
}

impl X509Authenticator {
    /// Fails when the file cannot be read or holds no certificate, like upstream at start-up.
    pub fn new(path: &Path) -> Result<Self, AuthError> {
        let loaded = load(path).map_err(|reason| AuthError::ClientCa {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            current: Mutex::new(loaded),
        })
    }

    /// The verifier for the CA file as it is now. A file that changed but cannot be loaded
    /// keeps the previous CAs in force, so a half-written file never locks everyone out.
    fn verifier(&self) -> Trusted {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if cur.checked.elapsed() >= RELOAD_CHECK {
            cur.checked = Instant::now();
            let now = stamp(&self.path);
            if now != cur.stamp {
                match load(&self.path) {
                    Ok(fresh) => {
                        info!(path = %self.path.display(), "Client CA file changed; reloaded");
                        *cur = fresh;
                    }
                    Err(err) => {
                        warn!(path = %self.path.display(), %err, "Client CA file changed but cannot be loaded; keeping the previous CAs");
                        cur.stamp = now;
                    }
                }
            }
        }
        (cur.verifier.clone(), cur.roots.clone())
    }

    pub fn authenticate(&self, chain: &[CertificateDer<'static>]) -> Outcome {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Outcome::NoCredential;
        };
        let (verifier, roots) = self.verifier();
        // webpki reads only v3 leaves; Go verifies v1 ones too, so they take our own path.
        let verified = if pki::is_v1(leaf) {
            let provider = rustls::crypto::ring::default_provider();
            pki::verify_client_chain(leaf, intermediates, &roots, unix_now(), &provider)
                .map_err(|e| e.to_string())
        } else {
            verifier
                .verify_client_cert(leaf, intermediates, UnixTime::now())
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        if let Err(err) = verified {
            let who = subject(leaf).map(|s| s.common_name).unwrap_or_default();
            return Outcome::Failed(format!("verifying certificate CN={who:?} failed: {err}"));
        }
        user_from_certificate(leaf)
    }
}

fn unix_now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// User = the subject's common name, groups = its organizations. A certificate without a
/// common name names nobody, so it is no credential at all (as upstream).
pub fn user_from_certificate(cert: &[u8]) -> Outcome {
    match subject(cert) {
        Some(s) if !s.common_name.is_empty() => Outcome::User(UserInfo {
            name: s.common_name,
            groups: s.organizations,
            ..Default::default()
        }),
        Some(_) => Outcome::NoCredential,
        None => Outcome::Failed("client certificate cannot be parsed".into()),
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Subject {
    pub common_name: String,
    pub organizations: Vec<String>,
}

/// The subject's CN (the last one, if repeated, as Go keeps) and every O in order.
pub fn subject(cert: &[u8]) -> Option<Subject> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(fields_of(cert.subject()))
}

/// CN and O of a DER X.501 Name.
#[cfg(test)]
fn name_fields(name: &[u8]) -> Option<Subject> {
    use x509_parser::prelude::FromDer;
    let (_, name) = X509Name::from_der(name).ok()?;
    Some(fields_of(&name))
}

fn fields_of(name: &X509Name<'_>) -> Subject {
    let mut out = Subject::default();
    for rdn in name.iter() {
        for atv in rdn.iter() {
            let value = atv.attr_value();
            // Universal string tags fit in one byte.
            let read = || text(value.tag().0 as u8, value.data);
            if *atv.attr_type() == OID_X509_COMMON_NAME {
                out.common_name = read();
            } else if *atv.attr_type() == OID_X509_ORGANIZATION_NAME {
                out.organizations.push(read());
            }
        }
    }
    out
}

/// A directory string's text: UTF-8, Printable, IA5, Teletex (read as Latin-1) or BMP.
fn text(tag: u8, body: &[u8]) -> String {
    match tag {
        0x14 => body.iter().map(|b| char::from(*b)).collect(),
        0x1e => {
            let units: Vec<u16> = body
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16_lossy(&units)
        }
        _ => String::from_utf8_lossy(body).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
        IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };

    struct Ca {
        pem: String,
        issuer: Issuer<'static, KeyPair>,
    }

    fn ca(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = p.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(p, key),
        }
    }

    /// rcgen keeps one value per attribute type, so at most one O here.
    fn client(ca: &Ca, cn: &str, org: Option<&str>) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = DistinguishedName::new();
        if let Some(o) = org {
            p.distinguished_name.push(DnType::OrganizationName, o);
        }
        if !cn.is_empty() {
            p.distinguished_name.push(DnType::CommonName, cn);
        }
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        p.signed_by(&key, &ca.issuer).unwrap().der().clone()
    }

    fn write(path: &Path, body: &str) {
        std::fs::write(path, body).unwrap();
    }

    fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag, body.len() as u8];
        v.extend_from_slice(body);
        v
    }

    const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
    const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];

    fn attr(oid: &[u8], tag: u8, value: &str) -> Vec<u8> {
        let seq = [tlv(0x06, oid), tlv(tag, value.as_bytes())].concat();
        tlv(0x31, &tlv(0x30, &seq))
    }

    #[test]
    fn subject_gives_last_cn_and_every_o() {
        let name = tlv(
            0x30,
            &[
                attr(OID_ORGANIZATION, 0x0c, "dev"),
                attr(OID_COMMON_NAME, 0x13, "first"),
                attr(OID_ORGANIZATION, 0x13, "ops"),
                attr(OID_COMMON_NAME, 0x0c, "alice"),
            ]
            .concat(),
        );
        assert_eq!(
            name_fields(&name),
            Some(Subject {
                common_name: "alice".into(),
                organizations: vec!["dev".into(), "ops".into()],
            })
        );
        assert_eq!(text(0x1e, &[0, b'h', 0, b'i']), "hi");
        assert_eq!(text(0x14, &[0xe9]), "\u{e9}");
    }

    #[test]
    fn subject_of_a_real_certificate() {
        let ca = ca("test-ca");
        let cert = client(&ca, "alice", Some("dev"));
        assert_eq!(
            subject(&cert),
            Some(Subject {
                common_name: "alice".into(),
                organizations: vec!["dev".into()],
            })
        );
        assert_eq!(subject(b"junk"), None);
    }

    #[test]
    fn trusted_chain_authenticates_and_others_fail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        let good = ca("good-ca");
        let evil = ca("evil-ca");
        write(&path, &good.pem);
        let auth = X509Authenticator::new(&path).unwrap();
        let ok = auth.authenticate(&[client(&good, "system:node:n1", Some("system:nodes"))]);
        assert_eq!(
            ok,
            Outcome::User(UserInfo {
                name: "system:node:n1".into(),
                groups: vec!["system:nodes".into()],
                ..Default::default()
            })
        );
        assert!(matches!(
            auth.authenticate(&[client(&evil, "mallory", None)]),
            Outcome::Failed(_)
        ));
        assert_eq!(auth.authenticate(&[]), Outcome::NoCredential);
        assert_eq!(
            auth.authenticate(&[client(&good, "", Some("x"))]),
            Outcome::NoCredential
        );
    }

    #[test]
    fn v1_client_certificates_and_v1_cas_are_accepted_like_go() {
        use crate::pki::testing::{TestCa, now};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        let v3_ca = TestCa::v3("kubernetes");
        let v1_ca = TestCa::v1("old-ca");
        let stranger = TestCa::v3("kubernetes");
        write(&path, &format!("{}{}", v3_ca.pem, v1_ca.pem));
        let auth = X509Authenticator::new(&path).unwrap();
        for (ca, who) in [(&v3_ca, "by-v3"), (&v1_ca, "by-v1")] {
            let (leaf, _) = ca.v1_leaf(who, Some("system:masters"));
            assert_eq!(
                auth.authenticate(&[leaf.into()]),
                Outcome::User(UserInfo {
                    name: who.into(),
                    groups: vec!["system:masters".into()],
                    ..Default::default()
                })
            );
            // A v3 leaf under a v1 root goes through webpki and passes too.
            let (v3, _) = ca.v3_leaf(who, who, true);
            assert!(matches!(auth.authenticate(&[v3.into()]), Outcome::User(_)));
        }
        let (forged, _) = stranger.v1_leaf("mallory", None);
        assert!(matches!(
            auth.authenticate(&[forged.into()]),
            Outcome::Failed(_)
        ));
        let (expired, _) = v3_ca.v1_leaf_valid("old", None, now() - 100, now() - 10);
        assert!(matches!(
            auth.authenticate(&[expired.into()]),
            Outcome::Failed(_)
        ));
    }

    #[test]
    fn changed_ca_file_is_reloaded_and_a_broken_one_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        let first = ca("first");
        let second = ca("second");
        write(&path, &first.pem);
        let auth = X509Authenticator::new(&path).unwrap();
        let by_second = client(&second, "bob", None);
        assert!(matches!(
            auth.authenticate(std::slice::from_ref(&by_second)),
            Outcome::Failed(_)
        ));
        // Make the next use look at the file.
        let force_check = || {
            auth.current.lock().unwrap().checked = Instant::now() - RELOAD_CHECK;
        };
        write(&path, &format!("{}{}", first.pem, second.pem));
        force_check();
        assert!(matches!(
            auth.authenticate(std::slice::from_ref(&by_second)),
            Outcome::User(_)
        ));
        write(&path, "not a certificate");
        force_check();
        assert!(
            matches!(auth.authenticate(&[by_second]), Outcome::User(_)),
            "a broken file keeps the previous CAs"
        );
    }

    #[test]
    fn unusable_ca_file_is_a_start_up_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        assert!(X509Authenticator::new(&path).is_err());
        write(&path, "nothing here");
        let err = X509Authenticator::new(&path).err().unwrap().to_string();
        assert!(err.contains("unable to load client CA file"), "{err}");
    }
}
