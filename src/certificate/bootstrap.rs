//! What lets TLS bootstrap survive a restart, as upstream's does: the key waits in the cert
//! dir until its certificate is stored, and the CSR's name is a digest of that key, the subject
//! and the usages, so a restarted kubelet finds the CSR it made before and waits on it.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use tracing::{debug, info, warn};
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer;

use super::{CertError, store};

/// Upstream's name for the key in waiting; an upstream kubelet swapped for ours mid-bootstrap
/// leaves it here.
pub(crate) const TMP_KEY_FILE: &str = "kubelet-client.key.tmp";

fn key_path(cert_dir: &Path) -> PathBuf {
    cert_dir.join(TMP_KEY_FILE)
}

/// The key an earlier run left waiting for its certificate, else a new ECDSA P-256 key,
/// written (0600) before any CSR carries it so that a crash cannot lose it.
pub(crate) fn load_or_generate_key(cert_dir: &Path) -> Result<rcgen::KeyPair, CertError> {
    let path = key_path(cert_dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => match rcgen::KeyPair::from_pem(&text) {
            Ok(key) => {
                info!(path = %path.display(), "Reusing the bootstrap key of an earlier attempt");
                return Ok(key);
            }
            // The CSR of an unreadable key can never be completed anyway; a fresh one at least
            // lets bootstrap go on (an admin then sees a second CSR, as before this file).
            Err(err) => {
                warn!(%err, path = %path.display(), "Bootstrap key is not a usable private key; replacing it")
            }
        },
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => {
            warn!(%err, path = %path.display(), "Bootstrap key is unreadable; replacing it")
        }
    }
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    store::write_atomic(&path, &key.serialize_pem())?;
    debug!(path = %path.display(), "Wrote a new bootstrap key");
    Ok(key)
}

/// Drops the waiting key once its pair is in the store. A leftover file is harmless (the
/// next bootstrap would reuse it), so a failure is only logged.
pub(crate) fn remove_key(cert_dir: &Path) {
    let path = key_path(cert_dir);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => warn!(%err, path = %path.display(), "Could not remove the bootstrap key"),
    }
}

/// `node-csr-` and the SHA-512/256 digest of the public key (DER SubjectPublicKeyInfo), the
/// subject's common name and organizations and the usages, as upstream names it (so both
/// kubelets name the same request alike). The request itself cannot be hashed: its ECDSA
/// signature differs every time.
pub(crate) fn digested_name(
    spki: &[u8],
    common_name: &str,
    organizations: &[&str],
    usages: &[&str],
) -> String {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA512_256);
    // Each part goes in base64url-encoded and closed by '|', a byte that alphabet lacks: no
    // two different lists of parts then feed the hash the same bytes ("ab","c" vs "a","bc").
    let mut part = |bytes: &[u8]| {
        digest.update(URL_SAFE_NO_PAD.encode(bytes).as_bytes());
        digest.update(b"|");
    };
    part(spki);
    part(common_name.as_bytes());
    for org in organizations {
        part(org.as_bytes());
    }
    for usage in usages {
        part(usage.as_bytes());
    }
    format!("node-csr-{}", URL_SAFE_NO_PAD.encode(digest.finish()))
}

/// What a CSR found under our digested name must ask for to be ours.
pub(crate) struct Expected<'a> {
    pub signer: &'a str,
    pub usages: &'a [&'a str],
    /// DER SubjectPublicKeyInfo of our key.
    pub spki: &'a [u8],
    pub common_name: &'a str,
    pub organization: &'a str,
}

/// Whether `csr` is the request our key made (same signer, usages, subject and public key)
/// and, if already issued, issued a certificate that has not expired; otherwise why not.
/// The signature is not checked again: the API server refuses a CSR whose signature does not
/// verify with its own public key, and that key must be ours.
pub(crate) fn ensure_compatible(
    csr: &CertificateSigningRequest,
    want: &Expected<'_>,
    now: Timestamp,
) -> Result<(), String> {
    let spec = &csr.spec;
    if spec.signer_name != want.signer {
        return Err(format!(
            "signer {:?}, want {:?}",
            spec.signer_name, want.signer
        ));
    }
    let mut have: Vec<&str> = spec.usages.iter().flatten().map(String::as_str).collect();
    let mut wanted = want.usages.to_vec();
    for list in [&mut have, &mut wanted] {
        list.sort_unstable();
        list.dedup();
    }
    if have != wanted {
        return Err(format!("usages {have:?}, want {wanted:?}"));
    }
    let block = pem::parse(&spec.request.0).map_err(|e| format!("request is not PEM: {e}"))?;
    if block.tag() != "CERTIFICATE REQUEST" {
        return Err(format!(
            "request is a PEM {:?} block, not a CERTIFICATE REQUEST",
            block.tag()
        ));
    }
    let (_, parsed) = X509CertificationRequest::from_der(block.contents())
        .map_err(|e| format!("request does not parse: {e}"))?;
    let info = &parsed.certification_request_info;
    if info.subject_pki.raw != want.spki {
        return Err("request carries another public key than this node's bootstrap key".into());
    }
    let cns: Vec<_> = info
        .subject
        .iter_common_name()
        .map(|a| a.as_str().ok())
        .collect();
    let orgs: Vec<_> = info
        .subject
        .iter_organization()
        .map(|a| a.as_str().ok())
        .collect();
    if cns != [Some(want.common_name)]
        || orgs != [Some(want.organization)]
        || info.subject.iter_attributes().count() != 2
    {
        return Err(format!(
            "subject {}, want CN={}, O={}",
            info.subject, want.common_name, want.organization
        ));
    }
    let issued = csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .filter(|c| !c.0.is_empty());
    if let Some(cert) = issued
        && !super::certs_unexpired(&cert.0, now)
    {
        return Err("its certificate has expired or does not parse".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::csr::node_csr_with;
    use crate::certificate::{NODE_ORGANIZATION, SIGNER_NAME, USAGES};
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestSpec, CertificateSigningRequestStatus,
    };
    use rcgen::PublicKeyData;
    use std::os::unix::fs::PermissionsExt;

    fn new_key() -> rcgen::KeyPair {
        rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap()
    }

    fn name_of(key: &rcgen::KeyPair, node: &str, usages: &[&str]) -> String {
        digested_name(
            &key.subject_public_key_info(),
            &format!("system:node:{node}"),
            &[NODE_ORGANIZATION],
            usages,
        )
    }

    #[test]
    fn name_follows_key_subject_and_usages() {
        let key = new_key();
        let name = name_of(&key, "n1", &USAGES);
        assert!(name.starts_with("node-csr-"), "{name}");
        // 32 digest bytes in unpadded base64url: a valid object name.
        let tail = &name["node-csr-".len()..];
        assert_eq!(tail.len(), 43);
        assert!(
            tail.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );

        let reloaded = rcgen::KeyPair::from_pem(&key.serialize_pem()).unwrap();
        assert_eq!(name_of(&reloaded, "n1", &USAGES), name);
        assert_ne!(name_of(&new_key(), "n1", &USAGES), name);
        assert_ne!(name_of(&key, "n2", &USAGES), name);
        assert_ne!(name_of(&key, "n1", &USAGES[..2]), name);
    }

    /// The expected value was computed apart from this code (Python's hashlib sha512_256 and
    /// base64.urlsafe_b64encode over the same parts), from upstream's description of the name.
    #[test]
    fn name_matches_upstreams_scheme() {
        let name = digested_name(
            b"spki-bytes",
            "system:node:n1",
            &["system:nodes"],
            &["digital signature", "key encipherment", "client auth"],
        );
        assert_eq!(name, KNOWN_NAME);
        // The delimiter keeps a part boundary from moving unnoticed.
        assert_ne!(
            digested_name(b"ab", "c", &[], &[]),
            digested_name(b"a", "bc", &[], &[])
        );
    }

    const KNOWN_NAME: &str = "node-csr-XZIFr6InDHvo9uU7-EUSrJuk7xkg0tzCQDTSzjKjREQ";

    #[test]
    fn key_is_kept_reused_replaced_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cert_dir = dir.path().join("pki");
        let path = cert_dir.join(TMP_KEY_FILE);

        let first = load_or_generate_key(&cert_dir).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            first.serialize_pem()
        );

        let again = load_or_generate_key(&cert_dir).unwrap();
        assert_eq!(
            again.subject_public_key_info(),
            first.subject_public_key_info()
        );

        std::fs::write(&path, "not a key").unwrap();
        let fresh = load_or_generate_key(&cert_dir).unwrap();
        assert_ne!(
            fresh.subject_public_key_info(),
            first.subject_public_key_info()
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            fresh.serialize_pem()
        );
        assert!(
            !cert_dir.join(format!("{TMP_KEY_FILE}.tmp")).exists(),
            "no half-written file is left"
        );

        remove_key(&cert_dir);
        assert!(!path.exists());
        remove_key(&cert_dir);
    }

    fn csr_object(
        key: &rcgen::KeyPair,
        node: &str,
        signer: &str,
        usages: &[&str],
    ) -> CertificateSigningRequest {
        let pem_text = node_csr_with(key, node, &[], &[]).unwrap();
        CertificateSigningRequest {
            spec: CertificateSigningRequestSpec {
                request: ByteString(pem_text.into_bytes()),
                signer_name: signer.into(),
                usages: Some(usages.iter().map(|u| u.to_string()).collect()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn issued(
        mut csr: CertificateSigningRequest,
        not_after_year: i32,
    ) -> CertificateSigningRequest {
        let key = new_key();
        let mut params = rcgen::CertificateParams::new(vec!["x".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(not_after_year, 1, 1);
        let pem_text = params.self_signed(&key).unwrap().pem();
        csr.status = Some(CertificateSigningRequestStatus {
            certificate: Some(ByteString(pem_text.into_bytes())),
            ..Default::default()
        });
        csr
    }

    #[test]
    fn only_our_own_request_is_compatible() {
        let key = new_key();
        let spki = key.subject_public_key_info();
        let want = Expected {
            signer: SIGNER_NAME,
            usages: &USAGES,
            spki: &spki,
            common_name: "system:node:n1",
            organization: NODE_ORGANIZATION,
        };
        let now: Timestamp = "2030-06-01T00:00:00Z".parse().unwrap();
        let ours = csr_object(&key, "n1", SIGNER_NAME, &USAGES);
        assert_eq!(ensure_compatible(&ours, &want, now), Ok(()));
        let reordered = csr_object(&key, "n1", SIGNER_NAME, &[USAGES[2], USAGES[0], USAGES[1]]);
        assert_eq!(ensure_compatible(&reordered, &want, now), Ok(()));
        assert_eq!(
            ensure_compatible(&issued(ours.clone(), 2031), &want, now),
            Ok(())
        );

        let check = |csr: &CertificateSigningRequest, needle: &str| {
            let err = ensure_compatible(csr, &want, now).unwrap_err();
            assert!(err.contains(needle), "{err:?} lacks {needle:?}");
        };
        check(
            &csr_object(&key, "n1", "kubernetes.io/kubelet-serving", &USAGES),
            "signer",
        );
        check(&csr_object(&key, "n1", SIGNER_NAME, &USAGES[..2]), "usages");
        check(
            &csr_object(&new_key(), "n1", SIGNER_NAME, &USAGES),
            "public key",
        );
        check(&csr_object(&key, "n2", SIGNER_NAME, &USAGES), "subject");
        check(&issued(ours.clone(), 2029), "expired");
        let mut garbled = ours;
        garbled.spec.request = ByteString(
            b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"
                .to_vec(),
        );
        check(&garbled, "parse");
    }
}
