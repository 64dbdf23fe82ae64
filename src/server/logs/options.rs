//! The query of /containerLogs: decoded the way the API machinery decodes a v1 PodLogOptions
//! from URL parameters, then checked like upstream's ValidatePodLogOptions.

use std::time::Duration;

use jiff::Timestamp;

use super::LogsError;

/// The v1 PodLogOptions fields the kubelet reads; `None` means "not given".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    pub since_time: Option<Timestamp>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
    pub stream: Option<String>,
}

/// What the file reader needs, once the request's options are resolved against "now".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    pub tail: Option<u64>,
    pub limit_bytes: Option<u64>,
    /// Lines older than this are skipped.
    pub since: Option<Timestamp>,
    pub follow: bool,
    pub timestamps: bool,
}

/// The value of PodLogOptions.stream that means both streams.
const STREAM_ALL: &str = "All";
const STREAMS: [&str; 3] = ["Stdout", "Stderr", STREAM_ALL];

/// Decodes the query pairs. Like the API machinery, the first value of a repeated parameter
/// wins, unknown parameters are ignored, a boolean is false only when absent, "false" or "0",
/// and the legacy `tail` parameter stands in for `tailLines` ("all" meaning no limit).
pub fn decode(pairs: &[(String, String)]) -> Result<LogOptions, LogsError> {
    let first = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let tail_lines = match first("tail") {
        Some("all") => None,
        Some(t) if !t.is_empty() => Some(int("tailLines", t)?),
        _ => first("tailLines")
            .map(|v| int("tailLines", v))
            .transpose()?,
    };
    Ok(LogOptions {
        follow: boolean(first("follow")),
        previous: boolean(first("previous")),
        timestamps: boolean(first("timestamps")),
        since_seconds: first("sinceSeconds")
            .map(|v| int("sinceSeconds", v))
            .transpose()?,
        since_time: first("sinceTime").map(time).transpose()?,
        tail_lines,
        limit_bytes: first("limitBytes")
            .map(|v| int("limitBytes", v))
            .transpose()?,
        stream: first("stream").map(str::to_string),
    })
}

fn boolean(v: Option<&str>) -> bool {
    v.is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
}

fn int(param: &str, value: &str) -> Result<i64, LogsError> {
    value
        .parse()
        .map_err(|e: std::num::ParseIntError| LogsError::Decode {
            param: param.to_string(),
            value: value.to_string(),
            reason: e.to_string(),
        })
}

/// An RFC 3339 time; empty (and the JSON-era "null") is the zero time, which upstream keeps
/// as "given" and so still conflicts with sinceSeconds.
fn time(value: &str) -> Result<Timestamp, LogsError> {
    if value.is_empty() || value == "null" {
        return Ok(zero_time());
    }
    value.parse().map_err(|e: jiff::Error| LogsError::Decode {
        param: "sinceTime".to_string(),
        value: value.to_string(),
        reason: e.to_string(),
    })
}

/// Go's zero time.Time, 0001-01-01T00:00:00Z.
pub fn zero_time() -> Timestamp {
    Timestamp::from_second(-62_135_596_800).unwrap_or(Timestamp::MIN)
}

/// Upstream's ValidatePodLogOptions: every problem is reported, in upstream's field-error
/// wording.
pub fn validate(opts: &LogOptions) -> Result<(), LogsError> {
    let mut errs = Vec::new();
    if let Some(t) = opts.tail_lines.filter(|t| *t < 0) {
        errs.push(format!(
            "tailLines: Invalid value: {t}: must be greater than or equal to 0"
        ));
    }
    if let Some(l) = opts.limit_bytes.filter(|l| *l < 1) {
        errs.push(format!(
            "limitBytes: Invalid value: {l}: must be greater than 0"
        ));
    }
    match (opts.since_seconds, opts.since_time) {
        (Some(_), Some(_)) => errs.push(
            "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified".into(),
        ),
        (Some(s), None) if s < 1 => errs.push(format!(
            "sinceSeconds: Invalid value: {s}: must be greater than 0"
        )),
        _ => {}
    }
    if let Some(s) = opts.stream.as_deref().filter(|s| !STREAMS.contains(s)) {
        errs.push(format!(
            "stream: Unsupported value: {s:?}: supported values: \"All\", \"Stderr\", \"Stdout\""
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(LogsError::Invalid(errs))
    }
}

/// Splitting the streams is behind the PodLogsQuerySplitStreams gate, off in v1.34: only
/// "All" (or nothing) can be served.
pub fn check_stream(opts: &LogOptions) -> Result<(), LogsError> {
    match opts.stream.as_deref() {
        None | Some(STREAM_ALL) => Ok(()),
        Some(other) => Err(LogsError::StreamUnsupported(other.to_string())),
    }
}

impl LogOptions {
    /// The reader's view: `since` is the later of now-sinceSeconds and sinceTime, as upstream
    /// resolves them.
    pub fn read_options(&self, now: Timestamp) -> ReadOptions {
        let from_seconds = self.since_seconds.and_then(|s| {
            let back = Duration::from_secs(u64::try_from(s).ok()?);
            now.checked_sub(back).ok()
        });
        let since = match (from_seconds, self.since_time) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        ReadOptions {
            tail: self.tail_lines.and_then(|t| u64::try_from(t).ok()),
            limit_bytes: self.limit_bytes.and_then(|l| u64::try_from(l).ok()),
            since,
            follow: self.follow,
            timestamps: self.timestamps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn booleans_are_true_unless_false_or_zero() {
        let o = decode(&q(&[
            ("follow", ""),
            ("timestamps", "yes"),
            ("previous", "FALSE"),
        ]))
        .unwrap();
        assert!(o.follow);
        assert!(o.timestamps);
        assert!(!o.previous);
        assert!(!decode(&q(&[("follow", "0")])).unwrap().follow);
        assert!(!decode(&[]).unwrap().follow);
    }

    #[test]
    fn integers_and_times_decode() {
        let o = decode(&q(&[
            ("tailLines", "10"),
            ("tailLines", "99"),
            ("limitBytes", "5"),
            ("sinceTime", "2024-01-02T03:04:05Z"),
        ]))
        .unwrap();
        assert_eq!(o.tail_lines, Some(10), "the first value wins");
        assert_eq!(o.limit_bytes, Some(5));
        assert_eq!(o.since_time, Some("2024-01-02T03:04:05Z".parse().unwrap()));
    }

    #[test]
    fn bad_values_fail_to_decode() {
        for (k, v) in [
            ("tailLines", "ten"),
            ("limitBytes", ""),
            ("sinceSeconds", "1.5"),
            ("sinceTime", "yesterday"),
        ] {
            let err = decode(&q(&[(k, v)])).unwrap_err();
            assert!(matches!(err, LogsError::Decode { .. }), "{k}={v}: {err:?}");
            assert!(err.to_string().contains(k), "{err}");
        }
    }

    #[test]
    fn legacy_tail_parameter() {
        let o = decode(&q(&[("tail", "3"), ("tailLines", "7")])).unwrap();
        assert_eq!(o.tail_lines, Some(3));
        let o = decode(&q(&[("tail", "all"), ("tailLines", "7")])).unwrap();
        assert_eq!(o.tail_lines, None);
    }

    #[test]
    fn validation_like_upstream() {
        let ok = LogOptions {
            tail_lines: Some(0),
            limit_bytes: Some(1),
            since_seconds: Some(1),
            ..Default::default()
        };
        assert!(validate(&ok).is_ok());
        let bad = LogOptions {
            tail_lines: Some(-1),
            limit_bytes: Some(0),
            since_seconds: Some(0),
            ..Default::default()
        };
        let LogsError::Invalid(errs) = validate(&bad).unwrap_err() else {
            panic!("not an Invalid error");
        };
        assert_eq!(errs.len(), 3, "{errs:?}");
        let both = LogOptions {
            since_seconds: Some(10),
            since_time: Some(zero_time()),
            ..Default::default()
        };
        let err = validate(&both).unwrap_err().to_string();
        assert!(
            err.contains("at most one of `sinceTime` or `sinceSeconds`"),
            "{err}"
        );
        let stream = LogOptions {
            stream: Some("Both".into()),
            ..Default::default()
        };
        assert!(validate(&stream).is_err());
    }

    #[test]
    fn only_the_all_stream_is_served() {
        let mut o = LogOptions::default();
        assert!(check_stream(&o).is_ok());
        o.stream = Some("All".into());
        assert!(check_stream(&o).is_ok());
        o.stream = Some("Stdout".into());
        assert!(matches!(
            check_stream(&o),
            Err(LogsError::StreamUnsupported(_))
        ));
    }

    #[test]
    fn since_is_the_later_bound() {
        let now: Timestamp = "2024-01-01T00:01:00Z".parse().unwrap();
        let o = LogOptions {
            since_seconds: Some(30),
            tail_lines: Some(4),
            ..Default::default()
        };
        let r = o.read_options(now);
        assert_eq!(r.since, Some("2024-01-01T00:00:30Z".parse().unwrap()));
        assert_eq!(r.tail, Some(4));
        assert_eq!(r.limit_bytes, None);
        let o = LogOptions {
            since_time: Some("2023-01-01T00:00:00Z".parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(
            o.read_options(now).since,
            Some("2023-01-01T00:00:00Z".parse().unwrap())
        );
    }
}
