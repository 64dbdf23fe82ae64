//! imagePullSecrets: registry credentials from a pod's docker-config secrets, matched to an
//! image the way upstream's keyring does (most specific registry path first, globs in host
//! names, Docker Hub as the fallback for unqualified names).

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use serde::Deserialize;
use tracing::warn;

use crate::cri::api::AuthConfig;

const DOCKER_CONFIG_JSON_TYPE: &str = "kubernetes.io/dockerconfigjson";
const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
const DOCKERCFG_TYPE: &str = "kubernetes.io/dockercfg";
const DOCKERCFG_KEY: &str = ".dockercfg";
/// Where credentials for Docker Hub are filed, whatever spelling the secret used.
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

#[derive(Debug, thiserror::Error)]
pub enum PullSecretError {
    #[error("secret {name}: {key} is not valid docker config JSON: {source}")]
    Json {
        name: String,
        key: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

#[derive(Deserialize, Default)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize, Default, Clone)]
struct Entry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    /// base64("user:password"); when present it wins over the separate fields, as upstream.
    #[serde(default)]
    auth: String,
}

impl Entry {
    fn credentials(&self) -> AuthConfig {
        let mut out = AuthConfig {
            username: self.username.clone(),
            password: self.password.clone(),
            ..Default::default()
        };
        if let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(self.auth.trim())
            && let Ok(text) = String::from_utf8(raw)
            && let Some((user, pass)) = text.split_once(':')
        {
            out.username = user.to_string();
            out.password = pass.to_string();
        }
        out
    }
}

/// Credentials indexed by registry location (host, optionally with a path), searched most
/// specific first.
#[derive(Default, Debug)]
pub struct Keyring {
    /// Sorted by key, descending, so "quay.io/org" is tried before "quay.io".
    entries: Vec<(String, AuthConfig)>,
}

impl Keyring {
    /// Builds the keyring from the pod's secrets; a secret that is not a docker config is
    /// ignored, a malformed one is logged and skipped so the others still count.
    pub fn from_secrets(secrets: &[Secret]) -> Keyring {
        let mut entries = Vec::new();
        for secret in secrets {
            match secret_entries(secret) {
                Ok(found) => entries.extend(found),
                Err(err) => warn!(%err, "Ignoring image pull secret"),
            }
        }
        // A stable sort keeps the secrets' order among credentials for the same location.
        entries.sort_by(|a: &(String, AuthConfig), b| b.0.cmp(&a.0));
        Keyring { entries }
    }

    /// Every credential that may apply to `image`, best match first.
    pub fn lookup(&self, image: &str) -> Vec<AuthConfig> {
        let image = normalize(image);
        let found: Vec<AuthConfig> = self
            .entries
            .iter()
            .filter(|(key, _)| location_matches(key, &image))
            .map(|(_, auth)| auth.clone())
            .collect();
        if !found.is_empty() || !is_docker_hub(&image) {
            return found;
        }
        self.entries
            .iter()
            .filter(|(key, _)| key == DEFAULT_REGISTRY_HOST)
            .map(|(_, auth)| auth.clone())
            .collect()
    }
}

fn secret_entries(secret: &Secret) -> Result<Vec<(String, AuthConfig)>, PullSecretError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let data = secret.data.as_ref();
    let raw = |key: &str| data.and_then(|d| d.get(key)).map(|b| b.0.as_slice());
    let config: BTreeMap<String, Entry> = match secret.type_.as_deref() {
        Some(DOCKER_CONFIG_JSON_TYPE) => match raw(DOCKER_CONFIG_JSON_KEY) {
            Some(bytes) if !bytes.is_empty() => {
                serde_json::from_slice::<DockerConfigJson>(bytes)
                    .map_err(|source| PullSecretError::Json {
                        name,
                        key: DOCKER_CONFIG_JSON_KEY,
                        source,
                    })?
                    .auths
            }
            _ => BTreeMap::new(),
        },
        Some(DOCKERCFG_TYPE) => match raw(DOCKERCFG_KEY) {
            Some(bytes) if !bytes.is_empty() => {
                serde_json::from_slice(bytes).map_err(|source| PullSecretError::Json {
                    name,
                    key: DOCKERCFG_KEY,
                    source,
                })?
            }
            _ => BTreeMap::new(),
        },
        _ => BTreeMap::new(),
    };
    Ok(config
        .iter()
        .filter_map(|(loc, entry)| Some((location_key(loc)?, entry.credentials())))
        .collect())
}

/// "https://registry.example.com:5000/v2/org" → "registry.example.com:5000/org". The
/// /v1/ and /v2/ API prefixes name the registry, not a repository path.
fn location_key(loc: &str) -> Option<String> {
    let rest = loc
        .strip_prefix("https://")
        .or_else(|| loc.strip_prefix("http://"))
        .unwrap_or(loc);
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if host.is_empty() {
        return None;
    }
    let path = if path.starts_with("/v1/") || path.starts_with("/v2/") {
        &path[3..]
    } else {
        path
    };
    Some(if path.is_empty() || path == "/" {
        host.to_string()
    } else {
        format!("{host}{path}")
    })
}

/// Whether the first path component names a registry rather than a Docker Hub user.
fn has_registry(first: &str) -> bool {
    first.contains(['.', ':']) || first == "localhost"
}

/// The fully qualified name the runtime will pull, e.g. "busybox" → "docker.io/library/busybox".
fn normalize(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if has_registry(first) => image.to_string(),
        Some(_) => format!("docker.io/{image}"),
        None => format!("docker.io/library/{image}"),
    }
}

fn is_docker_hub(normalized: &str) -> bool {
    let first = normalized.split('/').next().unwrap_or_default();
    first == "docker.io" || first == DEFAULT_REGISTRY_HOST || !has_registry(first)
}

/// Splits "host:port/path" into (host, port, path).
fn split_location(s: &str) -> (&str, &str, &str) {
    let (hostport, path) = match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    match hostport.rsplit_once(':') {
        Some((host, port)) => (host, port, path),
        None => (hostport, "", path),
    }
}

/// Upstream's URL match: the same number of host labels, each matching its glob, the same
/// port, and the key's path a prefix of the image's path.
fn location_matches(key: &str, image: &str) -> bool {
    let (khost, kport, kpath) = split_location(key);
    let (ihost, iport, ipath) = split_location(image);
    let klabels: Vec<&str> = khost.split('.').collect();
    let ilabels: Vec<&str> = ihost.split('.').collect();
    klabels.len() == ilabels.len()
        && klabels.iter().zip(&ilabels).all(|(k, i)| glob(k, i))
        && kport == iport
        && ipath.starts_with(kpath)
}

/// Shell-style glob over one host label: `*` any run, `?` any one character.
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(type_: &str, key: &str, json: &str) -> Secret {
        Secret {
            type_: Some(type_.into()),
            data: Some([(key.to_string(), ByteString(json.as_bytes().to_vec()))].into()),
            ..Default::default()
        }
    }

    fn users(auths: &[AuthConfig]) -> Vec<&str> {
        auths.iter().map(|a| a.username.as_str()).collect()
    }

    #[test]
    fn dockerconfigjson_with_auth_field_and_paths() {
        let b64 = base64::engine::general_purpose::STANDARD.encode("alice:s3cret");
        let json = format!(
            r#"{{"auths":{{
                "https://registry.example.com/v2/":{{"auth":"{b64}"}},
                "registry.example.com/team":{{"username":"team","password":"p"}}
            }}}}"#
        );
        let ring = Keyring::from_secrets(&[secret(
            DOCKER_CONFIG_JSON_TYPE,
            DOCKER_CONFIG_JSON_KEY,
            &json,
        )]);
        let found = ring.lookup("registry.example.com/team/app:1");
        assert_eq!(users(&found), ["team", "alice"]);
        assert_eq!(found[1].password, "s3cret");
        assert_eq!(
            users(&ring.lookup("registry.example.com/other/app:1")),
            ["alice"]
        );
        assert!(ring.lookup("other.example.com/team/app").is_empty());
    }

    #[test]
    fn dockercfg_ports_and_globs() {
        let json = r#"{
            "127.0.0.1:5000":{"username":"local","password":"x"},
            "*.corp.example":{"username":"wild","password":"y"}
        }"#;
        let ring = Keyring::from_secrets(&[secret(DOCKERCFG_TYPE, DOCKERCFG_KEY, json)]);
        assert_eq!(users(&ring.lookup("127.0.0.1:5000/app:1")), ["local"]);
        assert!(ring.lookup("127.0.0.1:5001/app:1").is_empty());
        assert_eq!(users(&ring.lookup("eu.corp.example/app")), ["wild"]);
        // A glob covers one label only, as upstream.
        assert!(ring.lookup("a.b.corp.example/app").is_empty());
    }

    #[test]
    fn docker_hub_credentials_for_unqualified_names() {
        let json = r#"{"auths":{"https://index.docker.io/v1/":{"username":"hub","password":"h"}}}"#;
        let ring = Keyring::from_secrets(&[secret(
            DOCKER_CONFIG_JSON_TYPE,
            DOCKER_CONFIG_JSON_KEY,
            json,
        )]);
        assert_eq!(users(&ring.lookup("busybox:latest")), ["hub"]);
        assert_eq!(users(&ring.lookup("me/app:1")), ["hub"]);
        assert_eq!(users(&ring.lookup("docker.io/library/busybox")), ["hub"]);
        assert!(ring.lookup("quay.io/me/app").is_empty());
    }

    #[test]
    fn wrong_type_or_bad_json_is_skipped_and_others_count() {
        let good = secret(
            DOCKER_CONFIG_JSON_TYPE,
            DOCKER_CONFIG_JSON_KEY,
            r#"{"auths":{"r.example":{"username":"ok","password":"p"}}}"#,
        );
        let bad = secret(DOCKER_CONFIG_JSON_TYPE, DOCKER_CONFIG_JSON_KEY, "{not json");
        let opaque = secret("Opaque", DOCKER_CONFIG_JSON_KEY, r#"{"auths":{}}"#);
        let ring = Keyring::from_secrets(&[bad, opaque, good]);
        assert_eq!(users(&ring.lookup("r.example/app")), ["ok"]);
    }

    #[test]
    fn glob_matching() {
        assert!(glob("*", "anything"));
        assert!(glob("reg-?", "reg-1"));
        assert!(!glob("reg-?", "reg-12"));
        assert!(glob("a*c", "abbbc"));
        assert!(!glob("a*c", "abbb"));
    }
}
