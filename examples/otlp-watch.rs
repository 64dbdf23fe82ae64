//! otlp-watch: a tiny OTLP/gRPC trace receiver that prints what a kubelet exports, one tree
//! per trace, so pod starts can be read without a trace backend (`hack/trace-watch` runs it).
//!
//! Usage: otlp-watch [--listen ADDR] [--all] [--count]
//!   --listen ADDR  where to listen (default 127.0.0.1:4317, the kubelet's default endpoint)
//!   --all          also print traces that are one CRI call on its own (the relist and stats
//!                  housekeeping, which upstream's kubelet exports too); by default they are
//!                  only counted
//!   --count        print only a running count of spans, one line per received batch

#[path = "../tests/common/otlp.rs"]
#[allow(dead_code)]
mod otlp;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use otlp::SpanRecord;

fn label(s: &SpanRecord) -> String {
    let a = |k: &str| s.attr(k).unwrap_or_default().to_string();
    let detail = match s.name.as_str() {
        "syncPod" => format!("{} ({})", a("k8s.pod"), a("k8s.pod.update_type")),
        "syncTerminatingPod" | "syncTerminatedPod" => a("k8s.pod"),
        "startContainer" => a("k8s.container.name"),
        "pullImage" => match s.attr("pulled") {
            Some("true") => format!("{} pulled", a("container.image.name")),
            Some(_) => format!("{} present", a("container.image.name")),
            None => a("container.image.name"),
        },
        "probe" => format!(
            "{} {} {}",
            a("probe.type"),
            a("k8s.container.name"),
            a("probe.result")
        ),
        _ if s.kind == "server" => format!("{} -> {}", a("http.method"), a("http.status_code")),
        _ => String::new(),
    };
    let mut out = s.name.clone();
    if !detail.trim().is_empty() {
        out.push_str("  ");
        out.push_str(detail.trim());
    }
    if s.status_code == 2 {
        out.push_str("  ERROR ");
        out.push_str(&s.status_message);
    }
    out
}

fn print_tree(
    s: &SpanRecord,
    children: &HashMap<&str, Vec<&SpanRecord>>,
    prefix: &str,
    last: bool,
    root: bool,
) {
    let (branch, next) = if root {
        ("", "")
    } else if last {
        ("└─ ", "   ")
    } else {
        ("├─ ", "│  ")
    };
    let text = format!("{prefix}{branch}{}", label(s));
    println!("{text:<88} {:>10.1} ms", s.millis());
    let kids = children
        .get(s.span_id.as_str())
        .cloned()
        .unwrap_or_default();
    let child_prefix = format!("{prefix}{next}");
    for (i, c) in kids.iter().enumerate() {
        print_tree(c, children, &child_prefix, i + 1 == kids.len(), false);
    }
}

/// One batch: its traces, each as a tree; a span whose parent came in another batch (or lives
/// in another process) starts a tree of its own, marked with the parent it points to.
fn print_batch(batch: &[SpanRecord], all: bool) {
    let mut traces: BTreeMap<&str, Vec<&SpanRecord>> = BTreeMap::new();
    for s in batch {
        traces.entry(s.trace_id.as_str()).or_default().push(s);
    }
    let mut ordered: Vec<(&str, Vec<&SpanRecord>)> = traces.into_iter().collect();
    ordered.sort_by_key(|(_, spans)| spans.iter().map(|s| s.start_ns).min());
    let mut hidden = 0;
    for (trace, mut spans) in ordered {
        if !all
            && spans.len() == 1
            && spans[0].kind == "client"
            && spans[0].parent_span_id.is_empty()
        {
            hidden += 1;
            continue;
        }
        spans.sort_by_key(|s| s.start_ns);
        let ids: std::collections::HashSet<&str> =
            spans.iter().map(|s| s.span_id.as_str()).collect();
        let mut children: HashMap<&str, Vec<&SpanRecord>> = HashMap::new();
        let mut roots = Vec::new();
        for s in &spans {
            if ids.contains(s.parent_span_id.as_str()) {
                children
                    .entry(s.parent_span_id.as_str())
                    .or_default()
                    .push(s);
            } else {
                roots.push(*s);
            }
        }
        let who = spans
            .first()
            .map(|s| {
                format!(
                    "{}@{}",
                    s.resource.get("service.name").cloned().unwrap_or_default(),
                    s.resource.get("host.name").cloned().unwrap_or_default()
                )
            })
            .unwrap_or_default();
        println!("trace {trace}  {who}");
        for r in roots {
            if !r.parent_span_id.is_empty() {
                println!("  (parent {} not in this batch)", r.parent_span_id);
            }
            print_tree(r, &children, "  ", true, true);
        }
        println!();
    }
    if hidden > 0 {
        println!("({hidden} lone CRI calls not shown; --all shows them)\n");
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut listen = "127.0.0.1:4317".to_string();
    let mut count_only = false;
    let mut all = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next().expect("--listen needs an address"),
            "--count" => count_only = true,
            "--all" => all = true,
            "-h" | "--help" => {
                println!("usage: otlp-watch [--listen ADDR] [--all] [--count]");
                return;
            }
            other => {
                eprintln!("unknown argument {other:?}; see --help");
                std::process::exit(2);
            }
        }
    }
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cannot listen on {listen}: {e}");
            std::process::exit(1);
        }
    };
    eprintln!("otlp-watch: receiving OTLP/gRPC traces on {listen}");
    static TOTAL: AtomicU64 = AtomicU64::new(0);
    let served = otlp::serve(listener, move |batch| {
        let total = TOTAL.fetch_add(batch.len() as u64, Ordering::Relaxed) + batch.len() as u64;
        if count_only {
            println!("spans {} total {total}", batch.len());
        } else {
            print_batch(&batch, all);
        }
    });
    tokio::select! {
        r = served => if let Err(e) = r {
            eprintln!("otlp-watch: {e}");
            std::process::exit(1);
        },
        _ = tokio::signal::ctrl_c() => {}
    }
}
