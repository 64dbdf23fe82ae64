//! tlsMinVersion, tlsCipherSuites and tlsCurvePreferences, from upstream's (Go) names to
//! what rustls offers. rustls speaks TLS 1.2 and 1.3 with AEAD suites only. Hardened
//! configurations written for upstream (CIS lists static-RSA GCM suites, older minimums,
//! P-521) must still start, so what rustls lacks is skipped with a warning; only a list left
//! with nothing usable, or a name Go does not know either, stops the kubelet.

use rustls::crypto::SupportedKxGroup;
use rustls::crypto::ring::{cipher_suite as cs, kx_group};
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

use tracing::warn;

use super::TlsError;

pub static TLS12_AND_13: &[&SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];
pub static TLS13_ONLY: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// The protocol versions served for `tlsMinVersion` (empty: Go's server default, TLS 1.2).
pub fn versions(min: &str) -> Result<&'static [&'static SupportedProtocolVersion], TlsError> {
    match min {
        "" | "VersionTLS12" => Ok(TLS12_AND_13),
        "VersionTLS13" => Ok(TLS13_ONLY),
        "VersionTLS10" | "VersionTLS11" => {
            warn!(
                tls_min_version = min,
                "TLS 1.0 and 1.1 are not served (rustls); the minimum is TLS 1.2"
            );
            Ok(TLS12_AND_13)
        }
        other => Err(TlsError::UnknownVersion(other.to_string())),
    }
}

/// Upstream names that rustls implements. The TLS 1.3 ones are accepted and, as upstream
/// does, not configurable: TLS 1.3 always offers all three.
fn known_suite(name: &str) -> Option<SupportedCipherSuite> {
    Some(match name {
        "TLS_AES_128_GCM_SHA256" => cs::TLS13_AES_128_GCM_SHA256,
        "TLS_AES_256_GCM_SHA384" => cs::TLS13_AES_256_GCM_SHA384,
        "TLS_CHACHA20_POLY1305_SHA256" => cs::TLS13_CHACHA20_POLY1305_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => {
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        _ => return None,
    })
}

/// Upstream names rustls deliberately lacks (CBC, RC4, 3DES, static RSA key exchange).
const GO_ONLY_SUITES: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// The TLS 1.2 suites named in `names`; `None` when the list is empty (rustls' defaults).
pub fn tls12_suites(names: &[String]) -> Result<Option<Vec<SupportedCipherSuite>>, TlsError> {
    if names.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut usable = false;
    for name in names {
        match known_suite(name) {
            Some(suite) => {
                usable = true;
                if suite.version() == &rustls::version::TLS12 && !out.contains(&suite) {
                    out.push(suite);
                }
            }
            None if GO_ONLY_SUITES.contains(&name.as_str()) => {
                warn!(cipher_suite = %name, "Cipher suite not offered: rustls does not implement it");
            }
            None => return Err(TlsError::UnknownCipher(name.clone())),
        }
    }
    if !usable {
        return Err(TlsError::UnsupportedCipher(names.join(", ")));
    }
    Ok(Some(out))
}

/// Go's CurveID numbers for tlsCurvePreferences; `None` when unset (rustls' defaults).
pub fn kx_groups(ids: &[i32]) -> Result<Option<Vec<&'static dyn SupportedKxGroup>>, TlsError> {
    if ids.is_empty() {
        return Ok(None);
    }
    let groups: Vec<&'static dyn SupportedKxGroup> = ids
        .iter()
        .filter_map(|id| match id {
            23 => Some(kx_group::SECP256R1),
            24 => Some(kx_group::SECP384R1),
            29 => Some(kx_group::X25519),
            other => {
                warn!(
                    curve = other,
                    "Curve not offered: rustls does not implement it"
                );
                None
            }
        })
        .collect();
    match groups.first() {
        Some(_) => Ok(Some(groups)),
        None => Err(TlsError::UnsupportedCurve(ids.to_vec())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn min_versions() {
        assert_eq!(versions("").unwrap().len(), 2);
        assert_eq!(versions("VersionTLS12").unwrap().len(), 2);
        assert_eq!(versions("VersionTLS13").unwrap(), TLS13_ONLY);
        // Older minimums are raised to what rustls serves rather than refused.
        assert_eq!(versions("VersionTLS10").unwrap(), TLS12_AND_13);
        assert_eq!(versions("VersionTLS11").unwrap(), TLS12_AND_13);
        assert_eq!(
            versions("TLS9").err().unwrap().to_string(),
            "unknown tls version \"TLS9\""
        );
    }

    #[test]
    fn cipher_names_map_to_rustls() {
        assert!(tls12_suites(&[]).unwrap().is_none());
        let got = tls12_suites(&names(&[
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
            "TLS_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            got,
            vec![
                cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            ],
            "TLS 1.3 names are accepted but not listed; duplicates collapse"
        );
    }

    #[test]
    fn cis_list_keeps_what_rustls_has() {
        // The CIS benchmark's kubelet list: two static-RSA suites rustls lacks, skipped.
        let got = tls12_suites(&names(&[
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "TLS_RSA_WITH_AES_256_GCM_SHA384",
            "TLS_RSA_WITH_AES_128_GCM_SHA256",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(got.len(), 6);
    }

    #[test]
    fn bad_cipher_names_are_named_in_the_error() {
        let err = tls12_suites(&names(&["TLS_RSA_WITH_AES_128_CBC_SHA"]))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("TLS_RSA_WITH_AES_128_CBC_SHA"), "{err}");
        assert!(err.contains("rustls"), "{err}");
        let err = tls12_suites(&names(&["TLS_BOGUS"]))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(err, "Cipher suite TLS_BOGUS not supported or doesn't exist");
    }

    #[test]
    fn curves_by_go_id() {
        assert!(kx_groups(&[]).unwrap().is_none());
        assert_eq!(kx_groups(&[29, 23]).unwrap().unwrap().len(), 2);
        // P-521 is skipped; alone it leaves nothing to offer.
        assert_eq!(kx_groups(&[25, 23]).unwrap().unwrap().len(), 1);
        assert!(matches!(
            kx_groups(&[25]),
            Err(TlsError::UnsupportedCurve(_))
        ));
    }
}
