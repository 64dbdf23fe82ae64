//! Logging in the upstream kubelet's formats.
//!
//! Text (the default) follows klog's header so existing log tooling keeps parsing:
//! `I1122 02:00:37.123456    1234 file.rs:42] "message" key="value" n=3`.
//! JSON follows component-base's JSON logger: `{"ts":..,"caller":..,"msg":..,"v":0,..}`.

use std::fmt::Write as _;
use std::io::Write as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

pub mod trace;

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `logging.format` is neither text nor json.
    #[error("unsupported logging format {0:?}: supported values: \"json\", \"text\"")]
    UnknownFormat(String),
    /// The verbosity made a filter tracing rejects.
    #[error("invalid log filter: {0}")]
    Filter(String),
    /// A global subscriber was set before.
    #[error("logging already initialised: {0}")]
    AlreadyInitialised(String),
}

/// Crates that are chatty at debug level; kept at WARN below -v=8.
const NOISY: &[&str] = &[
    "h2",
    "hyper",
    "hyper_util",
    "tower",
    "tonic",
    "rustls",
    "mio",
];

/// Filter directives for a klog-style verbosity: 0..=2 INFO, 3..=4 DEBUG, 5+ TRACE.
pub fn filter_directives(verbosity: u8) -> String {
    let base = match verbosity {
        0..=2 => "info",
        3..=4 => "debug",
        _ => "trace",
    };
    let mut out = base.to_string();
    if verbosity < 8 {
        for dep in NOISY {
            out.push_str(&format!(",{dep}=warn"));
        }
    }
    out
}

/// The directive for exported spans: on only while a trace pipeline exists.
fn trace_directive(tracing: bool) -> String {
    let level = if tracing { "trace" } else { "off" };
    format!("{}={level}", trace::TARGET)
}

/// Installs the global subscriber. `RUST_LOG`, when set, replaces the -v mapping. With a
/// trace pipeline, the spans under [`trace::TARGET`] are exported too.
pub fn init_logging(
    verbosity: u8,
    format: &str,
    tracing: Option<&trace::Pipeline>,
) -> Result<(), TelemetryError> {
    let json = match format {
        "text" | "" => false,
        "json" => true,
        other => return Err(TelemetryError::UnknownFormat(other.to_string())),
    };
    let directives = match std::env::var("RUST_LOG") {
        Ok(s) if !s.trim().is_empty() => s,
        _ => filter_directives(verbosity),
    };
    let filter = EnvFilter::try_new(format!(
        "{directives},{}",
        trace_directive(tracing.is_some())
    ))
    .map_err(|e| TelemetryError::Filter(e.to_string()))?;
    let otel = tracing.map(|p| p.layer());
    let result = if json {
        // component-base's JSON logger writes to stdout by default.
        tracing_subscriber::registry()
            .with(filter)
            .with(otel)
            .with(KlogLayer::new(std::io::stdout, true))
            .try_init()
    } else {
        tracing_subscriber::registry()
            .with(filter)
            .with(otel)
            .with(KlogLayer::new(std::io::stderr, false))
            .try_init()
    };
    result.map_err(|e| TelemetryError::AlreadyInitialised(e.to_string()))
}

/// A structured value attached to a log line.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// Text: quoted in klog output, a JSON string in JSON output.
    Str(String),
    /// Numbers and booleans: written bare.
    Raw(String),
}

/// Wall-clock parts of a log line's timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub month: i8,
    pub day: i8,
    pub hour: i8,
    pub minute: i8,
    pub second: i8,
    pub micros: i32,
}

impl Stamp {
    fn now() -> (Stamp, f64) {
        let zoned = jiff::Zoned::now();
        let dt = zoned.datetime();
        let epoch = zoned.timestamp().as_nanosecond() as f64 / 1e9;
        let stamp = Stamp {
            month: dt.month(),
            day: dt.day(),
            hour: dt.hour(),
            minute: dt.minute(),
            second: dt.second(),
            micros: dt.subsec_nanosecond() / 1_000,
        };
        (stamp, epoch)
    }
}

fn severity(level: &Level) -> char {
    match *level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    }
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Formats one klog text line (with trailing newline).
pub fn format_klog_line(
    level: &Level,
    stamp: Stamp,
    pid: u32,
    file: &str,
    line: u32,
    message: &str,
    fields: &[(String, FieldValue)],
) -> String {
    let mut out = String::with_capacity(96 + message.len());
    let _ = write!(
        out,
        "{}{:02}{:02} {:02}:{:02}:{:02}.{:06} {:>7} {}:{}] {:?}",
        severity(level),
        stamp.month,
        stamp.day,
        stamp.hour,
        stamp.minute,
        stamp.second,
        stamp.micros,
        pid,
        basename(file),
        line,
        message
    );
    for (k, v) in fields {
        match v {
            FieldValue::Str(s) => {
                let _ = write!(out, " {k}={s:?}");
            }
            FieldValue::Raw(s) => {
                let _ = write!(out, " {k}={s}");
            }
        }
    }
    out.push('\n');
    out
}

/// klog verbosity reported in JSON for a tracing level.
fn json_verbosity(level: &Level) -> u8 {
    match *level {
        Level::TRACE => 6,
        Level::DEBUG => 4,
        _ => 0,
    }
}

/// Formats one component-base style JSON line (with trailing newline).
pub fn format_json_line(
    level: &Level,
    epoch_secs: f64,
    file: &str,
    line: u32,
    message: &str,
    fields: &[(String, FieldValue)],
) -> String {
    let mut map = serde_json::Map::new();
    map.insert("ts".into(), serde_json::json!(epoch_secs));
    map.insert(
        "caller".into(),
        serde_json::Value::String(format!("{}:{line}", basename(file))),
    );
    map.insert("msg".into(), serde_json::Value::String(message.to_string()));
    if *level != Level::ERROR {
        map.insert("v".into(), serde_json::json!(json_verbosity(level)));
    }
    for (k, v) in fields {
        let value = match v {
            FieldValue::Str(s) => serde_json::Value::String(s.clone()),
            FieldValue::Raw(s) => {
                serde_json::from_str(s).unwrap_or(serde_json::Value::String(s.clone()))
            }
        };
        map.insert(k.clone(), value);
    }
    let mut s = serde_json::Value::Object(map).to_string();
    s.push('\n');
    s
}

#[derive(Default)]
struct Collect {
    message: String,
    fields: Vec<(String, FieldValue)>,
}

impl Collect {
    fn push(&mut self, field: &Field, value: FieldValue) {
        if field.name().starts_with("log.") {
            return;
        }
        self.fields.push((field.name().to_string(), value));
    }
}

impl Visit for Collect {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.push(field, FieldValue::Str(value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
            return;
        }
        // Debug output of strings is already quoted; unquote so it is quoted once.
        let v = match serde_json::from_str::<String>(&text) {
            Ok(inner) if text.starts_with('"') => FieldValue::Str(inner),
            _ if text
                .chars()
                .any(|c| c.is_whitespace() || c == '"' || c == '=')
                || text.is_empty() =>
            {
                FieldValue::Str(text)
            }
            _ => FieldValue::Raw(text),
        };
        self.push(field, v);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, FieldValue::Raw(value.to_string()));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, FieldValue::Raw(value.to_string()));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.push(field, FieldValue::Raw(value.to_string()));
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.push(field, FieldValue::Raw(value.to_string()));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, FieldValue::Raw(value.to_string()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, FieldValue::Raw(value.to_string()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, FieldValue::Str(value.to_string()));
    }
}

/// A layer writing each event as one klog text or JSON line.
pub struct KlogLayer<W> {
    make_writer: W,
    json: bool,
    pid: u32,
}

impl<W> KlogLayer<W> {
    pub fn new(make_writer: W, json: bool) -> Self {
        Self {
            make_writer,
            json,
            pid: std::process::id(),
        }
    }
}

impl<S, W> Layer<S> for KlogLayer<W>
where
    S: Subscriber,
    W: for<'a> MakeWriter<'a> + 'static,
{
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        // Span events (errors recorded on exported spans) belong to the trace, not the log.
        if meta.target() == trace::TARGET {
            return;
        }
        let mut collect = Collect::default();
        event.record(&mut collect);
        let file = meta.file().unwrap_or("???");
        let line = meta.line().unwrap_or(0);
        let (stamp, epoch) = Stamp::now();
        let text = if self.json {
            format_json_line(
                meta.level(),
                epoch,
                file,
                line,
                &collect.message,
                &collect.fields,
            )
        } else {
            format_klog_line(
                meta.level(),
                stamp,
                self.pid,
                file,
                line,
                &collect.message,
                &collect.fields,
            )
        };
        // A failed log write has nowhere better to be reported.
        let _ = self.make_writer.make_writer().write_all(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    const STAMP: Stamp = Stamp {
        month: 11,
        day: 22,
        hour: 2,
        minute: 0,
        second: 37,
        micros: 123_456,
    };

    #[test]
    fn klog_text_line() {
        let fields = vec![
            ("key".to_string(), FieldValue::Str("value".into())),
            ("key2".to_string(), FieldValue::Raw("3".into())),
            ("path".to_string(), FieldValue::Str("a \"b\"".into())),
        ];
        let line = format_klog_line(
            &Level::INFO,
            STAMP,
            1234,
            "src/cli/mod.rs",
            42,
            "Starting kubelet",
            &fields,
        );
        assert_eq!(
            line,
            "I1122 02:00:37.123456    1234 mod.rs:42] \"Starting kubelet\" key=\"value\" key2=3 path=\"a \\\"b\\\"\"\n"
        );
        let w = format_klog_line(
            &Level::WARN,
            Stamp {
                month: 1,
                day: 2,
                micros: 7,
                ..STAMP
            },
            9,
            "x.rs",
            1,
            "m",
            &[],
        );
        assert_eq!(w, "W0102 02:00:37.000007       9 x.rs:1] \"m\"\n");
        assert!(format_klog_line(&Level::ERROR, STAMP, 1, "a.rs", 1, "", &[]).starts_with('E'));
        assert!(format_klog_line(&Level::DEBUG, STAMP, 1, "a.rs", 1, "", &[]).starts_with('I'));
    }

    #[test]
    fn json_line() {
        let fields = vec![
            ("pod".to_string(), FieldValue::Str("kube-system/x".into())),
            ("n".to_string(), FieldValue::Raw("3".into())),
        ];
        let line = format_json_line(&Level::INFO, 1700000000.5, "src/a.rs", 7, "hello", &fields);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(v["caller"], "a.rs:7");
        assert_eq!(v["msg"], "hello");
        assert_eq!(v["v"], 0);
        assert_eq!(v["pod"], "kube-system/x");
        assert_eq!(v["n"], 3);
        assert_eq!(v["ts"], 1700000000.5);
        let e: serde_json::Value =
            serde_json::from_str(&format_json_line(&Level::ERROR, 1.0, "a", 1, "boom", &[]))
                .unwrap_or_default();
        assert!(e.get("v").is_none());
    }

    #[test]
    fn directives_follow_verbosity() {
        assert!(filter_directives(0).starts_with("info,"));
        assert!(filter_directives(2).starts_with("info,"));
        assert!(filter_directives(3).starts_with("debug,"));
        assert!(filter_directives(5).starts_with("trace,"));
        assert!(filter_directives(5).contains("hyper=warn"));
        assert_eq!(filter_directives(8), "trace");
        assert!(EnvFilter::try_new(filter_directives(1)).is_ok());
    }

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut b) = self.0.lock() {
                b.extend_from_slice(data);
            }
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn layer_renders_tracing_events() {
        let buf = Buf::default();
        let subscriber = tracing_subscriber::registry().with(KlogLayer::new(buf.clone(), false));
        tracing::subscriber::with_default(subscriber, || {
            let path = std::path::PathBuf::from("/etc/kubernetes");
            tracing::warn!(node = "n1", pods = 3u64, ready = true, path = ?path, "Node not ready");
        });
        let out = String::from_utf8(buf.0.lock().map(|b| b.clone()).unwrap_or_default())
            .unwrap_or_default();
        assert!(out.starts_with('W'), "{out}");
        assert!(out.contains(" mod.rs:"), "{out}");
        assert!(
            out.ends_with(
                "] \"Node not ready\" node=\"n1\" pods=3 ready=true path=\"/etc/kubernetes\"\n"
            ),
            "{out}"
        );
        let pid = format!("{:>7} ", std::process::id());
        assert!(out.contains(&pid), "{out}");
    }
}
