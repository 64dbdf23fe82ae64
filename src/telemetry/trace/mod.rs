//! OpenTelemetry traces, as upstream's kubelet exports them with the `tracing` block of its
//! configuration: spans made with `tracing` under [`TARGET`] become OpenTelemetry spans, sampled
//! parent-based at `samplingRatePerMillion`, and leave over OTLP/gRPC to `endpoint`.
//!
//! Without the block nothing here runs: no exporter, no OpenTelemetry layer, and the
//! [`TARGET`] spans are disabled at the filter, so they cost one filter check.

mod endpoint;
mod export;
pub mod propagate;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::propagation::TextMapCompositePropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithTonicConfig;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tokio_util::sync::CancellationToken;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::config::TracingConfiguration;
use endpoint::Target;
pub use endpoint::{DEFAULT_ENDPOINT, EndpointError, parse as parse_endpoint};

/// The `tracing` target of the spans that are exported; other spans stay local.
pub const TARGET: &str = "kubelet::trace";

/// upstream's instrumentation scope for the kubelet's own spans.
const SCOPE: &str = "k8s.io/kubernetes/pkg/kubelet";

/// Dialling the collector; export calls have their own bound (see `export`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported (a `tracing` block was given).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Marks the span failed with the error, as upstream's RecordError and SetStatus do.
pub fn record_error(span: &Span, err: &dyn std::fmt::Display) {
    if !enabled() {
        return;
    }
    let message = err.to_string();
    set_failed(span, &message);
    tracing::event!(
        target: TARGET,
        parent: span,
        tracing::Level::ERROR,
        exception.message = message.as_str(),
        "exception"
    );
}

/// Sets the span's status to Error with `description`.
pub fn set_failed(span: &Span, description: &str) {
    if enabled() {
        span.set_status(opentelemetry::trace::Status::error(description.to_string()));
    }
}

/// Sets attributes on an exported span (no work while tracing is off).
pub fn set_attributes<const N: usize>(span: &Span, attributes: [(&'static str, &str); N]) {
    if enabled() {
        for (key, value) in attributes {
            span.set_attribute(key, value.to_string());
        }
    }
}

/// Why traces cannot be exported as configured.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// `tracing.endpoint` is no gRPC target we can dial.
    #[error("could not configure tracer provider: tracing.endpoint: {0}")]
    Endpoint(#[from] EndpointError),
    /// The OTLP exporter could not be built.
    #[error("could not configure tracer provider: {0}")]
    Exporter(String),
}

/// The tracer provider and the queue of finished spans, made before logging starts (the
/// OpenTelemetry layer is part of the subscriber) and before the runtime exists (the exporter
/// is built on it, by [`Pipeline::spawn_export`]).
pub struct Pipeline {
    provider: SdkTracerProvider,
    queue: export::Queue,
    target: Target,
    /// Given to the exporter, which sends it with every batch (our processor does not).
    resource: opentelemetry_sdk::Resource,
}

/// Upstream's sampler: the parent's decision, else the configured rate (none when unset or 0).
fn sampler(rate_per_million: Option<i32>) -> Sampler {
    let root = match rate_per_million {
        Some(r) if r > 0 => Sampler::TraceIdRatioBased(f64::from(r) / 1_000_000.0),
        _ => Sampler::AlwaysOff,
    };
    Sampler::ParentBased(Box::new(root))
}

/// Builds the pipeline for a `tracing` block; the node name is the resource's `host.name`.
pub fn pipeline(config: &TracingConfiguration, host_name: &str) -> Result<Pipeline, TraceError> {
    let endpoint = config
        .endpoint
        .as_deref()
        .filter(|e| !e.is_empty())
        .unwrap_or(DEFAULT_ENDPOINT);
    let target = endpoint::parse(endpoint)?;
    let (processor, queue) = export::queue(export::MAX_QUEUE);
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name("kubelet")
        .with_attribute(KeyValue::new("host.name", host_name.to_string()))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler(config.sampling_rate_per_million))
        .with_resource(resource.clone())
        .build();
    opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ]));
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Pipeline {
        provider,
        queue,
        target,
        resource,
    })
}

impl Pipeline {
    /// The subscriber layer that turns [`TARGET`] spans into OpenTelemetry spans.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer(SCOPE))
            // Source locations and thread names are ours, not upstream's attributes.
            .with_location(false)
            .with_threads(false)
            .with_level(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.target() == TARGET
            }))
    }

    /// Starts exporting on the current runtime until `stop`; the task then sends what is left.
    pub fn spawn_export(
        self,
        stop: CancellationToken,
    ) -> Result<tokio::task::JoinHandle<()>, TraceError> {
        let channel = channel(&self.target)?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_channel(channel)
            .build()
            .map_err(|e| TraceError::Exporter(e.to_string()))?;
        opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &self.resource);
        let provider = self.provider;
        Ok(tokio::spawn(async move {
            export::run(self.queue, exporter, stop).await;
            // Spans ending after this are dropped with the queue.
            drop(provider);
        }))
    }
}

/// A lazily connected channel: a collector that is not up yet costs failed exports, never a
/// failed start.
fn channel(target: &Target) -> Result<tonic::transport::Channel, TraceError> {
    use hyper_util::rt::TokioIo;
    use tonic::transport::{Endpoint, Uri};
    let bad = |e: tonic::transport::Error| TraceError::Exporter(e.to_string());
    match target {
        Target::Tcp { authority } => Ok(Endpoint::from_shared(format!("http://{authority}"))
            .map_err(bad)?
            .connect_timeout(CONNECT_TIMEOUT)
            .connect_lazy()),
        Target::Unix(path) => {
            let path = path.clone();
            let connector = tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let s = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(s))
                }
            });
            Ok(Endpoint::from_static("http://localhost")
                .connect_timeout(CONNECT_TIMEOUT)
                .connect_with_connector_lazy(connector))
        }
        Target::Abstract(name) => {
            let name = name.clone();
            let connector = tower::service_fn(move |_: Uri| {
                let name = name.clone();
                async move {
                    // std has the abstract address; its connect blocks, so it runs off the
                    // runtime, bounded by the channel's connect timeout.
                    let s = tokio::task::spawn_blocking(move || {
                        use std::os::linux::net::SocketAddrExt;
                        let addr =
                            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
                        let s = std::os::unix::net::UnixStream::connect_addr(&addr)?;
                        s.set_nonblocking(true)?;
                        Ok::<_, std::io::Error>(s)
                    })
                    .await
                    .map_err(std::io::Error::other)??;
                    Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::from_std(s)?))
                }
            });
            Ok(Endpoint::from_static("http://localhost")
                .connect_timeout(CONNECT_TIMEOUT)
                .connect_with_connector_lazy(connector))
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanKind, TraceId};
    use opentelemetry_sdk::trace::SamplingDecision;
    use opentelemetry_sdk::trace::ShouldSample;

    use super::*;

    fn decide(s: &Sampler, id: u128) -> SamplingDecision {
        s.should_sample(
            None,
            TraceId::from(id),
            "syncPod",
            &SpanKind::Internal,
            &[],
            &[],
        )
        .decision
    }

    #[test]
    fn sampler_follows_the_rate() {
        assert_eq!(decide(&sampler(None), 1), SamplingDecision::Drop);
        assert_eq!(decide(&sampler(Some(0)), 1), SamplingDecision::Drop);
        assert_eq!(
            decide(&sampler(Some(1_000_000)), u128::MAX),
            SamplingDecision::RecordAndSample
        );
    }
}
