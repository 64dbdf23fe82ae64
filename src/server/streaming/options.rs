//! Reading the streaming endpoints' requests: query parameters and upgrade headers, with the
//! upstream kubelet's names, defaults and checks.

use axum::http::{HeaderMap, Uri, header};

use super::errors::StreamError;

/// The names the API server uses when it forwards exec/attach to a kubelet (not the
/// stdin/stdout/stderr of PodExecOptions).
pub const STDIN_PARAM: &str = "input";
pub const STDOUT_PARAM: &str = "output";
pub const STDERR_PARAM: &str = "error";
pub const TTY_PARAM: &str = "tty";
pub const COMMAND_PARAM: &str = "command";
pub const PORT_PARAM: &str = "port";
/// /run's command: one string split on spaces.
pub const RUN_COMMAND_PARAM: &str = "cmd";

/// The query's pairs in order, repeated keys kept, percent- and plus-decoded.
#[derive(Debug, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn of(uri: &Uri) -> Self {
        axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
            .map(|q| Query(q.0))
            .unwrap_or_default()
    }

    /// The first value of `key`, like Go's `FormValue`.
    pub fn first(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn all(&self, key: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Only the exact value "1" turns a stream on.
    fn flag(&self, key: &str) -> bool {
        self.first(key) == Some("1")
    }
}

/// Which streams an exec or attach wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl StreamOptions {
    /// A terminal merges stderr into stdout, so stderr is dropped (not refused) with a tty;
    /// at least one stream must remain.
    pub fn from_query(q: &Query) -> Result<Self, StreamError> {
        let tty = q.flag(TTY_PARAM);
        let opts = StreamOptions {
            stdin: q.flag(STDIN_PARAM),
            stdout: q.flag(STDOUT_PARAM),
            stderr: q.flag(STDERR_PARAM) && !tty,
            tty,
        };
        if !(opts.stdin || opts.stdout || opts.stderr) {
            return Err(StreamError::NoStreams);
        }
        Ok(opts)
    }
}

/// /run's command: the `cmd` parameter split on single spaces, empty words kept (an absent
/// parameter gives one empty word), as upstream does.
pub fn run_command(q: &Query) -> Vec<String> {
    q.first(RUN_COMMAND_PARAM)
        .unwrap_or("")
        .split(' ')
        .map(str::to_string)
        .collect()
}

/// The ports of a port-forward. SPDY clients name ports per stream, so only WebSocket requests
/// carry them here: every `port` value, each a comma-separated list of 1..=65535.
pub fn forward_ports(q: &Query, headers: &HeaderMap) -> Result<Vec<i32>, StreamError> {
    if !is_websocket_request(headers) {
        return Ok(Vec::new());
    }
    let values = q.all(PORT_PARAM);
    if values.is_empty() {
        return Err(StreamError::PortRequired);
    }
    let mut ports = Vec::new();
    for value in &values {
        if value.is_empty() {
            return Err(StreamError::PortEmpty);
        }
        for part in value.split(',') {
            let port = parse_port(part).map_err(|reason| StreamError::PortUnparsable {
                value: value.clone(),
                part: part.to_string(),
                reason,
            })?;
            if port == 0 {
                return Err(StreamError::PortZero {
                    value: value.clone(),
                });
            }
            ports.push(i32::from(port));
        }
    }
    Ok(ports)
}

/// Decimal digits only (no sign), like Go's `strconv.ParseUint(s, 10, 16)`.
fn parse_port(s: &str) -> Result<u16, &'static str> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("invalid syntax");
    }
    s.parse().map_err(|_| "value out of range")
}

/// Any Connection header mentioning "upgrade" makes an upgrade request.
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("upgrade"))
}

/// A WebSocket handshake: the first Connection header lists the "upgrade" token and the first
/// Upgrade header is "websocket".
pub fn is_websocket_request(headers: &HeaderMap) -> bool {
    let first = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default()
    };
    first(header::UPGRADE) == "websocket" && lists_upgrade_token(&first(header::CONNECTION))
}

/// Upstream matches `(^|.*,\s*)upgrade($|\s*,)`: whitespace may only sit on the comma side of
/// the token.
fn lists_upgrade_token(connection: &str) -> bool {
    let tokens: Vec<&str> = connection.split(',').collect();
    let last = tokens.len().saturating_sub(1);
    tokens.iter().enumerate().any(|(i, t)| {
        let t = if i > 0 { t.trim_start() } else { t };
        let t = if i < last { t.trim_end() } else { t };
        t == "upgrade"
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn query(q: &str) -> Query {
        Query::of(&format!("/exec/ns/pod/c?{q}").parse::<Uri>().unwrap())
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn websocket() -> HeaderMap {
        headers(&[("connection", "Upgrade"), ("upgrade", "websocket")])
    }

    #[test]
    fn stream_flags_use_the_kubelet_names_and_only_1_counts() {
        let o = StreamOptions::from_query(&query("input=1&output=1&error=1")).unwrap();
        assert_eq!(
            o,
            StreamOptions {
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false
            }
        );
        // PodExecOptions names and "true" are not what the kubelet reads.
        assert!(matches!(
            StreamOptions::from_query(&query("stdin=1&stdout=true&output=true")),
            Err(StreamError::NoStreams)
        ));
        // The first value wins.
        assert!(matches!(
            StreamOptions::from_query(&query("output=0&output=1")),
            Err(StreamError::NoStreams)
        ));
    }

    #[test]
    fn tty_drops_stderr_and_a_stream_must_remain() {
        let o = StreamOptions::from_query(&query("output=1&error=1&tty=1")).unwrap();
        assert!(o.tty && o.stdout && !o.stderr);
        assert!(matches!(
            StreamOptions::from_query(&query("error=1&tty=1")),
            Err(StreamError::NoStreams)
        ));
        assert!(matches!(
            StreamOptions::from_query(&query("tty=1")),
            Err(StreamError::NoStreams)
        ));
    }

    #[test]
    fn commands_keep_order_and_decoding() {
        let q = query("command=sh&command=-c&command=echo+a%26b&output=1");
        assert_eq!(q.all(COMMAND_PARAM), ["sh", "-c", "echo a&b"]);
    }

    #[test]
    fn run_command_splits_on_single_spaces() {
        assert_eq!(run_command(&query("cmd=ls+-l++/")), ["ls", "-l", "", "/"]);
        assert_eq!(run_command(&query("cmd=echo%20hi")), ["echo", "hi"]);
        assert_eq!(run_command(&query("")), [""]);
    }

    #[test]
    fn spdy_port_forward_needs_no_ports() {
        let spdy = headers(&[("connection", "Upgrade"), ("upgrade", "SPDY/3.1")]);
        assert_eq!(forward_ports(&query(""), &spdy).unwrap(), Vec::<i32>::new());
        assert_eq!(
            forward_ports(&query("port=80"), &spdy).unwrap(),
            Vec::<i32>::new()
        );
    }

    #[test]
    fn websocket_port_forward_reads_every_port() {
        let ws = websocket();
        assert_eq!(
            forward_ports(&query("port=80,443&port=8080"), &ws).unwrap(),
            [80, 443, 8080]
        );
        assert!(matches!(
            forward_ports(&query(""), &ws),
            Err(StreamError::PortRequired)
        ));
        assert!(matches!(
            forward_ports(&query("port="), &ws),
            Err(StreamError::PortEmpty)
        ));
        assert!(matches!(
            forward_ports(&query("port=0"), &ws),
            Err(StreamError::PortZero { .. })
        ));
        let err = forward_ports(&query("port=80,x"), &ws).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unable to parse \"80,x\" as a port: strconv.ParseUint: parsing \"x\": invalid syntax"
        );
        for bad in ["port=65536", "port=+80", "port=-1", "port=80,"] {
            assert!(forward_ports(&query(bad), &ws).is_err(), "{bad}");
        }
    }

    #[test]
    fn upgrade_detection() {
        assert!(is_upgrade_request(&headers(&[(
            "connection",
            "keep-alive, Upgrade"
        )])));
        assert!(is_upgrade_request(&headers(&[
            ("connection", "keep-alive"),
            ("connection", "upgrade")
        ])));
        assert!(!is_upgrade_request(&headers(&[("upgrade", "websocket")])));
        assert!(!is_upgrade_request(&HeaderMap::new()));
    }

    #[test]
    fn websocket_detection_follows_the_upstream_pattern() {
        assert!(is_websocket_request(&websocket()));
        assert!(is_websocket_request(&headers(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "WebSocket")
        ])));
        assert!(is_websocket_request(&headers(&[
            ("connection", "Upgrade ,keep-alive"),
            ("upgrade", "websocket")
        ])));
        assert!(!is_websocket_request(&headers(&[
            ("connection", "Upgrade"),
            ("upgrade", "SPDY/3.1")
        ])));
        assert!(!is_websocket_request(&headers(&[
            ("connection", "upgraded"),
            ("upgrade", "websocket")
        ])));
        assert!(!is_websocket_request(&headers(&[
            ("connection", " upgrade"),
            ("upgrade", "websocket")
        ])));
    }
}
