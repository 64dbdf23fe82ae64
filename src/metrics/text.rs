//! The Prometheus text exposition format 0.0.4, written the way the Go client writes it
//! (families sorted by name, labels sorted by name with `le` last, floats in Go's shortest
//! `%g` form), so scrapes of upstream and of this kubelet diff cleanly.

use std::fmt::Write;

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One line: `<family name><suffix>{labels} value [timestamp]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub suffix: &'static str,
    pub labels: Vec<(String, String)>,
    pub value: f64,
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    pub fn new(labels: Vec<(String, String)>, value: f64) -> Self {
        Sample {
            suffix: "",
            labels,
            value,
            timestamp_ms: None,
        }
    }

    pub fn at(mut self, timestamp_ms: Option<i64>) -> Self {
        self.timestamp_ms = timestamp_ms;
        self
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    pub name: String,
    pub help: String,
    pub kind: Kind,
    pub samples: Vec<Sample>,
}

/// Label pairs from static names and values, for collectors.
pub fn labels<const N: usize>(names: [&str; N], values: [&str; N]) -> Vec<(String, String)> {
    names
        .iter()
        .zip(values.iter())
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// Go's `strconv.FormatFloat(v, 'g', -1, 64)`: shortest digits, exponent form below 1e-4 or
/// from 1e6 on.
pub fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let sci = format!("{v:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return format!("{v}");
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        return format!("{v}");
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

fn write_sample(out: &mut String, name: &str, s: &Sample) {
    out.push_str(name);
    out.push_str(s.suffix);
    let mut pairs: Vec<&(String, String)> = s.labels.iter().collect();
    // `le` stays where the histogram put it: last.
    pairs.sort_by(|a, b| (a.0 == "le").cmp(&(b.0 == "le")).then(a.0.cmp(&b.0)));
    if !pairs.is_empty() {
        out.push('{');
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape_label(v));
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(&fmt_value(s.value));
    if let Some(ts) = s.timestamp_ms {
        let _ = write!(out, " {ts}");
    }
    out.push('\n');
}

/// HELP and TYPE lines of a family, with no samples.
pub fn write_header(out: &mut String, name: &str, help: &str, kind: Kind) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {}", kind.as_str());
}

/// Families sorted by name; a family without samples is left out, as the Go client does.
pub fn encode(mut families: Vec<Family>) -> String {
    families.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        write_header(&mut out, &f.name, &f.help, f.kind);
        for s in &f.samples {
            write_sample(&mut out, &f.name, s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_like_go() {
        assert_eq!(fmt_value(0.0), "0");
        assert_eq!(fmt_value(1.0), "1");
        assert_eq!(fmt_value(0.005), "0.005");
        assert_eq!(fmt_value(123456.0), "123456");
        assert_eq!(fmt_value(1234567.0), "1.234567e+06");
        assert_eq!(fmt_value(1e6), "1e+06");
        assert_eq!(fmt_value(0.00005), "5e-05");
        assert_eq!(fmt_value(0.0001), "0.0001");
        assert_eq!(fmt_value(1.7e9), "1.7e+09");
        assert_eq!(fmt_value(-2.5), "-2.5");
        assert_eq!(fmt_value(f64::INFINITY), "+Inf");
        assert_eq!(fmt_value(f64::NAN), "NaN");
        assert_eq!(fmt_value(0.1 * 3.0), "0.30000000000000004");
    }

    #[test]
    fn families_sorted_labels_sorted_le_last_values_escaped() {
        let f = |name: &str, samples| Family {
            name: name.into(),
            help: "line\\one\ntwo".into(),
            kind: Kind::Gauge,
            samples,
        };
        let text = encode(vec![
            f(
                "zz",
                vec![Sample {
                    suffix: "_bucket",
                    labels: labels(["le", "b", "a"], ["+Inf", "x\"y", "a\\b\n"]),
                    value: 3.0,
                    timestamp_ms: Some(1700000000123),
                }],
            ),
            f("aa", vec![Sample::new(vec![], 1.0)]),
            f("empty", vec![]),
        ]);
        assert_eq!(
            text,
            "# HELP aa line\\\\one\\ntwo\n# TYPE aa gauge\naa 1\n\
             # HELP zz line\\\\one\\ntwo\n# TYPE zz gauge\n\
             zz_bucket{a=\"a\\\\b\\n\",b=\"x\\\"y\",le=\"+Inf\"} 3 1700000000123\n"
        );
    }
}
