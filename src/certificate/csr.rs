//! Certificate signing requests: the node's key and request, and the API round trip that
//! creates the CSR and waits until it is approved and signed (or refused).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::validity::first_validity;
use super::{CertError, NODE_ORGANIZATION, bootstrap};
use crate::pki;

/// How long to wait for the CSR to be approved and signed.
const CSR_WAIT: Duration = Duration::from_secs(15 * 60);
const CSR_POLL: Duration = Duration::from_secs(1);

pub(super) fn node_common_name(node_name: &str) -> String {
    format!("system:node:{node_name}")
}

/// A new ECDSA P-256 key and a PEM CSR for the node's client identity.
pub(super) fn node_csr(node_name: &str) -> Result<(String, rcgen::KeyPair), CertError> {
    node_csr_for(node_name, &[], &[])
}

/// A new ECDSA P-256 key and a PEM CSR naming the node, with these subject alternative names
/// (a serving certificate's).
pub(crate) fn node_csr_for(
    node_name: &str,
    dns_names: &[String],
    ips: &[std::net::IpAddr],
) -> Result<(String, rcgen::KeyPair), CertError> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let csr = node_csr_with(&key, node_name, dns_names, ips)?;
    Ok((csr, key))
}

/// A PEM CSR naming the node, signed with `key`.
pub(super) fn node_csr_with(
    key: &rcgen::KeyPair,
    node_name: &str,
    dns_names: &[String],
    ips: &[std::net::IpAddr],
) -> Result<String, CertError> {
    let mut params = rcgen::CertificateParams::default();
    for name in dns_names {
        let name = name
            .clone()
            .try_into()
            .map_err(|_| CertError::BadCertificate(format!("name {name:?} is not a DNS name")))?;
        params.subject_alt_names.push(rcgen::SanType::DnsName(name));
    }
    params
        .subject_alt_names
        .extend(ips.iter().map(|ip| rcgen::SanType::IpAddress(*ip)));
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, NODE_ORGANIZATION);
    dn.push(rcgen::DnType::CommonName, node_common_name(node_name));
    params.distinguished_name = dn;
    Ok(params.serialize_request(key)?.pem()?)
}

/// An issued certificate must load with our key before it becomes the store's current pair:
/// a pair that does not would stop the next start.
pub(crate) fn check_pair(cert_pem: &str, key_pem: &str) -> Result<(), CertError> {
    pki::certified_key_from_pem(
        cert_pem.as_bytes(),
        key_pem.as_bytes(),
        &rustls::crypto::ring::default_provider(),
    )
    .map(drop)
    .map_err(|e| CertError::BadCertificate(format!("the issued certificate: {e}")))
}

/// What a certificate signing request asks for.
pub(crate) struct CsrRequest<'a> {
    pub signer: &'a str,
    pub usages: &'a [&'a str],
    pub name: CsrName<'a>,
    /// For log lines: "client", "serving".
    pub what: &'a str,
}

/// How a CSR is named.
pub(crate) enum CsrName<'a> {
    /// A new name from this prefix each time (`metadata.generateName`).
    Generate(&'a str),
    /// A name derived from the key, subject and usages: a CSR already under that name is one
    /// an earlier run made with the same key, and is waited on when it still fits.
    Digested {
        name: String,
        /// Our public key, DER SubjectPublicKeyInfo.
        spki: &'a [u8],
        common_name: &'a str,
    },
}

/// Creates a CSR for `csr_pem` and waits for its certificate (PEM text, checked to parse).
pub(crate) async fn request_certificate(
    client: kube::Client,
    request: &CsrRequest<'_>,
    csr_pem: &str,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<String, CertError> {
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let name = create_csr(&api, request, csr_pem, timeout).await?;
    info!(csr = %name, signer = request.signer, "Waiting for the {} certificate to be issued", request.what);
    let cert = wait_for_certificate(&api, &name, timeout, cancel).await?;
    let cert_pem = String::from_utf8(cert)
        .map_err(|_| CertError::BadCertificate(format!("from {name} is not PEM text")))?;
    first_validity(cert_pem.as_bytes())
        .ok_or_else(|| CertError::BadCertificate(format!("from {name} cannot be parsed")))?;
    Ok(cert_pem)
}

async fn bounded<T>(
    what: &str,
    timeout: Duration,
    fut: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, CertError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r.map_err(|source| CertError::Api {
            what: what.to_string(),
            source,
        }),
        Err(_) => Err(CertError::Timeout {
            what: what.to_string(),
            after: timeout,
        }),
    }
}

async fn create_csr(
    api: &Api<CertificateSigningRequest>,
    request: &CsrRequest<'_>,
    csr_pem: &str,
    timeout: Duration,
) -> Result<String, CertError> {
    let metadata = match &request.name {
        CsrName::Generate(prefix) => ObjectMeta {
            generate_name: Some(prefix.to_string()),
            ..Default::default()
        },
        CsrName::Digested { name, .. } => ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
    };
    let obj = CertificateSigningRequest {
        metadata,
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: request.signer.into(),
            usages: Some(request.usages.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    let created = bounded(
        "creating certificate signing request",
        timeout,
        api.create(&PostParams::default(), &obj),
    )
    .await;
    match (created, &request.name) {
        (Ok(created), _) => created
            .metadata
            .name
            .ok_or_else(|| CertError::BadCertificate("request created without a name".into())),
        (
            Err(CertError::Api {
                source: kube::Error::Api(status),
                ..
            }),
            CsrName::Digested {
                name,
                spki,
                common_name,
            },
        ) if status.code == 409 && status.reason == "AlreadyExists" => {
            info!(csr = %name, "A certificate signing request for this key already exists; reusing it");
            let existing = bounded(
                "reading the existing certificate signing request",
                timeout,
                api.get(name),
            )
            .await?;
            let expected = bootstrap::Expected {
                signer: request.signer,
                usages: request.usages,
                spki,
                common_name,
                organization: NODE_ORGANIZATION,
            };
            bootstrap::ensure_compatible(&existing, &expected, Timestamp::now()).map_err(
                |reason| CertError::IncompatibleCsr {
                    name: name.clone(),
                    reason,
                },
            )?;
            Ok(name.clone())
        }
        (Err(err), _) => Err(err),
    }
}

/// What a CSR's status says so far.
#[derive(Debug, PartialEq)]
enum CsrState {
    Pending,
    Issued(Vec<u8>),
    Refused {
        condition: String,
        reason: String,
        message: String,
    },
}

fn csr_state(csr: &CertificateSigningRequest) -> CsrState {
    let Some(status) = &csr.status else {
        return CsrState::Pending;
    };
    let conditions = status.conditions.as_deref().unwrap_or_default();
    if let Some(c) = conditions
        .iter()
        .find(|c| (c.type_ == "Denied" || c.type_ == "Failed") && c.status != "False")
    {
        return CsrState::Refused {
            condition: c.type_.clone(),
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        };
    }
    let approved = conditions
        .iter()
        .any(|c| c.type_ == "Approved" && c.status != "False");
    match &status.certificate {
        Some(cert) if approved && !cert.0.is_empty() => CsrState::Issued(cert.0.clone()),
        _ => CsrState::Pending,
    }
}

async fn wait_for_certificate(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, CertError> {
    let deadline = tokio::time::Instant::now() + CSR_WAIT;
    loop {
        match bounded(
            "reading certificate signing request",
            timeout,
            api.get(name),
        )
        .await
        {
            Ok(csr) => match csr_state(&csr) {
                CsrState::Issued(cert) => return Ok(cert),
                CsrState::Refused {
                    condition,
                    reason,
                    message,
                } => {
                    return Err(CertError::Refused {
                        name: name.to_string(),
                        condition,
                        reason,
                        message,
                    });
                }
                CsrState::Pending => {}
            },
            // Transient errors: the API server may be restarting; keep trying until the deadline.
            Err(err) => debug!(%err, csr = name, "Polling certificate signing request"),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CertError::NotIssued {
                name: name.to_string(),
                after: CSR_WAIT,
            });
        }
        tokio::select! {
            _ = cancel.cancelled() => return Err(CertError::Cancelled),
            _ = tokio::time::sleep(CSR_POLL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };

    const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
    const OID_O: &[u8] = &[0x55, 0x04, 0x0a];

    type Attribute = (Vec<u8>, String);

    /// Subject attributes (OID, value) and the key algorithm OIDs of a DER CSR.
    fn parse_csr(der_bytes: &[u8]) -> (Vec<Attribute>, Vec<Vec<u8>>) {
        use x509_parser::certification_request::X509CertificationRequest;
        use x509_parser::prelude::FromDer;
        let (_, csr) = X509CertificationRequest::from_der(der_bytes).unwrap();
        let info = &csr.certification_request_info;
        let subject = info
            .subject
            .iter_attributes()
            .map(|atv| {
                let value = String::from_utf8(atv.attr_value().data.to_vec()).unwrap();
                (atv.attr_type().as_bytes().to_vec(), value)
            })
            .collect();
        let alg = &info.subject_pki.algorithm;
        let curve = alg.parameters.as_ref().unwrap().as_oid().unwrap();
        let oids = [alg.algorithm.as_bytes().to_vec(), curve.as_bytes().to_vec()];
        (subject, oids.to_vec())
    }

    #[test]
    fn csr_names_the_node_with_a_p256_key() {
        let (pem_text, key) = node_csr("n1").unwrap();
        let block = pem::parse(&pem_text).unwrap();
        assert_eq!(block.tag(), "CERTIFICATE REQUEST");
        let (subject, alg) = parse_csr(block.contents());
        assert!(subject.contains(&(OID_CN.to_vec(), "system:node:n1".to_string())));
        assert!(subject.contains(&(OID_O.to_vec(), "system:nodes".to_string())));
        assert_eq!(subject.len(), 2);
        assert_eq!(alg, vec![OID_EC_PUBLIC_KEY.to_vec(), OID_P256.to_vec()]);
        assert!(key.serialize_pem().contains("PRIVATE KEY"));
    }

    fn csr_with(conditions: Vec<(&str, &str)>, cert: Option<&[u8]>) -> CertificateSigningRequest {
        CertificateSigningRequest {
            status: Some(CertificateSigningRequestStatus {
                certificate: cert.map(|c| ByteString(c.to_vec())),
                conditions: Some(
                    conditions
                        .into_iter()
                        .map(|(t, reason)| CertificateSigningRequestCondition {
                            type_: t.into(),
                            status: "True".into(),
                            reason: Some(reason.into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn csr_state_needs_approval_and_certificate() {
        assert_eq!(
            csr_state(&CertificateSigningRequest::default()),
            CsrState::Pending
        );
        assert_eq!(
            csr_state(&csr_with(vec![("Approved", "A")], None)),
            CsrState::Pending
        );
        assert_eq!(csr_state(&csr_with(vec![], Some(b"C"))), CsrState::Pending);
        assert_eq!(
            csr_state(&csr_with(vec![("Approved", "A")], Some(b"C"))),
            CsrState::Issued(b"C".to_vec())
        );
        assert!(matches!(
            csr_state(&csr_with(vec![("Denied", "Nope")], None)),
            CsrState::Refused { condition, reason, .. } if condition == "Denied" && reason == "Nope"
        ));
    }
}
