//! Where traces go: the `tracing.endpoint` of the configuration, a gRPC target as upstream
//! reads it (grpc naming: `host:port`, `dns:[//authority/]host:port`, `unix:path`,
//! `unix:///path`, `unix-abstract:name`), turned into a channel we can dial.

use std::path::PathBuf;

/// The OTLP gRPC default, as upstream's exporter uses when no endpoint is set.
pub const DEFAULT_ENDPOINT: &str = "localhost:4317";

/// A collector address the kubelet knows how to dial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `host:port`, resolved by the system resolver.
    Tcp { authority: String },
    /// A unix socket on the filesystem.
    Unix(PathBuf),
    /// A Linux abstract unix socket, named without the leading NUL.
    Abstract(String),
}

/// Why an endpoint cannot be used; the texts are upstream's validation messages.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error(
        "unsupported scheme: {0}.  Options are none, dns, unix, or unix-abstract.  See https://github.com/grpc/grpc/blob/master/doc/naming.md"
    )]
    Scheme(String),
    #[error("parse {0:?}: {1}")]
    Parse(String, &'static str),
}

/// Parses an endpoint the way upstream validates it: without `//` it is a `dns://` target.
pub fn parse(endpoint: &str) -> Result<Target, EndpointError> {
    let full = if endpoint.contains("//") {
        endpoint.to_string()
    } else {
        format!("dns://{endpoint}")
    };
    let (scheme, rest) = full.split_once(':').ok_or(EndpointError::Parse(
        full.clone(),
        "missing protocol scheme",
    ))?;
    if scheme.is_empty() {
        return Err(EndpointError::Parse(full, "missing protocol scheme"));
    }
    match scheme.to_ascii_lowercase().as_str() {
        "dns" => {
            // `dns://authority/host:port` names a DNS server as authority; the system
            // resolver is used whatever it says.
            let after = rest.strip_prefix("//").unwrap_or(rest);
            let host_port = match after.split_once('/') {
                Some((_, target)) => target,
                None => after,
            };
            check_host_port(&full, host_port)?;
            Ok(Target::Tcp {
                authority: host_port.to_string(),
            })
        }
        "unix" => {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(EndpointError::Parse(full, "empty socket path"));
            }
            Ok(Target::Unix(PathBuf::from(path)))
        }
        "unix-abstract" => {
            let name = rest.strip_prefix("//").unwrap_or(rest);
            let name = name.strip_prefix('/').unwrap_or(name);
            if name.is_empty() {
                return Err(EndpointError::Parse(full, "empty socket name"));
            }
            Ok(Target::Abstract(name.to_string()))
        }
        other => Err(EndpointError::Scheme(other.to_string())),
    }
}

fn check_host_port(full: &str, host_port: &str) -> Result<(), EndpointError> {
    let bad = |why| Err(EndpointError::Parse(full.to_string(), why));
    let (host, port) = match host_port.rsplit_once(':') {
        // A bracketed IPv6 address keeps its colons inside the brackets.
        Some((h, p)) if !p.contains(']') => (h, p),
        _ => return bad("missing port"),
    };
    if host.is_empty() {
        return bad("missing host");
    }
    if port.parse::<u16>().is_err() {
        return bad("invalid port");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_as_upstream_reads_them() {
        let tcp = |a: &str| Target::Tcp {
            authority: a.to_string(),
        };
        assert_eq!(parse(DEFAULT_ENDPOINT), Ok(tcp("localhost:4317")));
        assert_eq!(parse("dns:///127.0.0.1:4317"), Ok(tcp("127.0.0.1:4317")));
        assert_eq!(parse("dns://10.0.0.1/otel:55680"), Ok(tcp("otel:55680")));
        assert_eq!(parse("[::1]:4317"), Ok(tcp("[::1]:4317")));
        assert_eq!(
            parse("unix:///run/otel.sock"),
            Ok(Target::Unix("/run/otel.sock".into()))
        );
        assert_eq!(
            parse("unix-abstract://otel"),
            Ok(Target::Abstract("otel".into()))
        );
        let err = parse("http://localhost:4317").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported scheme: http.  Options are none, dns, unix, or unix-abstract.  See https://github.com/grpc/grpc/blob/master/doc/naming.md"
        );
        assert!(matches!(parse("localhost"), Err(EndpointError::Parse(..))));
        assert!(matches!(
            parse("localhost:99999"),
            Err(EndpointError::Parse(..))
        ));
    }
}
