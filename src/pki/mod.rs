//! X.509 the way Go's crypto/tls and crypto/x509 accept it, where rustls and webpki are
//! stricter. webpki parses only v3 end-entity certificates, so a v1 certificate (what
//! `openssl x509 -req` makes without `-extfile`) fails three places upstream accepts it:
//! pairing a key with its certificate (rustls checks the match by parsing the leaf), checking
//! a peer's handshake signature against its certificate, and verifying a client certificate
//! against a CA bundle. Each gets a path here that reads the certificate itself and still
//! checks keys, signatures, validity windows and the chain to a trusted root.
//!
//! v1 roots are already fine in rustls (`RootCertStore::add` reads them as trust anchors);
//! a v1 intermediate is refused here as Go refuses it: without basicConstraints it may not
//! sign.

use jiff::Timestamp;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, SignatureScheme};
use x509_parser::asn1_rs::{Any, FromDer, Tag};
use x509_parser::certificate::X509Certificate;
use x509_parser::x509::X509Version;

/// Why a certificate or key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// No CERTIFICATE block in the PEM text.
    #[error("no certificate found")]
    NoCertificate,
    /// No private key block in the PEM text.
    #[error("no private key found")]
    NoKey,
    /// The PEM text is malformed.
    #[error("PEM: {0}")]
    Pem(String),
    /// A certificate cannot be parsed.
    #[error("certificate cannot be parsed: {0}")]
    Parse(String),
    /// The key is of a kind the crypto provider cannot sign with.
    #[error("private key: {0}")]
    Key(#[source] rustls::Error),
    /// The key is not the certificate's.
    #[error("private key does not match public key")]
    KeyMismatch,
    /// The chain does not lead to a trusted root, or a certificate in it is unusable.
    #[error("{0}")]
    Untrusted(String),
}

/// Every certificate in `pem`, in order.
pub fn certs_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, PkiError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PkiError::Pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(PkiError::NoCertificate);
    }
    Ok(certs)
}

/// The first private key in `pem` (PKCS#8, PKCS#1 or SEC1).
pub fn key_from_pem(pem: &[u8]) -> Result<PrivateKeyDer<'static>, PkiError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => PkiError::NoKey,
        e => PkiError::Pem(e.to_string()),
    })
}

fn parse(cert: &[u8]) -> Result<X509Certificate<'_>, PkiError> {
    x509_parser::parse_x509_certificate(cert)
        .map(|(_, c)| c)
        .map_err(|e| PkiError::Parse(e.to_string()))
}

/// Whether a certificate is X.509 v1 (no extensions).
pub fn is_v1(cert: &[u8]) -> bool {
    parse(cert).is_ok_and(|c| c.version() == X509Version::V1)
}

/// The certificate chain with its key, the pair checked like Go's `tls.X509KeyPair`: the key
/// must be the leaf's. Unlike `CertifiedKey::from_der`, any certificate version will do.
pub fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, PkiError> {
    let leaf = chain.first().ok_or(PkiError::NoCertificate)?;
    let spki = parse(leaf)?.public_key().raw.to_vec();
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(PkiError::Key)?;
    // A key that cannot tell its public half (none of ring's) is taken on trust, as rustls does.
    if let Some(public) = signer.public_key()
        && public.as_ref() != spki.as_slice()
    {
        return Err(PkiError::KeyMismatch);
    }
    Ok(CertifiedKey::new(chain, signer))
}

/// [`certified_key`] from PEM text: the certificates of `cert_pem` and the key of `key_pem`
/// (which may be the same text, as in the kubelet's `-current.pem` files).
pub fn certified_key_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, PkiError> {
    certified_key(certs_from_pem(cert_pem)?, key_from_pem(key_pem)?, provider)
}

/// The first DER element of `input`, if it has tag `tag`, and what follows it.
fn element(input: &[u8], tag: Tag) -> Option<(Any<'_>, &[u8])> {
    let (rest, any) = Any::from_der(input).ok()?;
    (any.tag() == tag).then_some((any, rest))
}

/// A BIT STRING's bytes; its first byte counts unused bits, and keys and signatures use whole
/// bytes.
fn whole_bytes<'a>(bits: &Any<'a>) -> Option<&'a [u8]> {
    bits.data.strip_prefix(&[0])
}

/// The AlgorithmIdentifier contents and the key bits of a SubjectPublicKeyInfo.
fn spki_parts(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    let (seq, _) = element(spki, Tag::Sequence)?;
    let (alg, rest) = element(seq.data, Tag::Sequence)?;
    let (bits, rest) = element(rest, Tag::BitString)?;
    rest.is_empty().then_some((alg.data, whole_bytes(&bits)?))
}

/// notBefore and notAfter of a DER certificate.
pub(crate) fn validity(cert: &[u8]) -> Option<(Timestamp, Timestamp)> {
    validity_of(&parse(cert).ok()?)
}

/// notBefore and notAfter of a parsed certificate.
pub(crate) fn validity_of(cert: &X509Certificate<'_>) -> Option<(Timestamp, Timestamp)> {
    let v = cert.validity();
    let at = |t: &x509_parser::time::ASN1Time| Timestamp::from_second(t.timestamp()).ok();
    Some((at(&v.not_before)?, at(&v.not_after)?))
}

/// Verifies `signature` over `message` by the key in `spki` with one of `algs`, picking the
/// algorithms whose key type matches as webpki does.
fn verify_with_spki(
    spki: &[u8],
    algs: &[&dyn rustls::pki_types::SignatureVerificationAlgorithm],
    signature_alg: Option<&[u8]>,
    message: &[u8],
    signature: &[u8],
) -> bool {
    let Some((key_alg, key)) = spki_parts(spki) else {
        return false;
    };
    algs.iter()
        .filter(|a| a.public_key_alg_id().as_ref() == key_alg)
        .filter(|a| signature_alg.is_none_or(|s| a.signature_alg_id().as_ref() == s))
        .any(|a| a.verify_signature(key, message, signature).is_ok())
}

/// TLS 1.3 allows only these schemes in CertificateVerify.
fn tls13_scheme(scheme: SignatureScheme) -> bool {
    matches!(
        scheme,
        SignatureScheme::ECDSA_NISTP256_SHA256
            | SignatureScheme::ECDSA_NISTP384_SHA384
            | SignatureScheme::ECDSA_NISTP521_SHA512
            | SignatureScheme::RSA_PSS_SHA256
            | SignatureScheme::RSA_PSS_SHA384
            | SignatureScheme::RSA_PSS_SHA512
            | SignatureScheme::ED25519
            | SignatureScheme::ED448
    )
}

/// A peer's handshake signature checked against its certificate's key, read with x509-parser
/// so v1 certificates work (rustls's own check parses the certificate with webpki).
pub fn verify_handshake_signature(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    supported: &WebPkiSupportedAlgorithms,
    tls13: bool,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    let invalid = || rustls::Error::InvalidCertificate(rustls::CertificateError::BadSignature);
    if tls13 && !tls13_scheme(dss.scheme) {
        return Err(rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme.into());
    }
    let algs = supported
        .mapping
        .iter()
        .find(|(s, _)| *s == dss.scheme)
        .map(|(_, algs)| *algs)
        .ok_or(rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme)?;
    // TLS 1.3 names one algorithm per scheme; TLS 1.2 may try several.
    let algs = if tls13 {
        &algs[..algs.len().min(1)]
    } else {
        algs
    };
    let parsed = parse(cert)
        .map_err(|_| rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding))?;
    if verify_with_spki(
        parsed.public_key().raw,
        algs,
        None,
        message,
        dss.signature(),
    ) {
        Ok(HandshakeSignatureValid::assertion())
    } else {
        Err(invalid())
    }
}

/// Longest chain of intermediates looked for, as a bound on the search.
const MAX_CHAIN: usize = 8;

/// The TBS bytes, signature algorithm contents and signature of a DER certificate.
fn signed_parts(cert: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (outer, _) = element(cert, Tag::Sequence)?;
    let (_, rest) = element(outer.data, Tag::Sequence)?;
    // The signature covers the TBS element whole, tag and length included.
    let tbs = &outer.data[..outer.data.len() - rest.len()];
    let (alg, rest) = element(rest, Tag::Sequence)?;
    let (sig, _) = element(rest, Tag::BitString)?;
    Some((tbs, alg.data, whole_bytes(&sig)?))
}

/// Whether `issuer` signed `cert`.
fn signed_by(cert: &[u8], issuer: &X509Certificate<'_>, provider: &CryptoProvider) -> bool {
    let Some((tbs, alg, sig)) = signed_parts(cert) else {
        return false;
    };
    verify_with_spki(
        issuer.public_key().raw,
        provider.signature_verification_algorithms.all,
        Some(alg),
        tbs,
        sig,
    )
}

fn within_validity(cert: &X509Certificate<'_>, now: i64) -> bool {
    let v = cert.validity();
    v.not_before.timestamp() <= now && now <= v.not_after.timestamp()
}

/// Extended key usage allows client authentication (no extension allows everything).
fn allows_client_auth(cert: &X509Certificate<'_>) -> bool {
    match cert.extended_key_usage() {
        Ok(None) => true,
        Ok(Some(eku)) => eku.value.any || eku.value.client_auth,
        Err(_) => false,
    }
}

/// Verifies a client certificate chain the way Go's `x509.Certificate.Verify` does with
/// `ExtKeyUsageClientAuth`, for the chains webpki cannot read (a v1 leaf): every certificate
/// within its validity window at `now` (Unix seconds), each signed by the next, intermediates
/// CAs by basicConstraints (and within their path length), extended key usages allowing
/// client auth where present, ending at one of `roots`.
pub fn verify_client_chain(
    leaf: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    roots: &[CertificateDer<'static>],
    now: i64,
    provider: &CryptoProvider,
) -> Result<(), PkiError> {
    let parsed_leaf = parse(leaf)?;
    if !within_validity(&parsed_leaf, now) {
        return Err(PkiError::Untrusted(
            "certificate has expired or is not yet valid".into(),
        ));
    }
    if !allows_client_auth(&parsed_leaf) {
        return Err(PkiError::Untrusted(
            "certificate specifies an incompatible key usage".into(),
        ));
    }
    let pool: Vec<(bool, &[u8])> = roots
        .iter()
        .map(|r| (true, r.as_ref()))
        .chain(intermediates.iter().map(|i| (false, i.as_ref())))
        .collect();
    let mut budget = MAX_SIGNATURE_CHECKS;
    let search = Search {
        pool: &pool,
        now,
        provider,
    };
    if search.extend(leaf, &parsed_leaf, &mut Vec::new(), &mut budget) {
        Ok(())
    } else {
        Err(PkiError::Untrusted(
            "certificate signed by unknown authority".into(),
        ))
    }
}

/// Signature checks one chain search may make, as Go's verifier bounds it: a client can send
/// many intermediates that all claim to sign each other, and the search must not try every
/// ordering of them.
const MAX_SIGNATURE_CHECKS: u32 = 100;

/// One chain search: the roots (true) and the client's intermediates (false) to build from.
struct Search<'a> {
    pool: &'a [(bool, &'a [u8])],
    now: i64,
    provider: &'a CryptoProvider,
}

impl Search<'_> {
    /// Depth-first search for an issuer of `cert` in the pool leading to a root. `path` holds the
    /// intermediates used so far (no certificate twice); `budget` the signature checks left.
    fn extend(
        &self,
        cert: &[u8],
        parsed: &X509Certificate<'_>,
        path: &mut Vec<usize>,
        budget: &mut u32,
    ) -> bool {
        let (pool, now, provider) = (self.pool, self.now, self.provider);
        if path.len() >= MAX_CHAIN {
            return false;
        }
        for (i, (is_root, candidate)) in pool.iter().enumerate() {
            if path.contains(&i) {
                continue;
            }
            let Ok(issuer) = parse(candidate) else {
                continue;
            };
            if issuer.subject().as_raw() != parsed.issuer().as_raw()
                || !within_validity(&issuer, now)
            {
                continue;
            }
            if *budget == 0 {
                return false;
            }
            *budget -= 1;
            if !signed_by(cert, &issuer, provider) {
                continue;
            }
            if *is_root {
                return true;
            }
            // An intermediate must say it is a CA, may limit how many CAs sit below it, and
            // narrows the usages of everything below it.
            let Ok(Some(bc)) = issuer.basic_constraints() else {
                continue;
            };
            let below = path.len();
            if !bc.value.ca
                || bc
                    .value
                    .path_len_constraint
                    .is_some_and(|max| below > max as usize)
                || !allows_client_auth(&issuer)
            {
                continue;
            }
            path.push(i);
            if self.extend(candidate, &issuer, path, budget) {
                return true;
            }
            path.pop();
        }
        false
    }
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    fn ring() -> CryptoProvider {
        rustls::crypto::ring::default_provider()
    }

    #[test]
    fn validity_windows_of_v1_and_v3_certificates() {
        assert!(validity(b"not a certificate").is_none());
        let ca = TestCa::v3("ca");
        let (v3, _) = ca.v3_leaf("n1", "n1", true);
        let (v1, _) = ca.v1_leaf("system:node:n1", None);
        let now = Timestamp::from_second(now()).unwrap();
        for cert in [&v3, &v1, &ca.der] {
            let (from, until) = validity(cert).unwrap();
            assert!(from <= now && now <= until, "{from} {until}");
        }
    }

    #[test]
    fn v1_pair_loads_and_a_foreign_key_is_refused() {
        let ca = TestCa::v3("ca");
        let (leaf, key) = ca.v1_leaf("system:node:n1", Some("system:nodes"));
        assert!(is_v1(&leaf));
        // What rustls itself does with the pair: the reason kubeconfigs with v1 certs failed.
        let chain = vec![CertificateDer::from(leaf.clone())];
        let der_key = || PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        assert!(CertifiedKey::from_der(chain.clone(), der_key(), &ring()).is_err());
        let ck = certified_key(chain.clone(), der_key(), &ring()).unwrap();
        assert_eq!(ck.cert, chain);
        let pem_cert = pem_of("CERTIFICATE", &leaf);
        assert!(
            certified_key_from_pem(pem_cert.as_bytes(), key.serialize_pem().as_bytes(), &ring())
                .is_ok()
        );
        let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        assert!(matches!(
            certified_key_from_pem(
                pem_cert.as_bytes(),
                other.serialize_pem().as_bytes(),
                &ring()
            ),
            Err(PkiError::KeyMismatch)
        ));
        assert!(matches!(
            certified_key_from_pem(b"", b"", &ring()),
            Err(PkiError::NoCertificate)
        ));
    }

    #[test]
    fn v1_client_chains_verify_against_v3_and_v1_roots() {
        let p = ring();
        let now = now();
        for ca in [TestCa::v3("ca3"), TestCa::v1("ca1")] {
            let roots = vec![CertificateDer::from(ca.der.clone())];
            let (leaf, _) = ca.v1_leaf("alice", None);
            verify_client_chain(&leaf.clone().into(), &[], &roots, now, &p).unwrap();
            // A v3 leaf verifies here too.
            let (v3, _) = ca.v3_leaf("bob", "bob", true);
            verify_client_chain(&v3.into(), &[], &roots, now, &p).unwrap();
            // Not yet valid, expired.
            let (early, _) = ca.v1_leaf_valid("c", None, now + 100, now + 200);
            assert!(verify_client_chain(&early.into(), &[], &roots, now, &p).is_err());
            let (late, _) = ca.v1_leaf_valid("c", None, now - 200, now - 100);
            assert!(verify_client_chain(&late.into(), &[], &roots, now, &p).is_err());
            // A server-only leaf may not authenticate a client.
            let (server, _) = ca.v3_leaf("srv", "srv", false);
            assert!(verify_client_chain(&server.into(), &[], &roots, now, &p).is_err());
        }
        // Another CA with the same name: the signature decides.
        let real = TestCa::v3("same");
        let fake = TestCa::v3("same");
        let (leaf, _) = fake.v1_leaf("mallory", None);
        let roots = vec![CertificateDer::from(real.der.clone())];
        assert!(verify_client_chain(&leaf.into(), &[], &roots, now, &p).is_err());
        // A tampered signature fails.
        let (mut leaf, _) = real.v1_leaf("alice", None);
        let last = leaf.len() - 1;
        leaf[last] ^= 1;
        assert!(verify_client_chain(&leaf.into(), &[], &roots, now, &p).is_err());
    }

    #[test]
    fn a_v1_intermediate_may_not_sign() {
        let p = ring();
        let root = TestCa::v3("root");
        // A v1 "CA" issued by the root, which then issues the leaf.
        let (mid_der, mid_key) = root.v1_leaf("mid", None);
        let mid_name = name("mid", None);
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let leaf = v1_cert(
            &name("alice", None),
            &key,
            &mid_name,
            &mid_key,
            now() - 10,
            now() + 1000,
        );
        let roots = vec![CertificateDer::from(root.der.clone())];
        let mids = [CertificateDer::from(mid_der)];
        assert!(verify_client_chain(&leaf.into(), &mids, &roots, now(), &p).is_err());
    }

    #[test]
    fn intermediates_signing_each_other_do_not_make_the_search_endless() {
        // Two dozen CA certificates with one name and one key: each "signs" all the others,
        // so without a bound the search would try every ordering up to the depth limit.
        let p = ring();
        let looped = TestCa::v3("loop");
        let mids: Vec<CertificateDer<'static>> = (0..24)
            .map(|_| {
                let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
                params
                    .distinguished_name
                    .push(rcgen::DnType::CommonName, "loop");
                params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
                CertificateDer::from(params.self_signed(&looped.key).unwrap().der().to_vec())
            })
            .collect();
        let (leaf, _) = looped.v1_leaf("alice", None);
        let roots = vec![CertificateDer::from(TestCa::v3("root").der)];
        assert!(verify_client_chain(&leaf.into(), &mids, &roots, now(), &p).is_err());
    }
}
