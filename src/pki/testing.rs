//! Certificates for tests, v1 ones included (rcgen makes only v3, so v1 DER is built by
//! hand and signed with ring).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair};

/// A CA (v3, or v1 when asked) that can sign v1 and v3 leaves.
pub struct TestCa {
    pub pem: String,
    pub der: Vec<u8>,
    pub key: KeyPair,
    name_der: Vec<u8>,
    issuer: Option<Issuer<'static, KeyPair>>,
}

fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = body.len();
    if len < 0x80 {
        out.push(len as u8);
    } else if len < 0x100 {
        out.extend([0x81, len as u8]);
    } else {
        out.extend([0x82, (len >> 8) as u8, len as u8]);
    }
    out.extend_from_slice(body);
    out
}

/// An X.501 Name with one O (optional) and a CN.
pub fn name(cn: &str, org: Option<&str>) -> Vec<u8> {
    let attr = |oid: &[u8], v: &str| {
        tlv(
            0x31,
            &tlv(0x30, &[tlv(0x06, oid), tlv(0x0c, v.as_bytes())].concat()),
        )
    };
    let mut rdns = Vec::new();
    if let Some(o) = org {
        rdns.extend(attr(&[0x55, 0x04, 0x0a], o));
    }
    rdns.extend(attr(&[0x55, 0x04, 0x03], cn));
    tlv(0x30, &rdns)
}

fn utc(t: i64) -> Vec<u8> {
    let ts = jiff::Timestamp::from_second(t).unwrap();
    tlv(0x17, ts.strftime("%y%m%d%H%M%SZ").to_string().as_bytes())
}

/// A v1 certificate for `subject` with `subject_key`, issued by `issuer_name` and signed
/// with `issuer_key` (ECDSA P-256 with SHA-256), valid over `[from, until]`.
pub fn v1_cert(
    subject: &[u8],
    subject_key: &KeyPair,
    issuer_name: &[u8],
    issuer_key: &KeyPair,
    from: i64,
    until: i64,
) -> Vec<u8> {
    // ecdsa-with-SHA256
    let alg = tlv(
        0x30,
        &tlv(0x06, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]),
    );
    let serial = tlv(0x02, &[0x01, 0x23, 0x45]);
    let validity = tlv(0x30, &[utc(from), utc(until)].concat());
    let tbs = tlv(
        0x30,
        &[
            serial,
            alg.clone(),
            issuer_name.to_vec(),
            validity,
            subject.to_vec(),
            rcgen::PublicKeyData::subject_public_key_info(subject_key),
        ]
        .concat(),
    );
    let signer = EcdsaKeyPair::from_pkcs8(
        &ECDSA_P256_SHA256_ASN1_SIGNING,
        &issuer_key.serialize_der(),
        &SystemRandom::new(),
    )
    .unwrap();
    let sig = signer.sign(&SystemRandom::new(), &tbs).unwrap();
    let mut bits = vec![0];
    bits.extend_from_slice(sig.as_ref());
    tlv(0x30, &[tbs, alg, tlv(0x03, &bits)].concat())
}

pub fn pem_of(tag: &str, der: &[u8]) -> String {
    pem::encode(&pem::Pem::new(tag, der.to_vec()))
}

pub fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

impl TestCa {
    /// A v3 CA (basicConstraints CA, keyCertSign) as kubeadm makes them.
    pub fn v3(cn: &str) -> Self {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = p.self_signed(&key).unwrap();
        let der = cert.der().to_vec();
        let name_der = x509_parser::parse_x509_certificate(&der)
            .unwrap()
            .1
            .subject()
            .as_raw()
            .to_vec();
        let issuer = Issuer::new(p, KeyPair::from_pem(&key.serialize_pem()).unwrap());
        TestCa {
            pem: cert.pem(),
            der,
            key,
            name_der,
            issuer: Some(issuer),
        }
    }

    /// A self-signed v1 CA, as `openssl x509 -req -signkey` makes one.
    pub fn v1(cn: &str) -> Self {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let n = name(cn, None);
        let der = v1_cert(&n, &key, &n, &key, now() - 3600, now() + 86400 * 365);
        TestCa {
            pem: pem_of("CERTIFICATE", &der),
            der,
            key,
            name_der: n,
            issuer: None,
        }
    }

    /// A v1 leaf (no extensions at all) issued by this CA; returns (cert DER, its key).
    pub fn v1_leaf(&self, cn: &str, org: Option<&str>) -> (Vec<u8>, KeyPair) {
        self.v1_leaf_valid(cn, org, now() - 3600, now() + 86400)
    }

    pub fn v1_leaf_valid(
        &self,
        cn: &str,
        org: Option<&str>,
        from: i64,
        until: i64,
    ) -> (Vec<u8>, KeyPair) {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let der = v1_cert(&name(cn, org), &key, &self.name_der, &self.key, from, until);
        (der, key)
    }

    /// A v3 leaf for `san` (a DNS name or IP) with the given extended key usage.
    pub fn v3_leaf(&self, cn: &str, san: &str, client: bool) -> (Vec<u8>, KeyPair) {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut p = CertificateParams::new(vec![san.to_string()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        let der = match &self.issuer {
            Some(issuer) => p.signed_by(&key, issuer).unwrap().der().to_vec(),
            None => {
                // rcgen signs only with an Issuer built from params; a v1 CA has none, so
                // give it one carrying the same name and key.
                let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
                ca.distinguished_name = rcgen::DistinguishedName::new();
                let parsed = x509_parser::parse_x509_certificate(&self.der).unwrap().1;
                let cn_value = parsed
                    .subject()
                    .iter_common_name()
                    .next()
                    .and_then(|a| a.as_str().ok())
                    .unwrap_or_default()
                    .to_string();
                ca.distinguished_name.push(DnType::CommonName, cn_value);
                let issuer = Issuer::new(ca, KeyPair::from_pem(&self.key.serialize_pem()).unwrap());
                p.signed_by(&key, &issuer).unwrap().der().to_vec()
            }
        };
        (der, key)
    }
}
