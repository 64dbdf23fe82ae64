//! CRI endpoint strings (`--container-runtime-endpoint` and friends).

use std::path::PathBuf;

use super::CriError;

/// Turns an endpoint such as `unix:///run/containerd/containerd.sock` (or a
/// bare socket path, which the kubelet has always tolerated) into the socket
/// path. Only unix sockets are supported on Linux, as upstream.
pub fn parse_endpoint(endpoint: &str) -> Result<PathBuf, CriError> {
    let invalid = |reason: &str| CriError::InvalidEndpoint {
        endpoint: endpoint.to_string(),
        reason: reason.to_string(),
    };
    let trimmed = endpoint.trim();
    let path = if let Some(rest) = trimmed.strip_prefix("unix:") {
        // Both `unix:///abs/path` and `unix:/abs/path` name the same socket.
        rest.strip_prefix("//").unwrap_or(rest)
    } else if let Some((scheme, _)) = trimmed.split_once("://") {
        return Err(invalid(&format!(
            "protocol {scheme:?} not supported, only unix sockets are"
        )));
    } else {
        trimmed
    };
    if path.is_empty() {
        return Err(invalid("empty socket path"));
    }
    if path.contains('\0') {
        return Err(invalid("socket path contains a NUL byte"));
    }
    Ok(PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> PathBuf {
        match parse_endpoint(s) {
            Ok(p) => p,
            Err(e) => panic!("{s:?} should parse: {e}"),
        }
    }

    #[test]
    fn unix_url_with_absolute_path() {
        assert_eq!(
            ok("unix:///run/containerd/containerd.sock"),
            PathBuf::from("/run/containerd/containerd.sock")
        );
    }

    #[test]
    fn unix_url_single_slash() {
        assert_eq!(
            ok("unix:/var/run/crio/crio.sock"),
            PathBuf::from("/var/run/crio/crio.sock")
        );
    }

    #[test]
    fn bare_path_is_a_unix_socket() {
        assert_eq!(
            ok("/run/containerd/containerd.sock"),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(ok("  /tmp/x.sock "), PathBuf::from("/tmp/x.sock"));
    }

    #[test]
    fn rejects_other_protocols() {
        for s in [
            "tcp://127.0.0.1:1234",
            "npipe:////./pipe/containerd",
            "http://x",
        ] {
            let err = parse_endpoint(s).expect_err(s);
            assert!(
                matches!(err, CriError::InvalidEndpoint { .. }),
                "{s}: {err}"
            );
        }
    }

    #[test]
    fn rejects_empty() {
        for s in ["", "   ", "unix://", "unix:"] {
            assert!(
                matches!(parse_endpoint(s), Err(CriError::InvalidEndpoint { .. })),
                "{s:?}"
            );
        }
    }
}
