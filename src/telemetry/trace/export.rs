//! Batched export on the tokio runtime. The SDK's own batch processor exports from a thread of
//! its own, where the tonic exporter finds no reactor; ours only queues finished spans, and a
//! task on the kubelet's runtime sends them. The queue is bounded: when the collector is slow or
//! gone, spans are dropped and counted, never buffered without limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The OpenTelemetry SDK's batch defaults, which upstream's kubelet runs with.
pub const MAX_QUEUE: usize = 2048;
const MAX_BATCH: usize = 512;
const SCHEDULE_DELAY: Duration = Duration::from_secs(5);
const EXPORT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the last spans may take to leave when the kubelet stops.
const FINAL_EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Hands finished, sampled spans to the export task.
#[derive(Debug)]
pub struct QueueProcessor {
    tx: mpsc::Sender<SpanData>,
    dropped: Arc<AtomicU64>,
}

/// The receiving end, moved into the export task once the runtime runs.
pub struct Queue {
    rx: mpsc::Receiver<SpanData>,
    dropped: Arc<AtomicU64>,
}

pub fn queue(capacity: usize) -> (QueueProcessor, Queue) {
    let (tx, rx) = mpsc::channel(capacity);
    let dropped = Arc::new(AtomicU64::new(0));
    (
        QueueProcessor {
            tx,
            dropped: dropped.clone(),
        },
        Queue { rx, dropped },
    )
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.tx.try_send(span).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Sends batches of up to [`MAX_BATCH`] spans every [`SCHEDULE_DELAY`] (sooner when a batch
/// fills) until `stop`, then sends what is left, bounded by [`FINAL_EXPORT_TIMEOUT`].
pub async fn run<E: SpanExporter>(queue: Queue, exporter: E, stop: CancellationToken) {
    let Queue { mut rx, dropped } = queue;
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut failures_logged = 0u64;
    let mut dropped_logged = 0u64;
    loop {
        let deadline = tokio::time::sleep(SCHEDULE_DELAY);
        tokio::pin!(deadline);
        let stopping = loop {
            tokio::select! {
                _ = stop.cancelled() => break true,
                _ = &mut deadline => break false,
                span = rx.recv() => match span {
                    Some(s) => {
                        batch.push(s);
                        if batch.len() >= MAX_BATCH {
                            break false;
                        }
                    }
                    None => break true,
                },
            }
        };
        if stopping {
            while let Ok(s) = rx.try_recv() {
                batch.push(s);
            }
            let last = std::mem::take(&mut batch);
            for chunk in last.chunks(MAX_BATCH) {
                match tokio::time::timeout(FINAL_EXPORT_TIMEOUT, exporter.export(chunk.to_vec()))
                    .await
                {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => tracing::warn!(%err, "Could not export the last spans"),
                    Err(_) => tracing::warn!("Exporting the last spans timed out"),
                }
            }
            return;
        }
        if !batch.is_empty() {
            let spans = std::mem::replace(&mut batch, Vec::with_capacity(MAX_BATCH));
            let count = spans.len();
            let failed = match tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(spans)).await {
                Ok(Ok(())) => None,
                Ok(Err(err)) => Some(err.to_string()),
                Err(_) => Some(format!("timed out after {EXPORT_TIMEOUT:?}")),
            };
            if let Some(err) = failed {
                // Once, then every hundredth time: a collector that is down must not flood the
                // log with one line per batch.
                if failures_logged.is_multiple_of(100) {
                    tracing::warn!(%err, spans = count, "Could not export spans");
                }
                failures_logged += 1;
            }
        }
        let now_dropped = dropped.load(Ordering::Relaxed);
        if now_dropped > dropped_logged {
            tracing::warn!(
                dropped = now_dropped - dropped_logged,
                "Dropped spans: the export queue was full"
            );
            dropped_logged = now_dropped;
        }
    }
}
