//! The serving certificate of `serverTLSBootstrap`, as upstream's serving certificate manager
//! keeps it: requested through a CSR with signer `kubernetes.io/kubelet-serving` for the
//! addresses the node last reported, stored as `kubelet-server-current.pem`, served on the
//! authenticated port as soon as it is issued and renewed at 70-90 % of its lifetime, or at
//! once when the node's addresses no longer match it. Until the first one is issued nothing is
//! served: handshakes fail, as upstream's do.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeAddress;
use rustls::sign::CertifiedKey;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{CertError, CsrName, CsrRequest, jitter, rotation_deadline, store};
use crate::certificate::dynamic::DynamicCert;
use crate::certificate::dynamic::load_pair;

pub const SIGNER_NAME: &str = "kubernetes.io/kubelet-serving";
/// Upstream v1.20 asks for these three whatever the key type; signers and approvers of that
/// era accept only exactly these.
pub const USAGES: [&str; 3] = ["digital signature", "key encipherment", "server auth"];
/// First pause after a failed request; doubled up to [`MAX_RETRY`], as upstream backs off.
const FIRST_RETRY: Duration = Duration::from_secs(2);
const MAX_RETRY: Duration = Duration::from_secs(32);

/// What the rotation needs to know of a serving certificate.
#[derive(Debug, PartialEq)]
struct Leaf {
    not_before: Timestamp,
    not_after: Timestamp,
    common_name: String,
    dns_names: Vec<String>,
    ips: Vec<IpAddr>,
}

fn leaf(cert: &[u8]) -> Option<Leaf> {
    use x509_parser::extensions::GeneralName;
    let (_, c) = x509_parser::parse_x509_certificate(cert).ok()?;
    let (not_before, not_after) = crate::pki::validity_of(&c)?;
    let mut dns_names = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = c.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => dns_names.push(d.to_string()),
                GeneralName::IPAddress(b) => match b.len() {
                    4 => ips.push(IpAddr::from(<[u8; 4]>::try_from(*b).ok()?)),
                    16 => ips.push(IpAddr::from(<[u8; 16]>::try_from(*b).ok()?)),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    dns_names.sort();
    ips.sort_by_key(|ip| ip.to_string());
    let common_name = c
        .subject()
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .unwrap_or_default()
        .to_string();
    Some(Leaf {
        not_before,
        not_after,
        common_name,
        dns_names,
        ips,
    })
}

/// The names a serving certificate is requested for, from the node's addresses as upstream
/// reads them: Hostname (as an IP when it parses as one), InternalDNS and ExternalDNS give DNS
/// names, InternalIP and ExternalIP give IPs; each once, sorted.
pub fn names_for(addresses: &[NodeAddress]) -> (Vec<String>, Vec<IpAddr>) {
    let mut dns = std::collections::BTreeSet::new();
    let mut ips = std::collections::BTreeMap::new();
    for a in addresses.iter().filter(|a| !a.address.is_empty()) {
        let ip = a.address.parse::<IpAddr>().ok();
        match (a.type_.as_str(), ip) {
            ("Hostname", Some(ip)) | ("InternalIP" | "ExternalIP", Some(ip)) => {
                ips.insert(ip.to_string(), ip);
            }
            ("Hostname" | "InternalDNS" | "ExternalDNS", _) => {
                dns.insert(a.address.clone());
            }
            _ => {}
        }
    }
    (dns.into_iter().collect(), ips.into_values().collect())
}

/// The pair to serve at start: the store's (`kubelet-server-current.pem`, else
/// `tlsCertFile`/`tlsPrivateKeyFile`, else `kubelet-server.crt`/`.key`) while it loads and
/// has not expired.
pub fn initial_pair(cert_dir: &Path, cert_file: &str, key_file: &str) -> Option<CertifiedKey> {
    let named = (!cert_file.is_empty() && !key_file.is_empty())
        .then(|| (Path::new(cert_file), Path::new(key_file)));
    let (cert, key) = store::current_pair(cert_dir, store::SERVER_PREFIX, named)?;
    match load_pair(&cert, &key) {
        Ok(pair) => {
            let expired = pair
                .cert
                .first()
                .and_then(|c| crate::pki::validity(c))
                .is_none_or(|(_, until)| until < Timestamp::now());
            if expired {
                warn!(cert = %cert.display(), "Serving certificate in the store has expired; requesting a new one");
                return None;
            }
            info!(cert = %cert.display(), "Serving certificate from the store");
            Some(pair)
        }
        Err(err) => {
            warn!(%err, "Serving certificate in the store cannot be loaded; requesting a new one");
            None
        }
    }
}

/// What the serving rotation works with.
pub struct ServingRotation {
    pub client: kube::Client,
    pub cert_dir: PathBuf,
    pub node_name: String,
    /// Bound on each API call.
    pub timeout: Duration,
    /// What the authenticated port serves.
    pub cert: Arc<DynamicCert>,
    /// The node's addresses as last reported in its status.
    pub addresses: watch::Receiver<Vec<NodeAddress>>,
}

fn record_expiry(cert: Option<&Leaf>) {
    let value = cert.map(|l| l.not_after.as_second() as f64);
    *crate::metrics::kubelet()
        .server_cert_not_after
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(value);
}

/// The serving certificate manager's part of the kubelet configuration.
pub struct ServingSettings {
    /// `serverTLSBootstrap`: without it the manager does not run.
    pub enabled: bool,
    pub cert_dir: PathBuf,
    /// Bound on each API call (`runtimeRequestTimeout`).
    pub timeout: Duration,
}

impl From<&crate::config::Settings> for ServingSettings {
    fn from(settings: &crate::config::Settings) -> Self {
        ServingSettings {
            enabled: settings.config.server_tls_bootstrap,
            cert_dir: settings.flags.cert_dir.clone(),
            timeout: settings.config.runtime_request_timeout.0,
        }
    }
}

/// Starts the serving certificate manager when it is enabled and the authenticated port serves
/// a certificate it may replace. Upstream starts it only with an API client, as here.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    settings: ServingSettings,
    client: kube::Client,
    node_name: String,
    cert: Option<Arc<DynamicCert>>,
    addresses: watch::Receiver<Vec<NodeAddress>>,
    tasks: &mut crate::tasks::Tasks,
    cancel: &CancellationToken,
) {
    let Some(cert) = cert.filter(|_| settings.enabled) else {
        return;
    };
    let rotation = ServingRotation {
        client,
        cert_dir: settings.cert_dir,
        node_name,
        timeout: settings.timeout,
        cert,
        addresses,
    };
    tasks.background(
        "serving certificate rotation",
        run(rotation, cancel.child_token()),
    );
}

/// Keeps the serving certificate issued and current until `cancel`.
pub async fn run(mut r: ServingRotation, cancel: CancellationToken) {
    let cn = format!("system:node:{}", r.node_name);
    let mut retry = FIRST_RETRY;
    loop {
        let current = r.cert.current().and_then(|c| leaf(c.cert.first()?));
        record_expiry(current.as_ref());
        let (dns, ips) = names_for(&r.addresses.borrow_and_update());
        // Like upstream, no request before the node has reported an IP to put in it.
        if ips.is_empty() {
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = r.addresses.changed() => if changed.is_err() { return },
            }
            continue;
        }
        let fits = |l: &Leaf| l.common_name == cn && l.dns_names == dns && l.ips == ips;
        let at = match &current {
            Some(l) if fits(l) => rotation_deadline(l.not_before, l.not_after, jitter()),
            Some(_) => {
                info!(
                    ?dns,
                    ?ips,
                    "Serving certificate does not name the node's addresses; requesting a new one"
                );
                Timestamp::now()
            }
            None => Timestamp::now(),
        };
        let wait = Timestamp::now()
            .duration_until(at)
            .try_into()
            .unwrap_or(Duration::ZERO);
        if !wait.is_zero() {
            info!(rotate_at = %at, "Serving certificate rotation scheduled");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
            // New addresses: look again whether the certificate still fits.
            changed = r.addresses.changed() => {
                if changed.is_err() { return }
                continue;
            }
        }
        let issued = request(&r, &dns, &ips, &cancel).await;
        // A signer that leaves out a name would otherwise have us ask again at once, forever.
        let issued_fits = r
            .cert
            .current()
            .and_then(|c| leaf(c.cert.first()?))
            .is_some_and(|l| fits(&l));
        match issued {
            Ok(path) if issued_fits => {
                info!(cert = %path.display(), "Serving certificate issued; serving it");
                retry = FIRST_RETRY;
            }
            Err(CertError::Cancelled) => return,
            outcome => {
                let err = match outcome {
                    Err(err) => err.to_string(),
                    Ok(_) => "the issued certificate does not name the node's addresses".into(),
                };
                warn!(%err, retry_in = ?retry, "Requesting a serving certificate failed");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(MAX_RETRY);
            }
        }
    }
}

/// One CSR for `dns`/`ips`; the issued pair is stored and served.
async fn request(
    r: &ServingRotation,
    dns: &[String],
    ips: &[IpAddr],
    cancel: &CancellationToken,
) -> Result<PathBuf, CertError> {
    let (csr_pem, key) = super::node_csr_for(&r.node_name, dns, ips)?;
    let request = CsrRequest {
        signer: SIGNER_NAME,
        usages: &USAGES,
        name: CsrName::Generate("csr-"),
        what: "serving",
    };
    let cert_pem =
        super::request_certificate(r.client.clone(), &request, &csr_pem, r.timeout, cancel).await?;
    let key_pem = key.serialize_pem();
    super::check_pair(&cert_pem, &key_pem)?;
    let file = store::store_pair_for(
        &r.cert_dir,
        store::SERVER_PREFIX,
        &cert_pem,
        &key_pem,
        Timestamp::now(),
    )?;
    let pair = load_pair(&file, &file).map_err(|e| CertError::BadCertificate(e.to_string()))?;
    r.cert.set(pair);
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::testing::{TestCa, pem_of};

    fn addr(t: &str, a: &str) -> NodeAddress {
        NodeAddress {
            type_: t.into(),
            address: a.into(),
        }
    }

    #[test]
    fn names_come_from_the_node_addresses_like_upstream() {
        let (dns, ips) = names_for(&[
            addr("InternalIP", "10.0.0.5"),
            addr("Hostname", "node-a"),
            addr("ExternalDNS", "node-a.example.com"),
            addr("InternalIP", "10.0.0.5"),
            addr("ExternalIP", "fd00::1"),
            addr("InternalDNS", ""),
            addr("Hostname", "192.168.1.1"),
            addr("InternalIP", "not-an-ip"),
        ]);
        assert_eq!(dns, ["node-a", "node-a.example.com"]);
        let ips: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
        assert_eq!(ips, ["10.0.0.5", "192.168.1.1", "fd00::1"]);
        assert_eq!(names_for(&[addr("Hostname", "n")]).1, Vec::<IpAddr>::new());
    }

    #[test]
    fn csr_carries_the_names_and_the_leaf_reader_reads_them_back() {
        let ips: Vec<IpAddr> = vec!["10.0.0.5".parse().unwrap()];
        let (csr, _) = super::super::node_csr_for("n1", &["n1".into()], &ips).unwrap();
        let block = pem::parse(csr).unwrap();
        use x509_parser::prelude::FromDer;
        let (_, req) = x509_parser::certification_request::X509CertificationRequest::from_der(
            block.contents(),
        )
        .unwrap();
        let info = &req.certification_request_info;
        let cn = info
            .subject
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap();
        assert_eq!(cn, "system:node:n1");
        // A certificate for those names reads back as the rotation compares them.
        let ca = TestCa::v3("ca");
        let (der, _) = ca.v3_leaf("system:node:n1", "10.0.0.5", false);
        let l = leaf(&der).unwrap();
        assert_eq!(l.ips, ips);
        assert_eq!(l.common_name, "system:node:n1");
        assert!(l.not_before < l.not_after);
    }

    #[test]
    fn store_pair_is_preferred_and_expired_pairs_are_not_served() {
        let dir = tempfile::tempdir().unwrap();
        assert!(initial_pair(dir.path(), "", "").is_none());
        let ca = TestCa::v3("ca");
        let (der, key) = ca.v3_leaf("system:node:n1", "10.0.0.5", false);
        store::store_pair_for(
            dir.path(),
            store::SERVER_PREFIX,
            &pem_of("CERTIFICATE", &der),
            &key.serialize_pem(),
            Timestamp::now(),
        )
        .unwrap();
        let pair = initial_pair(dir.path(), "/nonexistent", "/nonexistent").unwrap();
        assert_eq!(pair.cert[0].as_ref(), der.as_slice());
        let now = crate::pki::testing::now();
        let (old, old_key) = ca.v1_leaf_valid("x", None, now - 100, now - 10);
        let old_path = dir.path().join("kubelet-server-current.pem");
        std::fs::remove_file(&old_path).unwrap();
        std::fs::write(
            &old_path,
            format!("{}{}", pem_of("CERTIFICATE", &old), old_key.serialize_pem()),
        )
        .unwrap();
        assert!(initial_pair(dir.path(), "", "").is_none());
    }
}
