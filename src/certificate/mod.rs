//! Kubelet client certificates: TLS bootstrap (a bootstrap token buys the first certificate
//! through a CertificateSigningRequest) and rotation (the current certificate buys the next one
//! before it expires), as upstream's pkg/kubelet/certificate.
//!
//! Rotation writes new files and repoints the `-current` symlink, then tells the kubelet's
//! client to reconnect: a kube::Client reads its certificate once, when built.

mod bootstrap;
pub mod dynamic;
pub mod serving;
pub mod store;

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::apiclient::{self, ApiClientError};
use crate::pki::{self, der};

pub const SIGNER_NAME: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Upstream requests these three for the kubelet's client certificate whatever the key type.
pub const USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];
/// How long to wait for the CSR to be approved and signed.
const CSR_WAIT: Duration = Duration::from_secs(15 * 60);
const CSR_POLL: Duration = Duration::from_secs(1);
/// Pause before retrying a failed rotation.
const ROTATION_RETRY: Duration = Duration::from_secs(60);

/// Why a client certificate could not be obtained or stored.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// Reading or writing a file failed.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A kubeconfig could not be read.
    #[error("reading kubeconfig {path}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// kube's reason.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// A kubeconfig lacks what bootstrap or rotation needs.
    #[error("kubeconfig {path}: {reason}")]
    BadKubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// What it lacks.
        reason: String,
    },
    /// No API client could be made.
    #[error(transparent)]
    Client(#[from] ApiClientError),
    /// Making the key or the certificate request failed.
    #[error("generating key or certificate request")]
    Generate(#[from] rcgen::Error),
    /// An API call failed.
    #[error("{what}")]
    Api {
        /// The call.
        what: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
    /// An API call ran past its deadline.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// The call.
        what: String,
        /// The deadline.
        after: Duration,
    },
    /// The CSR was denied or failed.
    #[error("certificate signing request {name} was {condition}: {reason}: {message}")]
    Refused {
        /// The CSR's name.
        name: String,
        /// Denied or Failed.
        condition: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// A CSR of the name ours derives from its key already exists but is not one this node's
    /// key asked for (another signer, other usages or subject, another key, or an expired
    /// certificate), so waiting on it would never give a usable pair.
    #[error("certificate signing request {name} exists but is not compatible: {reason}")]
    IncompatibleCsr {
        /// The CSR's name.
        name: String,
        /// What differs.
        reason: String,
    },
    /// The CSR was not signed in time.
    #[error("certificate signing request {name} not issued within {after:?}")]
    NotIssued {
        /// The CSR's name.
        name: String,
        /// How long was waited.
        after: Duration,
    },
    /// The issued certificate cannot be used.
    #[error("certificate {0}")]
    BadCertificate(String),
    /// The kubelet is shutting down.
    #[error("cancelled")]
    Cancelled,
}

/// How the kubelet reaches the API server: `--kubeconfig`, `--bootstrap-kubeconfig`,
/// `--cert-dir` and `rotateCertificates`.
#[derive(Clone, Debug)]
pub struct ClientSettings {
    pub kubeconfig: Option<PathBuf>,
    pub bootstrap_kubeconfig: Option<PathBuf>,
    pub cert_dir: PathBuf,
    pub node_name: String,
    pub rotate: bool,
    /// Bound on each API call of bootstrap and rotation.
    pub timeout: Duration,
}

impl From<&crate::config::Settings> for ClientSettings {
    fn from(settings: &crate::config::Settings) -> Self {
        ClientSettings {
            kubeconfig: settings.flags.kubeconfig.clone(),
            bootstrap_kubeconfig: settings.flags.bootstrap_kubeconfig.clone(),
            cert_dir: settings.flags.cert_dir.clone(),
            node_name: settings.node_name(),
            rotate: settings.config.rotate_certificates,
            timeout: settings.config.runtime_request_timeout.0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("client certificate")]
    Certificate(#[from] CertError),
    #[error(transparent)]
    Client(#[from] ApiClientError),
}

/// API server mode, decided as upstream does: TLS bootstrap first when a bootstrap kubeconfig
/// is given, then a client from `--kubeconfig` when that file exists. With
/// `rotateCertificates` the certificate store owns the client certificate (see
/// [`client_store_start`]) and keeps it rotated in `tasks`. `None` means standalone.
pub async fn connect(
    s: &ClientSettings,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) -> Result<Option<kube::Client>, ConnectError> {
    if let (Some(kubeconfig), Some(bootstrap)) = (&s.kubeconfig, &s.bootstrap_kubeconfig) {
        bootstrap_if_needed(
            kubeconfig,
            Some(bootstrap),
            &s.cert_dir,
            &s.node_name,
            s.timeout,
        )
        .await?;
    }
    let Some(kubeconfig) = s.kubeconfig.as_ref().filter(|k| k.exists()) else {
        return Ok(None);
    };
    if !s.rotate {
        let (client, _) =
            apiclient::reloadable(kubeconfig, s.timeout, &apiclient::Identity::Kubeconfig).await?;
        return Ok(Some(client));
    }
    let start = client_store_start(kubeconfig, &s.cert_dir, Timestamp::now())?;
    let (client, reloader) = apiclient::reloadable(kubeconfig, s.timeout, &start.identity).await?;
    tasks.background(
        "client certificate rotation",
        run_rotation(
            Rotation {
                kubeconfig: kubeconfig.clone(),
                cert_dir: s.cert_dir.clone(),
                node_name: s.node_name.clone(),
                timeout: s.timeout,
                current: start.cert,
                force: start.force,
            },
            reloader,
            cancel.child_token(),
        ),
    );
    Ok(Some(client))
}

/// How client rotation starts: which certificate the client presents and whether to replace
/// it at once.
#[derive(Debug, PartialEq)]
pub struct StoreStart {
    pub identity: apiclient::Identity,
    /// The certificate file whose validity schedules the next rotation, if any.
    pub cert: Option<PathBuf>,
    pub force: bool,
}

/// Upstream's client certificate manager start: the store's pair (`kubelet-client-current.pem`,
/// else the files the kubeconfig names, else `kubelet-client.crt`/`.key` in the directory)
/// while it has not expired. Otherwise a certificate embedded in the kubeconfig (what
/// `kubeadm init` writes into kubelet.conf) is written into the store and rotated at once,
/// "a higher powered certificate ... rotated out immediately"; with none, a certificate is
/// requested at once with the kubeconfig's credentials.
pub fn client_store_start(
    kubeconfig: &Path,
    cert_dir: &Path,
    now: Timestamp,
) -> Result<StoreStart, CertError> {
    let user = kubeconfig_user(kubeconfig)?;
    let named = user.files.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
    if let Some((cert, key)) = store::current_pair(cert_dir, store::CLIENT_PREFIX, named) {
        match std::fs::read(&cert) {
            Ok(pem) if certs_unexpired(&pem, now) => {
                return Ok(StoreStart {
                    identity: apiclient::Identity::Files {
                        cert: cert.clone(),
                        key,
                    },
                    cert: Some(cert),
                    force: false,
                });
            }
            _ => {
                warn!(cert = %cert.display(), "Client certificate in the store has expired or is unreadable")
            }
        }
    }
    if let Some((cert_pem, key_pem)) = user.embedded {
        let (cert_pem, key_pem) = (
            String::from_utf8_lossy(&cert_pem).into_owned(),
            String::from_utf8_lossy(&key_pem).into_owned(),
        );
        store::store_pair(cert_dir, &cert_pem, &key_pem, now)?;
        let current = store::current_path(cert_dir);
        info!(cert = %current.display(), "Stored the kubeconfig's embedded client certificate; rotating it now");
        return Ok(StoreStart {
            identity: apiclient::Identity::Files {
                cert: current.clone(),
                key: current.clone(),
            },
            cert: Some(current),
            force: true,
        });
    }
    Ok(StoreStart {
        identity: apiclient::Identity::Kubeconfig,
        cert: None,
        force: true,
    })
}

/// Makes sure `kubeconfig` holds a usable client certificate: when it is missing or its
/// certificate has expired, requests one with `bootstrap_kubeconfig`'s credentials, stores it in
/// `cert_dir` and writes `kubeconfig` to use it. Without a bootstrap kubeconfig nothing is done.
pub async fn bootstrap_if_needed(
    kubeconfig: &Path,
    bootstrap_kubeconfig: Option<&Path>,
    cert_dir: &Path,
    node_name: &str,
    timeout: Duration,
) -> Result<(), CertError> {
    let Some(bootstrap) = bootstrap_kubeconfig else {
        return Ok(());
    };
    if client_cert_still_valid(kubeconfig, Timestamp::now()) {
        debug!(path = %kubeconfig.display(), "kubeconfig is valid; no bootstrap needed");
        return Ok(());
    }
    info!(bootstrap = %bootstrap.display(), "Requesting a client certificate with the bootstrap kubeconfig");
    let kc =
        kube::config::Kubeconfig::read_from(bootstrap).map_err(|source| CertError::Kubeconfig {
            path: bootstrap.to_path_buf(),
            source,
        })?;
    let cluster = store::cluster_info(&kc, bootstrap)?;
    bootstrap_request_and_store(bootstrap, cert_dir, node_name, timeout).await?;
    // Like upstream, the kubeconfig names the symlink so rotations need not rewrite it.
    let pem = store::current_path(cert_dir);
    store::write_atomic(kubeconfig, &store::kubeconfig_yaml(&cluster, &pem))?;
    info!(kubeconfig = %kubeconfig.display(), cert = %pem.display(), "TLS bootstrap done");
    Ok(())
}

/// What client rotation works with.
#[derive(Debug)]
pub struct Rotation {
    /// Authenticates the certificate requests, as upstream's rotation uses the kubeconfig's
    /// credentials (for kubeadm's embedded certificate, that certificate).
    pub kubeconfig: PathBuf,
    pub cert_dir: PathBuf,
    pub node_name: String,
    pub timeout: Duration,
    /// The certificate in use, if any.
    pub current: Option<PathBuf>,
    /// Rotate at once rather than at 70-90 % of the lifetime.
    pub force: bool,
}

/// Renews the client certificate in `cert_dir` at a random 70-90 % of its lifetime (at once
/// when forced), until `cancel`. After each renewal the client presents the new pair.
pub async fn run_rotation(
    mut r: Rotation,
    client: crate::apiclient::Reloader,
    cancel: CancellationToken,
) {
    loop {
        let at = match (&r.current, r.force) {
            (Some(cert), false) => match read_validity(cert) {
                Ok((not_before, not_after)) => {
                    let at = rotation_deadline(not_before, not_after, jitter());
                    info!(%not_after, rotate_at = %at, "Client certificate rotation scheduled");
                    at
                }
                Err(err) => {
                    warn!(%err, path = %cert.display(), "Client certificate unreadable; rotation off");
                    return;
                }
            },
            _ => Timestamp::now(),
        };
        let wait = Timestamp::now()
            .duration_until(at)
            .try_into()
            .unwrap_or(Duration::ZERO);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        match rotate_once(&r.kubeconfig, &r.cert_dir, &r.node_name, r.timeout, &cancel).await {
            Ok(path) => {
                info!(cert = %path.display(), "Rotated the client certificate");
                let current = store::current_path(&r.cert_dir);
                r.current = Some(current.clone());
                r.force = false;
                // The certificate is already on disk; a failed reload is retried at the next
                // rotation, and the old certificate stays valid until then.
                let identity = crate::apiclient::Identity::Files {
                    cert: current.clone(),
                    key: current,
                };
                if let Err(err) = client.reload(&identity).await {
                    warn!(%err, "API client still uses the previous certificate");
                }
            }
            Err(CertError::Cancelled) => return,
            Err(err) => {
                warn!(%err, "Client certificate rotation failed; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(ROTATION_RETRY) => {}
                }
            }
        }
    }
}

/// Replaces the client certificate in `cert_dir` now, authenticating with the current one
/// through `kubeconfig`. Returns the new timestamped file.
pub async fn rotate_once(
    kubeconfig: &Path,
    cert_dir: &Path,
    node_name: &str,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<PathBuf, CertError> {
    request_and_store(kubeconfig, cert_dir, node_name, timeout, cancel).await
}

/// `not_before + fraction * lifetime`.
pub(crate) fn rotation_deadline(
    not_before: Timestamp,
    not_after: Timestamp,
    fraction: f64,
) -> Timestamp {
    let life = not_after.as_millisecond() - not_before.as_millisecond();
    let offset = (life.max(0) as f64 * fraction) as i64;
    Timestamp::from_millisecond(not_before.as_millisecond() + offset).unwrap_or(not_before)
}

/// A fraction in [0.7, 0.9), random enough to spread a fleet's renewals.
pub(crate) fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Timestamp::now().as_nanosecond() as u128);
    0.7 + 0.2 * (h.finish() % 10_000) as f64 / 10_000.0
}

/// The organization of every node certificate's subject.
const NODE_ORGANIZATION: &str = "system:nodes";

fn node_common_name(node_name: &str) -> String {
    format!("system:node:{node_name}")
}

/// A new ECDSA P-256 key and a PEM CSR for the node's client identity.
fn node_csr(node_name: &str) -> Result<(String, rcgen::KeyPair), CertError> {
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
fn node_csr_with(
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

/// TLS bootstrap's request, as upstream's: the key lives in the cert dir until the pair is
/// stored and the CSR's name follows from it, so a kubelet restarted while its CSR waits for
/// approval waits on that same CSR instead of making one an admin has not seen.
async fn bootstrap_request_and_store(
    bootstrap_kubeconfig: &Path,
    cert_dir: &Path,
    node_name: &str,
    timeout: Duration,
) -> Result<PathBuf, CertError> {
    let client = apiclient::connect(bootstrap_kubeconfig, timeout).await?;
    let key = bootstrap::load_or_generate_key(cert_dir)?;
    let csr_pem = node_csr_with(&key, node_name, &[], &[])?;
    let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
    let common_name = node_common_name(node_name);
    let name = bootstrap::digested_name(&spki, &common_name, &[NODE_ORGANIZATION], &USAGES);
    let request = CsrRequest {
        signer: SIGNER_NAME,
        usages: &USAGES,
        name: CsrName::Digested {
            name,
            spki: &spki,
            common_name: &common_name,
        },
        what: "client",
    };
    let cert_pem = request_certificate(
        client,
        &request,
        &csr_pem,
        timeout,
        &CancellationToken::new(),
    )
    .await?;
    let key_pem = key.serialize_pem();
    check_pair(&cert_pem, &key_pem)?;
    let stored = store::store_pair(cert_dir, &cert_pem, &key_pem, Timestamp::now())?;
    bootstrap::remove_key(cert_dir);
    Ok(stored)
}

/// Asks for a certificate with the credentials in `auth_kubeconfig`, waits for it, and stores it
/// with its key in `cert_dir`. Returns the timestamped file `-current` now points at.
async fn request_and_store(
    auth_kubeconfig: &Path,
    cert_dir: &Path,
    node_name: &str,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<PathBuf, CertError> {
    let client = apiclient::connect(auth_kubeconfig, timeout).await?;
    let (csr_pem, key) = node_csr(node_name)?;
    let request = CsrRequest {
        signer: SIGNER_NAME,
        usages: &USAGES,
        name: CsrName::Generate("node-csr-"),
        what: "client",
    };
    let cert_pem = request_certificate(client, &request, &csr_pem, timeout, cancel).await?;
    let key_pem = key.serialize_pem();
    check_pair(&cert_pem, &key_pem)?;
    store::store_pair(cert_dir, &cert_pem, &key_pem, Timestamp::now())
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

/// The validity window of the first certificate in PEM text.
fn first_validity(pem_text: &[u8]) -> Option<(Timestamp, Timestamp)> {
    pem::parse_many(pem_text)
        .ok()?
        .iter()
        .find(|p| p.tag() == "CERTIFICATE")
        .and_then(|p| der::validity(p.contents()))
}

fn read_validity(path: &Path) -> Result<(Timestamp, Timestamp), CertError> {
    let data = std::fs::read(path).map_err(|source| CertError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    first_validity(&data)
        .ok_or_else(|| CertError::BadCertificate(format!("in {} cannot be parsed", path.display())))
}

/// Whether `kubeconfig` exists and every client certificate it names is unexpired at `now`;
/// like upstream, anything unreadable counts as "needs bootstrap", not as an error.
fn client_cert_still_valid(kubeconfig: &Path, now: Timestamp) -> bool {
    if !kubeconfig.exists() {
        return false;
    }
    match client_cert_pem(kubeconfig) {
        Ok(pem_text) => certs_unexpired(&pem_text, now),
        Err(err) => {
            warn!(%err, "Existing kubeconfig is unusable; bootstrapping");
            false
        }
    }
}

fn certs_unexpired(pem_text: &[u8], now: Timestamp) -> bool {
    let Ok(blocks) = pem::parse_many(pem_text) else {
        return false;
    };
    let certs: Vec<_> = blocks
        .iter()
        .filter(|p| p.tag() == "CERTIFICATE")
        .map(|p| der::validity(p.contents()))
        .collect();
    !certs.is_empty()
        && certs
            .iter()
            .all(|v| v.is_some_and(|(_, not_after)| now <= not_after))
}

/// The client credentials of a kubeconfig's current user: the files it names, or the
/// certificate and key it embeds.
#[derive(Debug, Default)]
struct KubeconfigUser {
    files: Option<(PathBuf, PathBuf)>,
    embedded: Option<(Vec<u8>, Vec<u8>)>,
}

fn kubeconfig_user(kubeconfig: &Path) -> Result<KubeconfigUser, CertError> {
    use base64::Engine;
    use secrecy::ExposeSecret;
    let bad = |reason: &str| CertError::BadKubeconfig {
        path: kubeconfig.to_path_buf(),
        reason: reason.to_string(),
    };
    let auth = current_auth_info(kubeconfig)?;
    let decode = |what: &str, data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|_| bad(&format!("{what} is not base64")))
    };
    let mut user = KubeconfigUser::default();
    if let (Some(c), Some(k)) = (&auth.client_certificate_data, &auth.client_key_data) {
        user.embedded = Some((
            decode("client-certificate-data", c)?,
            decode("client-key-data", k.expose_secret())?,
        ));
    }
    if let (Some(c), Some(k)) = (&auth.client_certificate, &auth.client_key) {
        let base = kubeconfig.parent().unwrap_or(Path::new("."));
        user.files = Some((base.join(c), base.join(k)));
    }
    Ok(user)
}

/// The user of the current context of `kubeconfig`.
fn current_auth_info(kubeconfig: &Path) -> Result<kube::config::AuthInfo, CertError> {
    let bad = |reason: &str| CertError::BadKubeconfig {
        path: kubeconfig.to_path_buf(),
        reason: reason.to_string(),
    };
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|source| {
        CertError::Kubeconfig {
            path: kubeconfig.to_path_buf(),
            source,
        }
    })?;
    let ctx_name = kc
        .current_context
        .as_deref()
        .ok_or_else(|| bad("no current-context"))?;
    let user = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.as_deref())
        .ok_or_else(|| bad("current context has no user"))?;
    kc.auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.clone())
        .ok_or_else(|| bad("user not found"))
}

/// The client certificate PEM named by the current context of `kubeconfig`.
fn client_cert_pem(kubeconfig: &Path) -> Result<Vec<u8>, CertError> {
    let bad = |reason: &str| CertError::BadKubeconfig {
        path: kubeconfig.to_path_buf(),
        reason: reason.to_string(),
    };
    let auth = current_auth_info(kubeconfig)?;
    if let Some(data) = auth.client_certificate_data.as_deref() {
        use base64::Engine;
        return base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|_| bad("client-certificate-data is not base64"));
    }
    let file = auth
        .client_certificate
        .as_deref()
        .ok_or_else(|| bad("no client certificate"))?;
    let path = kubeconfig.parent().unwrap_or(Path::new(".")).join(file);
    std::fs::read(&path).map_err(|source| CertError::Io { path, source })
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
        let (csr, _) = der::read(der_bytes).unwrap();
        let parts = der::children(csr.body).unwrap();
        let info = der::children(parts[0].body).unwrap();
        let mut subject = vec![];
        for set in der::children(info[1].body).unwrap() {
            for atv in der::children(set.body).unwrap() {
                let kv = der::children(atv.body).unwrap();
                subject.push((
                    kv[0].body.to_vec(),
                    String::from_utf8(kv[1].body.to_vec()).unwrap(),
                ));
            }
        }
        let spki = der::children(info[2].body).unwrap();
        let alg = der::children(spki[0].body).unwrap();
        (subject, alg.iter().map(|t| t.body.to_vec()).collect())
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

    fn self_signed(not_before: Timestamp, not_after: Timestamp) -> String {
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

    #[test]
    fn kubeconfig_validity_follows_the_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("kubelet.conf");
        let now = Timestamp::now();
        assert!(!client_cert_still_valid(&kc, now), "missing file");

        let pem_path = dir.path().join("client.pem");
        let info = store::ClusterInfo {
            server: "https://127.0.0.1:1".into(),
            ca_file: None,
            ca_data: None,
            insecure: false,
        };
        store::write_atomic(&kc, &store::kubeconfig_yaml(&info, &pem_path)).unwrap();
        assert!(!client_cert_still_valid(&kc, now), "missing cert");

        let day = jiff::SignedDuration::from_hours(24);
        let good = self_signed(now - day * 2, now + day * 2);
        std::fs::write(&pem_path, good).unwrap();
        assert!(client_cert_still_valid(&kc, now));

        let expired = self_signed(now - day * 3, now - day * 2);
        std::fs::write(&pem_path, expired).unwrap();
        assert!(!client_cert_still_valid(&kc, now));
    }

    #[test]
    fn rotation_deadline_is_a_fraction_of_lifetime() {
        let nb: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let na: Timestamp = "2026-01-11T00:00:00Z".parse().unwrap();
        let at = rotation_deadline(nb, na, 0.8);
        assert_eq!(at, "2026-01-09T00:00:00Z".parse::<Timestamp>().unwrap());
        for _ in 0..100 {
            let j = jitter();
            assert!((0.7..0.9).contains(&j), "{j}");
        }
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

    fn embedded_kubeconfig(dir: &Path, cert_pem: &str, key_pem: &str) -> PathBuf {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let path = dir.join("kubelet.conf");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
                b64(cert_pem),
                b64(key_pem)
            ),
        )
        .unwrap();
        path
    }

    #[test]
    fn embedded_certificate_goes_to_the_store_and_is_rotated_at_once() {
        use pki::testing::{TestCa, pem_of};
        let dir = tempfile::tempdir().unwrap();
        let cert_dir = dir.path().join("pki");
        let ca = TestCa::v3("ca");
        // kubeadm's kubelet.conf: a v1 one here, as openssl makes them without -extfile.
        let (der, key) = ca.v1_leaf("system:node:n1", Some("system:nodes"));
        let cert_pem = pem_of("CERTIFICATE", &der);
        let kc = embedded_kubeconfig(dir.path(), &cert_pem, &key.serialize_pem());
        let start = client_store_start(&kc, &cert_dir, Timestamp::now()).unwrap();
        let current = store::current_path(&cert_dir);
        assert_eq!(
            start,
            StoreStart {
                identity: apiclient::Identity::Files {
                    cert: current.clone(),
                    key: current.clone(),
                },
                cert: Some(current.clone()),
                force: true,
            }
        );
        let stored = std::fs::read_to_string(&current).unwrap();
        assert!(stored.starts_with(&cert_pem), "{stored}");
        assert!(stored.contains("PRIVATE KEY"));
        let link = std::fs::read_link(&current).unwrap();
        assert!(link.to_string_lossy().starts_with("kubelet-client-2"));

        // Next start: the store's pair is used as it is, no forced rotation.
        let again = client_store_start(&kc, &cert_dir, Timestamp::now()).unwrap();
        assert!(!again.force);
        assert_eq!(again.cert, Some(current.clone()));
        // Once it has expired, the embedded one is stored again and rotated.
        let later = Timestamp::now() + jiff::SignedDuration::from_hours(24 * 3);
        assert!(client_store_start(&kc, &cert_dir, later).unwrap().force);
    }

    #[test]
    fn kubeconfig_files_are_used_until_the_store_has_a_pair() {
        let dir = tempfile::tempdir().unwrap();
        let cert_dir = dir.path().join("pki");
        let now = Timestamp::now();
        let day = jiff::SignedDuration::from_hours(24);
        let pem_path = dir.path().join("client.pem");
        std::fs::write(&pem_path, self_signed(now - day, now + day * 2)).unwrap();
        let info = store::ClusterInfo {
            server: "https://127.0.0.1:1".into(),
            ca_file: None,
            ca_data: None,
            insecure: false,
        };
        let kc = dir.path().join("kubelet.conf");
        store::write_atomic(&kc, &store::kubeconfig_yaml(&info, &pem_path)).unwrap();
        let start = client_store_start(&kc, &cert_dir, now).unwrap();
        assert_eq!(start.cert, Some(pem_path.clone()));
        assert!(!start.force);
        assert!(!store::current_path(&cert_dir).exists(), "nothing written");
        // A kubeconfig without any client certificate asks for one at once.
        let token_kc = dir.path().join("token.conf");
        std::fs::write(
            &token_kc,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\nusers:\n- name: u\n  user:\n    token: abc\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
        )
        .unwrap();
        let start = client_store_start(&token_kc, &dir.path().join("empty"), now).unwrap();
        assert_eq!(start.identity, apiclient::Identity::Kubeconfig);
        assert!(start.force);
    }
}
