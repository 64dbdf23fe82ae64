//! The calls graceful node shutdown makes to systemd-logind (and one to systemd) over the
//! D-Bus system bus: the delay it grants inhibitors, a delay inhibitor lock, and the
//! PrepareForShutdown signal.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use zbus::zvariant::{OwnedFd, OwnedValue};

const LOGIND: &str = "org.freedesktop.login1";
const LOGIND_PATH: &str = "/org/freedesktop/login1";
const LOGIND_MANAGER: &str = "org.freedesktop.login1.Manager";
const SYSTEMD: &str = "org.freedesktop.systemd1";
const SYSTEMD_PATH: &str = "/org/freedesktop/systemd1";
const SYSTEMD_MANAGER: &str = "org.freedesktop.systemd1.Manager";
/// Every call; logind answers in milliseconds when it is healthy.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Signals waiting to be read; logind sends one per shutdown request.
const SIGNAL_QUEUE: usize = 8;
/// Where upstream's kubelet raises logind's InhibitDelayMaxSec.
pub const DROP_IN: &str = "/etc/systemd/logind.conf.d/99-kubelet.conf";

#[derive(Debug, thiserror::Error)]
pub enum LogindError {
    #[error("logind: {0}")]
    Bus(#[from] zbus::Error),
    #[error("logind: {0}: no answer within {CALL_TIMEOUT:?}")]
    Timeout(&'static str),
    #[error("writing {path}: {source}")]
    DropIn {
        path: String,
        source: std::io::Error,
    },
    #[error("the system bus closed the signal stream")]
    Closed,
}

async fn timed<T>(
    what: &'static str,
    fut: impl Future<Output = Result<T, zbus::Error>>,
) -> Result<T, LogindError> {
    tokio::time::timeout(CALL_TIMEOUT, fut)
        .await
        .map_err(|_| LogindError::Timeout(what))?
        .map_err(LogindError::Bus)
}

pub async fn connect() -> Result<zbus::Connection, LogindError> {
    timed("connect", async {
        zbus::connection::Builder::system()?.build().await
    })
    .await
}

/// logind's InhibitDelayMaxUSec: how long a delay lock may hold a shutdown back.
pub async fn inhibit_delay_max(c: &zbus::Connection) -> Result<Duration, LogindError> {
    let reply = timed(
        "get InhibitDelayMaxUSec",
        c.call_method(
            Some(LOGIND),
            LOGIND_PATH,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(LOGIND_MANAGER, "InhibitDelayMaxUSec"),
        ),
    )
    .await?;
    let value: OwnedValue = reply.body().deserialize()?;
    let usec = u64::try_from(value).map_err(zbus::Error::from)?;
    Ok(Duration::from_micros(usec))
}

/// The drop-in that raises InhibitDelayMaxSec, as upstream writes it.
pub fn drop_in_text(delay: Duration) -> String {
    format!(
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={}\n",
        delay.as_secs()
    )
}

pub fn write_drop_in(path: &Path, delay: Duration) -> Result<(), LogindError> {
    let failed = |source| LogindError::DropIn {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    std::fs::write(path, drop_in_text(delay)).map_err(failed)
}

/// Makes logind read its configuration again (SIGHUP through systemd, as upstream does).
pub async fn reload(c: &zbus::Connection) -> Result<(), LogindError> {
    timed(
        "KillUnit systemd-logind.service",
        c.call_method(
            Some(SYSTEMD),
            SYSTEMD_PATH,
            Some(SYSTEMD_MANAGER),
            "KillUnit",
            &("systemd-logind.service", "all", libc::SIGHUP),
        ),
    )
    .await
    .map(drop)
}

/// A delay inhibitor lock on shutdown; it holds as long as the descriptor is open.
pub async fn inhibit(c: &zbus::Connection) -> Result<OwnedFd, LogindError> {
    let reply = timed(
        "Inhibit",
        c.call_method(
            Some(LOGIND),
            LOGIND_PATH,
            Some(LOGIND_MANAGER),
            "Inhibit",
            &(
                "shutdown",
                "kubelet",
                "Kubelet needs time to handle node shutdown",
                "delay",
            ),
        ),
    )
    .await?;
    Ok(reply.body().deserialize::<OwnedFd>()?)
}

/// logind's PrepareForShutdown signals: true when a shutdown starts, false when it was
/// cancelled.
pub async fn shutdown_signals(
    c: &zbus::Connection,
) -> Result<impl futures::Stream<Item = Result<bool, LogindError>> + Unpin, LogindError> {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .interface(LOGIND_MANAGER)?
        .member("PrepareForShutdown")?
        .build();
    let stream = timed(
        "subscribe to PrepareForShutdown",
        zbus::MessageStream::for_match_rule(rule, c, Some(SIGNAL_QUEUE)),
    )
    .await?;
    Ok(stream.map(|m| {
        let m = m?;
        Ok(m.body().deserialize::<bool>()?)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_in_like_upstream() {
        assert_eq!(
            drop_in_text(Duration::from_secs(30)),
            "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n"
        );
    }
}
