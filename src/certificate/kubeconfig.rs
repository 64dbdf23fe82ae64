//! The client credentials a kubeconfig names or embeds, read the way bootstrap and the store
//! need them.

use std::path::{Path, PathBuf};

use jiff::Timestamp;
use tracing::warn;

use super::CertError;
use super::validity::certs_unexpired;

/// Whether `kubeconfig` exists and every client certificate it names is unexpired at `now`;
/// like upstream, anything unreadable counts as "needs bootstrap", not as an error.
pub(super) fn client_cert_still_valid(kubeconfig: &Path, now: Timestamp) -> bool {
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

/// The client credentials of a kubeconfig's current user: the files it names, or the
/// certificate and key it embeds.
#[derive(Debug, Default)]
pub(super) struct KubeconfigUser {
    pub(super) files: Option<(PathBuf, PathBuf)>,
    pub(super) embedded: Option<(Vec<u8>, Vec<u8>)>,
}

pub(super) fn kubeconfig_user(kubeconfig: &Path) -> Result<KubeconfigUser, CertError> {
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
    use crate::certificate::store;
    use crate::certificate::testing::self_signed;

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
}
