//! The `kubelet` binary: flags, logging and signals; the library does the rest.

use std::process::ExitCode;

use anyhow::Context;
use kubelet_rs::{Settings, TracePipeline};
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    // kube and the servers share rustls; exactly one crypto backend (ring) is compiled in and it
    // is made the process default before anything builds a TLS config.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = match kubelet_rs::parse(std::env::args_os()) {
        Ok(s) => s,
        Err(err) => {
            let code = err.exit_code();
            if code == 0 {
                println!("{err}");
            } else {
                eprintln!("Error: {err}");
            }
            return ExitCode::from(code as u8);
        }
    };
    let traces = match settings.config.tracing.as_ref() {
        Some(config) => match kubelet_rs::trace_pipeline(config, &settings.node_name()) {
            Ok(p) => Some(p),
            Err(err) => {
                eprintln!("Error: {err}");
                return ExitCode::from(1);
            }
        },
        None => None,
    };
    if let Err(err) = kubelet_rs::init_logging(
        settings.flags.verbosity,
        &settings.config.logging.format,
        traces.as_ref(),
    ) {
        eprintln!("Error: initialising logging: {err}");
        return ExitCode::from(1);
    }
    match run(settings, traces) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(err = %format!("{err:#}"), "command failed");
            ExitCode::from(1)
        }
    }
}

fn run(settings: Settings, traces: Option<TracePipeline>) -> anyhow::Result<()> {
    for warning in &settings.warnings {
        tracing::warn!("{warning}");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kubelet")
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        let cancel = CancellationToken::new();
        let on_signal = cancel.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            on_signal.cancel();
        });
        // Stopped after the kubelet, so the spans of its last work still leave.
        let export_stop = CancellationToken::new();
        let exporter = match traces {
            Some(p) => Some(p.spawn_export(export_stop.clone())?),
            None => None,
        };
        let result = kubelet_rs::run(settings, cancel)
            .await
            .context("failed to run Kubelet");
        export_stop.cancel();
        if let Some(task) = exporter {
            // The task bounds its own last export; this only guards against a stuck one.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), task).await;
        }
        result
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the process still dies on SIGTERM by default.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
