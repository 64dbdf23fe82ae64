//! How the kubelet gets its API client at start: TLS bootstrap when its kubeconfig has no
//! usable certificate, then the client whose certificate rotation keeps current.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::csr::{
    CsrName, CsrRequest, check_pair, node_common_name, node_csr_with, request_certificate,
};
use super::kubeconfig::{client_cert_still_valid, kubeconfig_user};
use super::rotation::{Rotation, run_rotation};
use super::{CertError, NODE_ORGANIZATION, SIGNER_NAME, USAGES, bootstrap, certs_unexpired, store};
use crate::apiclient::{self, ApiClientError};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::testing::self_signed;
    use crate::pki;
    use std::path::PathBuf;

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
