//! Client certificate rotation: the loop that renews the certificate before it expires and
//! points the API client at each new pair.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::csr::{CsrName, CsrRequest, check_pair, node_csr, request_certificate};
use super::validity::read_validity;
use super::{CertError, SIGNER_NAME, USAGES, store};
use crate::apiclient;

/// Pause before retrying a failed rotation.
const ROTATION_RETRY: Duration = Duration::from_secs(60);

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
