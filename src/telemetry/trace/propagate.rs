//! W3C trace context (and baggage) across process boundaries: into the metadata of CRI calls,
//! out of the headers of requests to the kubelet API.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct Metadata<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for Metadata<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
            value.parse(),
        ) {
            self.0.insert(k, v);
        }
    }
}

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// Adds the current span's context (`traceparent`, `tracestate`, `baggage`) to an outgoing
/// gRPC request. Nothing is added, and nothing is looked up, while tracing is off.
pub fn inject_current(meta: &mut tonic::metadata::MetadataMap) {
    if !super::enabled() {
        return;
    }
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut Metadata(meta)));
}

/// The remote parent an incoming request names, if any.
pub fn extract(headers: &http::HeaderMap) -> Context {
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)))
}

/// The OpenTelemetry context of `span`, to parent work that runs elsewhere (another task) in
/// the same trace; `None` while tracing is off.
pub fn context_of(span: &tracing::Span) -> Option<Context> {
    super::enabled().then(|| span.context())
}

/// Makes `parent` the parent of `span`, which must not have been entered yet.
pub fn set_parent(span: &tracing::Span, parent: Context) {
    // Fails only for a span that was already started, which callers never pass.
    let _ = span.set_parent(parent);
}
