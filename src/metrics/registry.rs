//! Labelled counters, gauges and histograms. Each holds its series in a small map under a
//! mutex held only for the update; label sets are bounded by the code (operation names,
//! states), never by input.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::text::{Family, Kind, Sample};

/// Upstream's default histogram buckets (prometheus.DefBuckets).
pub const DEF_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// `count` buckets from `start`, each `factor` times the last (prometheus.ExponentialBuckets).
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    let mut next = start;
    for _ in 0..count {
        out.push(next);
        next *= factor;
    }
    out
}

#[derive(Clone, Copy, Debug)]
pub struct Opts {
    pub name: &'static str,
    pub help: &'static str,
    /// Stability level shown in the help text as component-base does ("ALPHA", "STABLE");
    /// empty for plain Prometheus metrics.
    pub stability: &'static str,
    pub labels: &'static [&'static str],
}

impl Opts {
    fn help(&self) -> String {
        if self.stability.is_empty() {
            self.help.to_string()
        } else {
            format!("[{}] {}", self.stability, self.help)
        }
    }

    /// Label values padded or cut to the declared names, so a wrong call site cannot panic.
    fn key(&self, values: &[&str]) -> Vec<String> {
        debug_assert_eq!(values.len(), self.labels.len(), "labels of {}", self.name);
        (0..self.labels.len())
            .map(|i| values.get(i).map(|v| v.to_string()).unwrap_or_default())
            .collect()
    }

    fn pairs(&self, key: &[String]) -> Vec<(String, String)> {
        self.labels
            .iter()
            .zip(key)
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect()
    }

    /// Metrics without labels exist from the start (value 0), as in the Go client.
    fn initial<T: Default>(&self) -> BTreeMap<Vec<String>, T> {
        let mut m = BTreeMap::new();
        if self.labels.is_empty() {
            m.insert(Vec::new(), T::default());
        }
        m
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A counter or gauge family: one f64 per label set.
pub struct Scalar {
    opts: Opts,
    kind: Kind,
    values: Mutex<BTreeMap<Vec<String>, f64>>,
}

impl Scalar {
    pub fn counter(opts: Opts) -> Self {
        Scalar {
            values: Mutex::new(opts.initial()),
            opts,
            kind: Kind::Counter,
        }
    }

    pub fn gauge(opts: Opts) -> Self {
        Scalar {
            values: Mutex::new(opts.initial()),
            opts,
            kind: Kind::Gauge,
        }
    }

    pub fn add(&self, labels: &[&str], v: f64) {
        *lock(&self.values).entry(self.opts.key(labels)).or_default() += v;
    }

    pub fn inc(&self, labels: &[&str]) {
        self.add(labels, 1.0);
    }

    pub fn set(&self, labels: &[&str], v: f64) {
        lock(&self.values).insert(self.opts.key(labels), v);
    }

    /// Drops one series (its object is gone), so the family does not grow with churn.
    pub fn remove(&self, labels: &[&str]) {
        lock(&self.values).remove(&self.opts.key(labels));
    }

    #[cfg(test)]
    pub fn get(&self, labels: &[&str]) -> Option<f64> {
        lock(&self.values).get(&self.opts.key(labels)).copied()
    }

    pub fn family(&self) -> Family {
        let samples = lock(&self.values)
            .iter()
            .map(|(k, v)| Sample::new(self.opts.pairs(k), *v))
            .collect();
        Family {
            name: self.opts.name.to_string(),
            help: self.opts.help(),
            kind: self.kind,
            samples,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Buckets {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

pub struct Histogram {
    opts: Opts,
    bounds: Vec<f64>,
    values: Mutex<BTreeMap<Vec<String>, Buckets>>,
}

impl Histogram {
    pub fn new(opts: Opts, bounds: &[f64]) -> Self {
        let mut values: BTreeMap<Vec<String>, Buckets> = opts.initial();
        for b in values.values_mut() {
            b.counts = vec![0; bounds.len()];
        }
        Histogram {
            opts,
            bounds: bounds.to_vec(),
            values: Mutex::new(values),
        }
    }

    pub fn observe(&self, labels: &[&str], v: f64) {
        let mut map = lock(&self.values);
        let b = map.entry(self.opts.key(labels)).or_insert_with(|| Buckets {
            counts: vec![0; self.bounds.len()],
            ..Default::default()
        });
        // Buckets are cumulative at exposition; here each value lands in its first bucket.
        if let Some(i) = self.bounds.iter().position(|ub| v <= *ub) {
            b.counts[i] += 1;
        }
        b.sum += v;
        b.count += 1;
    }

    /// Number of observations for a label set (tests, health).
    #[cfg(test)]
    pub fn count(&self, labels: &[&str]) -> u64 {
        lock(&self.values)
            .get(&self.opts.key(labels))
            .map_or(0, |b| b.count)
    }

    pub fn family(&self) -> Family {
        let map = lock(&self.values);
        let mut samples = Vec::new();
        for (key, b) in map.iter() {
            let pairs = self.opts.pairs(key);
            let mut cumulative = 0;
            let bounds = self.bounds.iter().map(|ub| super::text::fmt_value(*ub));
            for (le, n) in bounds
                .chain(["+Inf".to_string()])
                .zip(b.counts.iter().chain([&0]))
            {
                cumulative += n;
                let value = if le == "+Inf" { b.count } else { cumulative };
                let mut labels = pairs.clone();
                labels.push(("le".into(), le));
                samples.push(Sample {
                    suffix: "_bucket",
                    ..Sample::new(labels, value as f64)
                });
            }
            samples.push(Sample {
                suffix: "_sum",
                ..Sample::new(pairs.clone(), b.sum)
            });
            samples.push(Sample {
                suffix: "_count",
                ..Sample::new(pairs, b.count as f64)
            });
        }
        Family {
            name: self.opts.name.to_string(),
            help: self.opts.help(),
            kind: Kind::Histogram,
            samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::text::encode;
    use super::*;

    const OPTS: Opts = Opts {
        name: "t_ops_total",
        help: "Ops.",
        stability: "ALPHA",
        labels: &["operation_type"],
    };

    #[test]
    fn exponential_buckets_match_upstream_runtime_buckets() {
        let b = exponential_buckets(0.005, 2.5, 14);
        assert_eq!(b.len(), 14);
        assert_eq!(b[0], 0.005);
        assert_eq!(b[1], 0.0125);
        assert!((b[13] - 745.0580596923828).abs() < 1e-9);
    }

    #[test]
    fn counters_by_label_and_unlabelled_start_at_zero() {
        let c = Scalar::counter(OPTS);
        c.inc(&["version"]);
        c.inc(&["version"]);
        c.inc(&["status"]);
        assert_eq!(
            encode(vec![c.family()]),
            "# HELP t_ops_total [ALPHA] Ops.\n# TYPE t_ops_total counter\n\
             t_ops_total{operation_type=\"status\"} 1\nt_ops_total{operation_type=\"version\"} 2\n"
        );
        let g = Scalar::gauge(Opts {
            name: "t_g",
            help: "G.",
            stability: "",
            labels: &[],
        });
        assert_eq!(
            encode(vec![g.family()]),
            "# HELP t_g G.\n# TYPE t_g gauge\nt_g 0\n"
        );
        // An empty labelled family is not exposed at all.
        assert_eq!(encode(vec![Scalar::gauge(OPTS).family()]), "");
    }

    #[test]
    fn histogram_is_cumulative_with_inf_sum_and_count() {
        let h = Histogram::new(
            Opts {
                name: "t_seconds",
                help: "H.",
                stability: "ALPHA",
                labels: &[],
            },
            &[0.1, 1.0],
        );
        h.observe(&[], 0.05);
        h.observe(&[], 0.5);
        h.observe(&[], 7.0);
        assert_eq!(h.count(&[]), 3);
        assert_eq!(
            encode(vec![h.family()]),
            "# HELP t_seconds [ALPHA] H.\n# TYPE t_seconds histogram\n\
             t_seconds_bucket{le=\"0.1\"} 1\nt_seconds_bucket{le=\"1\"} 2\n\
             t_seconds_bucket{le=\"+Inf\"} 3\nt_seconds_sum 7.55\nt_seconds_count 3\n"
        );
    }
}
