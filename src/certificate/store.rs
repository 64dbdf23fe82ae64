//! The kubelet's client certificate files in --cert-dir and the kubeconfig that points at them,
//! named as upstream names them so an existing node's files are found and reused.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use jiff::Timestamp;

use super::CertError;

pub const CLIENT_PREFIX: &str = "kubelet-client";
pub const SERVER_PREFIX: &str = "kubelet-server";
pub const CURRENT_FILE: &str = "kubelet-client-current.pem";

pub fn current_path(cert_dir: &Path) -> PathBuf {
    cert_dir.join(CURRENT_FILE)
}

/// `<prefix>-current.pem`, the link to the pair in use.
pub fn current_path_for(cert_dir: &Path, prefix: &str) -> PathBuf {
    cert_dir.join(format!("{prefix}-current.pem"))
}

/// Where a store finds its pair, in upstream's order: the `-current.pem` link, then the
/// files named elsewhere (the kubeconfig's, or tlsCertFile/tlsPrivateKeyFile), then
/// `<prefix>.crt`/`<prefix>.key` in the directory. The first whose files exist wins.
pub fn current_pair(
    cert_dir: &Path,
    prefix: &str,
    named: Option<(&Path, &Path)>,
) -> Option<(PathBuf, PathBuf)> {
    let current = current_path_for(cert_dir, prefix);
    if current.exists() {
        return Some((current.clone(), current));
    }
    let named = named.map(|(c, k)| (c.to_path_buf(), k.to_path_buf()));
    let in_dir = (
        cert_dir.join(format!("{prefix}.crt")),
        cert_dir.join(format!("{prefix}.key")),
    );
    named
        .into_iter()
        .chain(std::iter::once(in_dir))
        .find(|(c, k)| c.exists() && k.exists())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CertError + '_ {
    move |source| CertError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes cert and key into a new timestamped file (0600, it holds the private key) and then
/// repoints the `-current` symlink at it in one rename, so readers never see a missing link.
pub fn store_pair(
    cert_dir: &Path,
    cert_pem: &str,
    key_pem: &str,
    now: Timestamp,
) -> Result<PathBuf, CertError> {
    store_pair_for(cert_dir, CLIENT_PREFIX, cert_pem, key_pem, now)
}

/// [`store_pair`] for the store named `prefix` (`kubelet-client`, `kubelet-server`).
pub fn store_pair_for(
    cert_dir: &Path,
    prefix: &str,
    cert_pem: &str,
    key_pem: &str,
    now: Timestamp,
) -> Result<PathBuf, CertError> {
    std::fs::create_dir_all(cert_dir).map_err(io(cert_dir))?;
    let stamp = now.strftime("%Y-%m-%d-%H-%M-%S").to_string();
    let name = format!("{prefix}-{stamp}.pem");
    let file = cert_dir.join(&name);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&file)
        .map_err(io(&file))?;
    let mut body = String::with_capacity(cert_pem.len() + key_pem.len() + 1);
    body.push_str(cert_pem);
    if !body.ends_with('\n') {
        body.push('\n');
    }
    body.push_str(key_pem);
    out.write_all(body.as_bytes()).map_err(io(&file))?;
    out.sync_all().map_err(io(&file))?;

    // A relative target keeps the link valid if the directory is moved or bind-mounted.
    let current = current_path_for(cert_dir, prefix);
    let tmp = cert_dir.join(format!(".{prefix}-current.pem.tmp"));
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&tmp)(e)),
        _ => {}
    }
    std::os::unix::fs::symlink(&name, &tmp).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &current).map_err(io(&current))?;
    Ok(file)
}

/// Where the new kubeconfig sends the kubelet: the bootstrap kubeconfig's server and CA.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterInfo {
    pub server: String,
    pub ca_file: Option<PathBuf>,
    pub ca_data: Option<String>,
    pub insecure: bool,
}

/// The cluster of `kc`'s current context. Relative CA paths are made absolute against the
/// kubeconfig's folder, since the written kubeconfig may live elsewhere.
pub fn cluster_info(
    kc: &kube::config::Kubeconfig,
    kc_path: &Path,
) -> Result<ClusterInfo, CertError> {
    let bad = |reason: String| CertError::BadKubeconfig {
        path: kc_path.to_path_buf(),
        reason,
    };
    let ctx_name = kc
        .current_context
        .as_deref()
        .ok_or_else(|| bad("no current-context".into()))?;
    let ctx = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| bad(format!("context {ctx_name:?} not found")))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| bad(format!("cluster {:?} not found", ctx.cluster)))?;
    let server = cluster
        .server
        .clone()
        .ok_or_else(|| bad(format!("cluster {:?} has no server", ctx.cluster)))?;
    let base = kc_path.parent().unwrap_or(Path::new("."));
    Ok(ClusterInfo {
        server,
        ca_file: cluster
            .certificate_authority
            .as_ref()
            .filter(|p| !p.is_empty())
            .map(|p| base.join(p)),
        ca_data: cluster
            .certificate_authority_data
            .clone()
            .filter(|d| !d.is_empty()),
        insecure: cluster.insecure_skip_tls_verify.unwrap_or(false),
    })
}

/// A kubeconfig using the client certificate in `pem` (cert and key in one file), with
/// upstream's stanza names.
pub fn kubeconfig_yaml(cluster: &ClusterInfo, pem: &Path) -> String {
    let mut c = serde_json::Map::new();
    c.insert("server".into(), cluster.server.clone().into());
    if let Some(f) = &cluster.ca_file {
        c.insert(
            "certificate-authority".into(),
            f.display().to_string().into(),
        );
    } else if let Some(d) = &cluster.ca_data {
        c.insert("certificate-authority-data".into(), d.clone().into());
    }
    if cluster.insecure {
        c.insert("insecure-skip-tls-verify".into(), true.into());
    }
    let pem = pem.display().to_string();
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": c}],
        "users": [{"name": "default-auth", "user": {
            "client-certificate": pem, "client-key": pem}}],
        "contexts": [{"name": "default-context", "context": {
            "cluster": "default-cluster", "user": "default-auth", "namespace": "default"}}],
        "current-context": "default-context",
    });
    crate::yaml::to_string(&doc).unwrap_or_default()
}

/// Writes `body` to `path` through a temporary file and a rename, mode 0600.
pub fn write_atomic(path: &Path, body: &str) -> Result<(), CertError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    out.write_all(body.as_bytes()).map_err(io(&tmp))?;
    out.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn stores_pair_and_repoints_link() {
        let dir = tempfile::tempdir().unwrap();
        let t1: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        let first = store_pair(dir.path(), "CERT1\n", "KEY1\n", t1).unwrap();
        assert_eq!(
            first.file_name().unwrap(),
            "kubelet-client-2026-01-02-03-04-05.pem"
        );
        let mode = std::fs::metadata(&first).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&first).unwrap(), "CERT1\nKEY1\n");
        let cur = current_path(dir.path());
        assert!(
            std::fs::symlink_metadata(&cur)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&cur).unwrap(), "CERT1\nKEY1\n");

        let t2: Timestamp = "2026-06-02T03:04:05Z".parse().unwrap();
        let second = store_pair(dir.path(), "CERT2", "KEY2\n", t2).unwrap();
        assert_ne!(first, second);
        assert_eq!(std::fs::read_to_string(&cur).unwrap(), "CERT2\nKEY2\n");
        assert_eq!(
            std::fs::read_link(&cur).unwrap(),
            PathBuf::from("kubelet-client-2026-06-02-03-04-05.pem")
        );
        // The old pair stays, as upstream keeps it.
        assert!(first.exists());
        assert!(!dir.path().join(format!(".{CURRENT_FILE}.tmp")).exists());
    }

    fn bootstrap_kc(ca: &str) -> kube::config::Kubeconfig {
        let yaml = format!(
            r#"apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    {ca}
users:
- name: u
  user:
    token: abcdef.0123456789abcdef
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
"#
        );
        kube::config::Kubeconfig::from_yaml(&yaml).unwrap()
    }

    #[test]
    fn kubeconfig_points_at_current_pem() {
        let kc = bootstrap_kc("certificate-authority: pki/ca.crt");
        let info = cluster_info(&kc, Path::new("/etc/kubernetes/bootstrap.conf")).unwrap();
        assert_eq!(info.server, "https://127.0.0.1:6443");
        assert_eq!(
            info.ca_file.as_deref(),
            Some(Path::new("/etc/kubernetes/pki/ca.crt"))
        );
        let pem = Path::new("/var/lib/kubelet/pki/kubelet-client-current.pem");
        let yaml = kubeconfig_yaml(&info, pem);
        let back = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(back.current_context.as_deref(), Some("default-context"));
        let user = back.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(
            user.client_certificate.as_deref(),
            Some(pem.to_str().unwrap())
        );
        assert_eq!(user.client_key.as_deref(), Some(pem.to_str().unwrap()));
        assert!(user.token.is_none());
        let cluster = back.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/etc/kubernetes/pki/ca.crt")
        );
        let ctx = back.contexts[0].context.as_ref().unwrap();
        assert_eq!(ctx.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn kubeconfig_keeps_inline_ca() {
        let kc = bootstrap_kc("certificate-authority-data: Q0EK");
        let info = cluster_info(&kc, Path::new("b.conf")).unwrap();
        let yaml = kubeconfig_yaml(&info, Path::new("/p.pem"));
        assert!(yaml.contains("certificate-authority-data: Q0EK"), "{yaml}");
        assert!(!yaml.contains("certificate-authority:"));
    }

    #[test]
    fn write_atomic_sets_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/kubelet.conf");
        write_atomic(&p, "x").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "x");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
