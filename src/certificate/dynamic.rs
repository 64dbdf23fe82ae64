//! The certificate the authenticated port serves, replaceable while the server runs: each
//! handshake asks for the current one, so new connections get a new certificate at once and
//! open ones keep theirs. Three owners replace it, as upstream's three serving certificate
//! sources do: nobody (the self-signed pair), the files `tlsCertFile`/`tlsPrivateKeyFile`
//! (re-read when they change, upstream's dynamic file manager) and the serving certificate
//! manager of `serverTLSBootstrap`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tracing::{info, warn};

use crate::pki;

/// How often, at most, a handshake looks at the files' modification times.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// Modification time and size of both files: a rewrite changes at least one of them.
type Stamp = [Option<(SystemTime, u64)>; 2];

struct Watched {
    cert: PathBuf,
    key: PathBuf,
    state: Mutex<(Stamp, Instant)>,
}

fn stamp(files: &Watched) -> Stamp {
    let one = |p: &PathBuf| {
        let meta = std::fs::metadata(p).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    };
    [one(&files.cert), one(&files.key)]
}

pub struct DynamicCert {
    current: RwLock<Option<Arc<CertifiedKey>>>,
    files: Option<Watched>,
}

impl std::fmt::Debug for DynamicCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicCert")
            .field("files", &self.files.as_ref().map(|w| (&w.cert, &w.key)))
            .finish()
    }
}

/// Why a certificate and key pair could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", cert.display())]
    Pair {
        cert: PathBuf,
        #[source]
        source: pki::PkiError,
    },
}

/// The pair in two PEM files, checked to belong together.
pub fn load_pair(cert: &std::path::Path, key: &std::path::Path) -> Result<CertifiedKey, PairError> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|source| PairError::Read {
            path: p.to_path_buf(),
            source,
        })
    };
    let (cert_pem, key_pem) = (read(cert)?, read(key)?);
    pki::certified_key_from_pem(
        &cert_pem,
        &key_pem,
        &rustls::crypto::ring::default_provider(),
    )
    .map_err(|source| PairError::Pair {
        cert: cert.to_path_buf(),
        source,
    })
}

impl DynamicCert {
    /// Serves `key` until someone sets another.
    pub fn fixed(key: Option<CertifiedKey>) -> Self {
        DynamicCert {
            current: RwLock::new(key.map(Arc::new)),
            files: None,
        }
    }

    /// Serves the pair in `cert`/`key` (which must load now) and follows later rewrites; a
    /// rewrite that does not load (half written, or a key that is not the certificate's)
    /// leaves the previous pair in service, as upstream does.
    pub fn watching(cert: PathBuf, key: PathBuf) -> Result<Self, PairError> {
        let mut watched = Watched {
            cert,
            key,
            state: Mutex::new(([None, None], Instant::now())),
        };
        let first_stamp = stamp(&watched);
        let loaded = load_pair(&watched.cert, &watched.key)?;
        watched.state = Mutex::new((first_stamp, Instant::now()));
        Ok(DynamicCert {
            current: RwLock::new(Some(Arc::new(loaded))),
            files: Some(watched),
        })
    }

    pub fn set(&self, key: CertifiedKey) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(key));
    }

    /// The certificate a handshake starting now gets.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        if let Some(files) = &self.files {
            self.reload_if_changed(files);
        }
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn reload_if_changed(&self, files: &Watched) {
        // A handshake that finds another one checking the files serves the current pair
        // rather than queueing behind that one's file I/O.
        let mut state = match files.state.try_lock() {
            Ok(state) => state,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        if state.1.elapsed() < RELOAD_CHECK {
            return;
        }
        state.1 = Instant::now();
        let now = stamp(files);
        if now == state.0 {
            return;
        }
        state.0 = now;
        match load_pair(&files.cert, &files.key) {
            Ok(key) => {
                info!(cert = %files.cert.display(), key = %files.key.display(), "Serving certificate files changed; reloaded");
                self.set(key);
            }
            Err(err) => {
                warn!(%err, "Serving certificate files changed but cannot be loaded; keeping the previous pair")
            }
        }
    }

    /// Forces the next handshake to look at the files, for tests.
    #[cfg(test)]
    fn expire_check(&self) {
        if let Some(files) = &self.files {
            files.state.lock().unwrap().1 = Instant::now() - RELOAD_CHECK;
        }
    }
}

impl ResolvesServerCert for DynamicCert {
    /// No certificate yet (serverTLSBootstrap before its first is issued) fails the
    /// handshake, as upstream's "no serving certificate available for the kubelet".
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::testing::{TestCa, pem_of};

    fn write_pair(dir: &std::path::Path, ca: &TestCa, v1: bool) -> Vec<u8> {
        let (der, key) = if v1 {
            ca.v1_leaf("node-a", None)
        } else {
            ca.v3_leaf("node-a", "node-a", false)
        };
        // Key first, then the certificate, as a careless renewal script might.
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
        std::fs::write(dir.join("tls.crt"), pem_of("CERTIFICATE", &der)).unwrap();
        der
    }

    fn served(d: &DynamicCert) -> Vec<u8> {
        d.current().unwrap().cert[0].to_vec()
    }

    #[test]
    fn changed_files_are_served_and_broken_ones_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::v3("ca");
        // A v1 serving certificate loads too (Go's LoadX509KeyPair takes it).
        let first = write_pair(dir.path(), &ca, true);
        let d =
            DynamicCert::watching(dir.path().join("tls.crt"), dir.path().join("tls.key")).unwrap();
        assert_eq!(served(&d), first);

        let second = write_pair(dir.path(), &ca, false);
        assert_eq!(served(&d), first, "looked at no more than once a second");
        d.expire_check();
        assert_eq!(served(&d), second);

        // A key that is not the certificate's keeps the previous pair.
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.path().join("tls.key"), other.serialize_pem()).unwrap();
        d.expire_check();
        assert_eq!(served(&d), second);
        // Once both files agree again, the new pair is taken.
        let third = write_pair(dir.path(), &ca, true);
        d.expire_check();
        assert_eq!(served(&d), third);
    }

    #[test]
    fn files_that_do_not_load_at_start_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(DynamicCert::watching(dir.path().join("a"), dir.path().join("b")).is_err());
        let empty = DynamicCert::fixed(None);
        assert!(empty.current().is_none());
    }
}
