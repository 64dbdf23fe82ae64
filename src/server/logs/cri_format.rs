//! Container log lines as the runtime writes them. The CRI format is
//! `<RFC3339Nano time> <stdout|stderr> <tags> <content>\n`, where the first tag is `P` for a
//! fragment of a longer line (its newline is not part of the output) or `F` for a line's end.
//! Like upstream, the Docker JSON-file format is understood too; the first line of a file
//! decides which format the whole file is in.

use std::borrow::Cow;

use jiff::Timestamp;
use jiff::tz::Offset;

use super::options::zero_time;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
    /// A Docker JSON line may name anything; upstream fails when it writes such a line.
    Other(String),
}

/// One parsed line. `offset_seconds` is the UTC offset the line was written with, kept so a
/// `timestamps` prefix shows the time as the runtime wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub timestamp: Timestamp,
    pub offset_seconds: i32,
    pub stream: Stream,
    pub content: Cow<'a, [u8]>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Cri,
    DockerJson,
}

/// Why a line could not be parsed (logged and skipped by the reader).
pub type ParseError = String;

/// The format a file's first line is in; None when it is in neither.
pub fn detect(line: &[u8]) -> Option<Format> {
    [Format::Cri, Format::DockerJson]
        .into_iter()
        .find(|f| parse(*f, line).is_ok())
}

pub fn parse(format: Format, line: &[u8]) -> Result<Message<'_>, ParseError> {
    match format {
        Format::Cri => parse_cri(line),
        Format::DockerJson => parse_docker_json(line),
    }
}

fn split_space(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = s.iter().position(|b| *b == b' ')?;
    Some((&s[..i], &s[i + 1..]))
}

fn parse_cri(line: &[u8]) -> Result<Message<'_>, ParseError> {
    let (ts, rest) = split_space(line).ok_or("timestamp is not found")?;
    let (timestamp, offset_seconds) = parse_time(ts)?;
    let (stream, rest) = split_space(rest).ok_or("stream type is not found")?;
    let stream = match stream {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        other => {
            return Err(format!(
                "unexpected stream type {:?}",
                String::from_utf8_lossy(other)
            ));
        }
    };
    let (tags, mut content) = split_space(rest).ok_or("log tag is not found")?;
    // Tags are `:`-separated so that new ones can be added; only the first is known.
    let partial = tags.split(|b| *b == b':').next() == Some(b"P");
    if partial && content.last() == Some(&b'\n') {
        content = &content[..content.len() - 1];
    }
    Ok(Message {
        timestamp,
        offset_seconds,
        stream,
        content: Cow::Borrowed(content),
    })
}

#[derive(serde::Deserialize)]
struct JsonLine {
    #[serde(default)]
    log: String,
    #[serde(default)]
    stream: String,
    time: Option<String>,
}

fn parse_docker_json(line: &[u8]) -> Result<Message<'static>, ParseError> {
    let l: JsonLine =
        serde_json::from_slice(line).map_err(|e| format!("failed to unmarshal log: {e}"))?;
    let (timestamp, offset_seconds) = match l.time.as_deref() {
        Some(t) => parse_time(t.as_bytes())?,
        None => (zero_time(), 0),
    };
    let stream = match l.stream.as_str() {
        "stdout" => Stream::Stdout,
        "stderr" => Stream::Stderr,
        _ => Stream::Other(l.stream),
    };
    Ok(Message {
        timestamp,
        offset_seconds,
        stream,
        content: Cow::Owned(l.log.into_bytes()),
    })
}

/// An RFC 3339 time with optional fraction and a `Z` or `±hh:mm` offset.
fn parse_time(raw: &[u8]) -> Result<(Timestamp, i32), ParseError> {
    let bad = || {
        format!(
            "unexpected timestamp format {:?}",
            String::from_utf8_lossy(raw)
        )
    };
    let s = std::str::from_utf8(raw).map_err(|_| bad())?;
    let offset = offset_of(s).ok_or_else(bad)?;
    let ts: Timestamp = s.parse().map_err(|_| bad())?;
    Ok((ts, offset))
}

fn offset_of(s: &str) -> Option<i32> {
    if s.ends_with('Z') || s.ends_with('z') {
        return Some(0);
    }
    let tail = s.get(s.len().checked_sub(6)?..)?.as_bytes();
    let sign = match tail[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    if tail[3] != b':' {
        return None;
    }
    let two = |a: u8, b: u8| -> Option<i32> {
        (a.is_ascii_digit() && b.is_ascii_digit())
            .then(|| i32::from(a - b'0') * 10 + i32::from(b - b'0'))
    };
    let h = two(tail[1], tail[2])?;
    let m = two(tail[4], tail[5])?;
    Some(sign * (h * 3600 + m * 60))
}

/// The `timestamps` prefix: RFC 3339 with exactly nine fraction digits, `Z` for UTC.
pub fn format_timestamp(ts: Timestamp, offset_seconds: i32) -> String {
    let offset = Offset::from_seconds(offset_seconds).unwrap_or(Offset::UTC);
    let dt = offset.to_datetime(ts);
    let zone = if offset_seconds == 0 {
        "Z".to_string()
    } else {
        let sign = if offset_seconds < 0 { '-' } else { '+' };
        let abs = offset_seconds.unsigned_abs();
        format!("{sign}{:02}:{:02}", abs / 3600, abs % 3600 / 60)
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}{zone}",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        dt.subsec_nanosecond(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_and_partial_cri_lines() {
        let m = parse(
            Format::Cri,
            b"2016-10-06T00:17:09.669794202Z stdout F hello world\n",
        )
        .unwrap();
        assert_eq!(m.stream, Stream::Stdout);
        assert_eq!(&*m.content, b"hello world\n");
        assert_eq!(
            m.timestamp,
            "2016-10-06T00:17:09.669794202Z"
                .parse::<Timestamp>()
                .unwrap()
        );
        let p = parse(
            Format::Cri,
            b"2016-10-06T00:17:09.669794203Z stderr P part one\n",
        )
        .unwrap();
        assert_eq!(p.stream, Stream::Stderr);
        assert_eq!(&*p.content, b"part one", "a fragment loses its newline");
    }

    #[test]
    fn unknown_tags_after_the_first_are_ignored() {
        let m = parse(Format::Cri, b"2016-10-06T00:17:09Z stdout P:x:y abc\n").unwrap();
        assert_eq!(&*m.content, b"abc");
        let m = parse(Format::Cri, b"2016-10-06T00:17:09Z stdout F:x abc\n").unwrap();
        assert_eq!(&*m.content, b"abc\n");
    }

    #[test]
    fn empty_content_and_spaces_in_content() {
        let m = parse(Format::Cri, b"2016-10-06T00:17:09Z stdout F \n").unwrap();
        assert_eq!(&*m.content, b"\n");
        let m = parse(Format::Cri, b"2016-10-06T00:17:09Z stdout F  a  b\n").unwrap();
        assert_eq!(&*m.content, b" a  b\n");
    }

    #[test]
    fn bad_cri_lines() {
        for (line, why) in [
            (&b"garbage\n"[..], "timestamp is not found"),
            (b"notatime stdout F x\n", "unexpected timestamp format"),
            (
                b"2016-10-06T00:17:09Z stdin F x\n",
                "unexpected stream type",
            ),
            (b"2016-10-06T00:17:09Z stdout\n", "stream type is not found"),
            (b"2016-10-06T00:17:09Z stdout F\n", "log tag is not found"),
            (
                b"2016-10-06T00:17:09 stdout F x\n",
                "unexpected timestamp format",
            ),
        ] {
            let err = parse(Format::Cri, line).unwrap_err();
            assert!(err.contains(why), "{line:?}: {err}");
        }
    }

    #[test]
    fn docker_json_lines() {
        let line =
            br#"{"log":"content 1\n","stream":"stderr","time":"2016-10-20T18:39:20.57606443Z"}"#;
        assert_eq!(detect(line), Some(Format::DockerJson));
        let m = parse(Format::DockerJson, line).unwrap();
        assert_eq!(m.stream, Stream::Stderr);
        assert_eq!(&*m.content, b"content 1\n");
        let m = parse(Format::DockerJson, br#"{"log":"x","stream":"tty"}"#).unwrap();
        assert_eq!(m.stream, Stream::Other("tty".into()));
        assert_eq!(m.timestamp, zero_time());
    }

    #[test]
    fn detection() {
        assert_eq!(
            detect(b"2016-10-06T00:17:09Z stdout F x\n"),
            Some(Format::Cri)
        );
        assert_eq!(detect(b"plain text\n"), None);
    }

    #[test]
    fn offsets_survive_into_the_prefix() {
        let m = parse(Format::Cri, b"2024-05-10T14:03:51.5+08:00 stdout F x\n").unwrap();
        assert_eq!(m.offset_seconds, 8 * 3600);
        assert_eq!(
            format_timestamp(m.timestamp, m.offset_seconds),
            "2024-05-10T14:03:51.500000000+08:00"
        );
        let m = parse(Format::Cri, b"2024-05-10T06:03:51.000000001Z stdout F x\n").unwrap();
        assert_eq!(
            format_timestamp(m.timestamp, m.offset_seconds),
            "2024-05-10T06:03:51.000000001Z"
        );
        let m = parse(Format::Cri, b"2024-05-10T06:03:51-05:30 stdout F x\n").unwrap();
        assert_eq!(
            format_timestamp(m.timestamp, m.offset_seconds),
            "2024-05-10T06:03:51.000000000-05:30"
        );
    }
}
