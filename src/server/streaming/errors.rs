//! What can go wrong on the streaming endpoints, and the HTTP answer for each.
//!
//! The statuses follow the upstream kubelet: bad query parameters are 400; a pod missing from
//! the kubelet is 404; errors from the runtime's streaming call map NotFound to 404 and
//! ResourceExhausted to 429 (with the runtime's Retry-After), everything else to 500. The
//! container lookups, ExecSync failures and the proxy's own errors are 500 there too.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::cri::CriError;

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("you must specify at least 1 of stdin, stdout, stderr")]
    NoStreams,
    #[error("query parameter \"port\" is required")]
    PortRequired,
    #[error("query parameter \"port\" cannot be empty")]
    PortEmpty,
    #[error("unable to parse {value:?} as a port: strconv.ParseUint: parsing {part:?}: {reason}")]
    PortUnparsable {
        value: String,
        part: String,
        reason: &'static str,
    },
    #[error("port {value:?} must be > 0")]
    PortZero { value: String },

    #[error("pod does not exist")]
    PodNotFound,
    /// The path's UID names another instance of the pod (port-forward).
    #[error("pod not found")]
    PodUidMismatch,
    #[error("container not found ({container:?})")]
    ContainerNotFound { container: String },
    /// Attach's wording for a container the pod does not run.
    #[error("container {container} not found in pod {pod}")]
    AttachContainerNotFound { container: String, pod: String },
    /// Attach's wording for a path UID naming another instance of the pod.
    #[error("pod {pod} not found")]
    AttachPodNotFound { pod: String },
    #[error("failed to find sandboxID for pod {pod}")]
    NoSandbox { pod: String },
    #[error("failed to find sandboxID for pod {pod}: {source}")]
    SandboxList {
        pod: String,
        #[source]
        source: CriError,
    },

    /// The runtime refused to prepare a stream (Exec, Attach, PortForward).
    #[error("{0}")]
    Runtime(#[source] CriError),
    #[error("unable to use the runtime's streaming URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },

    /// ExecSync for /run failed before the command could report an exit code.
    #[error("{0}")]
    Run(#[source] CriError),
    #[error("command '{command}' exited with {code}: {stderr}")]
    NonZeroExit {
        command: String,
        code: i32,
        stderr: String,
    },

    #[error("Upgrade request required")]
    UpgradeRequired,
    #[error("error dialing backend: {0}")]
    Dial(String),
    #[error("error reading the backend's response: {0}")]
    BackendResponse(String),
    #[error("invalid upgrade response: status code {0}")]
    NotUpgraded(u16),
}

impl StreamError {
    pub fn status(&self) -> StatusCode {
        use StreamError::*;
        match self {
            NoStreams | PortRequired | PortEmpty | PortUnparsable { .. } | PortZero { .. } => {
                StatusCode::BAD_REQUEST
            }
            PodNotFound | PodUidMismatch => StatusCode::NOT_FOUND,
            Runtime(err) => match err.code() {
                Some(tonic::Code::NotFound) => StatusCode::NOT_FOUND,
                Some(tonic::Code::ResourceExhausted) => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Errors met while proxying end with a newline, as Go's `http.Error` writes them there;
    /// the others are written bare, as go-restful does.
    fn met_while_proxying(&self) -> bool {
        use StreamError::*;
        matches!(
            self,
            UpgradeRequired | Dial(_) | BackendResponse(_) | NotUpgraded(_)
        )
    }

    /// The runtime's "[Retry-After:N]" hint when it is over its in-flight limit.
    fn retry_after(&self) -> Option<&str> {
        let StreamError::Runtime(err) = self else {
            return None;
        };
        if err.code() != Some(tonic::Code::ResourceExhausted) {
            return None;
        }
        retry_after_hint(err.message()?)
    }
}

/// The seconds in a "[Retry-After:N]" marker, when present and numeric.
pub fn retry_after_hint(message: &str) -> Option<&str> {
    let rest = &message[message.find("[Retry-After:")? + "[Retry-After:".len()..];
    let secs = &rest[..rest.find(']')?];
    (!secs.is_empty() && secs.bytes().all(|b| b.is_ascii_digit())).then_some(secs)
}

impl IntoResponse for StreamError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(error = %self, "streaming request failed");
        } else {
            tracing::debug!(error = %self, %status, "streaming request refused");
        }
        let mut body = self.to_string();
        if self.met_while_proxying() {
            body.push('\n');
        }
        let mut resp = (status, body).into_response();
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if self.met_while_proxying() {
            headers.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
        }
        if let Some(secs) = self
            .retry_after()
            .and_then(|s| HeaderValue::from_str(s).ok())
        {
            headers.insert(header::RETRY_AFTER, secs);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(code: tonic::Code, msg: &str) -> StreamError {
        StreamError::Runtime(CriError::Status {
            op: "Exec",
            status: tonic::Status::new(code, msg),
        })
    }

    async fn body_of(resp: Response) -> String {
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .expect("body");
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[test]
    fn runtime_codes_map_like_upstream() {
        let cases = [
            (tonic::Code::NotFound, StatusCode::NOT_FOUND),
            (
                tonic::Code::ResourceExhausted,
                StatusCode::TOO_MANY_REQUESTS,
            ),
            (
                tonic::Code::InvalidArgument,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (tonic::Code::Unavailable, StatusCode::INTERNAL_SERVER_ERROR),
            (
                tonic::Code::DeadlineExceeded,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (tonic::Code::Unknown, StatusCode::INTERNAL_SERVER_ERROR),
        ];
        for (code, want) in cases {
            assert_eq!(runtime(code, "x").status(), want, "{code:?}");
        }
        let timeout = StreamError::Runtime(CriError::Timeout {
            op: "Exec",
            after: std::time::Duration::from_secs(2),
        });
        assert_eq!(timeout.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn request_and_lookup_errors() {
        assert_eq!(StreamError::NoStreams.status(), StatusCode::BAD_REQUEST);
        assert_eq!(StreamError::PortRequired.status(), StatusCode::BAD_REQUEST);
        assert_eq!(StreamError::PodNotFound.status(), StatusCode::NOT_FOUND);
        assert_eq!(StreamError::PodUidMismatch.status(), StatusCode::NOT_FOUND);
        let missing = StreamError::ContainerNotFound {
            container: "app".into(),
        };
        assert_eq!(missing.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(missing.to_string(), "container not found (\"app\")");
        // /run reports every ExecSync failure as 500, whatever the runtime's code.
        let run = StreamError::Run(CriError::Status {
            op: "ExecSync",
            status: tonic::Status::not_found("gone"),
        });
        assert_eq!(run.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn retry_after_hint_is_read_from_the_message() {
        assert_eq!(
            retry_after_hint("maximum number of in-flight requests exceeded [Retry-After:60]"),
            Some("60")
        );
        assert_eq!(retry_after_hint("[Retry-After:]"), None);
        assert_eq!(retry_after_hint("[Retry-After:1x]"), None);
        assert_eq!(retry_after_hint("no hint"), None);
    }

    #[tokio::test]
    async fn responses_carry_status_headers_and_message() {
        let resp = runtime(tonic::Code::ResourceExhausted, "busy [Retry-After:30]").into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "30");
        assert!(body_of(resp).await.contains("busy [Retry-After:30]"));

        let resp = StreamError::UpgradeRequired.into_response();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(resp.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(body_of(resp).await, "Upgrade request required\n");

        let resp = StreamError::NoStreams.into_response();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            resp.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
        assert_eq!(
            body_of(resp).await,
            "you must specify at least 1 of stdin, stdout, stderr"
        );
    }
}
