//! The calls the systemd driver makes to systemd's manager over the D-Bus system bus.
//!
//! Cgroup work is synchronous (callers sit in `spawn_blocking` or in start-up code), while
//! the D-Bus client is async; one thread of our own owns the connection and a small runtime
//! and serves calls one at a time, so a caller anywhere just waits on a reply channel with a
//! deadline. The thread ends when the driver is dropped.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};
use zbus::zvariant::{OwnedObjectPath, Value};

const SYSTEMD: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const UNIT: &str = "org.freedesktop.systemd1.Unit";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
/// One call, connecting included; systemd answers in milliseconds when it is healthy.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a started or stopped unit may take to settle (a job systemd queued).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);
const SETTLE_POLL: Duration = Duration::from_millis(20);
/// Calls waiting for the bus thread; callers beyond that wait to enqueue.
const QUEUE: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("systemd bus: {0}")]
    Bus(#[from] zbus::Error),
    #[error("systemd bus: {op} {unit}: no answer within {0:?}", CALL_TIMEOUT)]
    Timeout { op: &'static str, unit: String },
    #[error(
        "systemd: unit {unit} did not become {want} within {0:?} (it is {state})",
        SETTLE_TIMEOUT
    )]
    Settle {
        unit: String,
        want: &'static str,
        state: String,
    },
    #[error("systemd bus: the bus thread is gone")]
    Gone,
}

/// A unit property value as systemd's D-Bus API types it.
#[derive(Clone, Debug, PartialEq)]
pub enum Prop {
    U64(u64),
    Bool(bool),
    Str(String),
}

impl Prop {
    fn value(&self) -> Value<'_> {
        match self {
            Prop::U64(v) => Value::from(*v),
            Prop::Bool(v) => Value::from(*v),
            Prop::Str(v) => Value::from(v.as_str()),
        }
    }
}

pub type Props = Vec<(&'static str, Prop)>;

#[derive(Debug)]
enum Call {
    /// Starts a transient unit, or updates its properties when it already exists.
    StartOrSet {
        unit: String,
        create: Props,
        update: Props,
    },
    /// Stops the unit and forgets it; absent units are fine.
    Stop { unit: String },
    /// The unit's ActiveState, None when systemd does not know it.
    State { unit: String },
}

impl Call {
    fn op(&self) -> (&'static str, &str) {
        match self {
            Call::StartOrSet { unit, .. } => ("start", unit),
            Call::Stop { unit } => ("stop", unit),
            Call::State { unit } => ("state", unit),
        }
    }
}

struct Job {
    call: Call,
    reply: mpsc::SyncSender<Result<Option<String>, BusError>>,
}

pub struct SystemdBus {
    jobs: mpsc::SyncSender<Job>,
}

impl SystemdBus {
    /// Starts the bus thread; it connects on the first call (and again after a failure), so
    /// a systemd restart costs one failed call, not the kubelet.
    pub fn start() -> std::io::Result<SystemdBus> {
        let (jobs, rx) = mpsc::sync_channel::<Job>(QUEUE);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("systemd-bus".into())
            .spawn(move || serve(runtime, rx))?;
        Ok(SystemdBus { jobs })
    }

    fn call(&self, call: Call) -> Result<Option<String>, BusError> {
        let (op, unit) = call.op();
        let (op, unit) = (op, unit.to_string());
        let (reply, answer) = mpsc::sync_channel(1);
        self.jobs
            .send(Job { call, reply })
            .map_err(|_| BusError::Gone)?;
        // Settling polls run inside the call, so allow for them on top of the call itself.
        match answer.recv_timeout(CALL_TIMEOUT * 2 + SETTLE_TIMEOUT) {
            Ok(result) => result,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(BusError::Timeout { op, unit }),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(BusError::Gone),
        }
    }

    /// Makes sure the unit exists and is active with these properties: `create` when it is
    /// new, `update` (the resource settings systemd lets change at runtime) when not.
    pub fn start_or_set(&self, unit: &str, create: Props, update: Props) -> Result<(), BusError> {
        self.call(Call::StartOrSet {
            unit: unit.to_string(),
            create,
            update,
        })
        .map(drop)
    }

    pub fn stop(&self, unit: &str) -> Result<(), BusError> {
        self.call(Call::Stop {
            unit: unit.to_string(),
        })
        .map(drop)
    }

    pub fn active_state(&self, unit: &str) -> Result<Option<String>, BusError> {
        self.call(Call::State {
            unit: unit.to_string(),
        })
    }
}

fn serve(runtime: tokio::runtime::Runtime, jobs: mpsc::Receiver<Job>) {
    let mut conn: Option<zbus::Connection> = None;
    while let Ok(job) = jobs.recv() {
        let (op, unit) = job.call.op();
        let (op, unit) = (op, unit.to_string());
        let result = runtime.block_on(async {
            let c = match &conn {
                Some(c) => c.clone(),
                None => {
                    let c = tokio::time::timeout(CALL_TIMEOUT, connect())
                        .await
                        .map_err(|_| BusError::Timeout {
                            op: "connect",
                            unit: unit.clone(),
                        })??;
                    conn = Some(c.clone());
                    c
                }
            };
            run(&c, job.call).await
        });
        if let Err(BusError::Bus(e)) = &result
            && !matches!(e, zbus::Error::MethodError(..))
        {
            // A transport failure: the next call reconnects.
            warn!(op, unit, err = %e, "systemd bus call failed; reconnecting next time");
            conn = None;
        }
        let _ = job.reply.send(result);
    }
}

async fn connect() -> Result<zbus::Connection, BusError> {
    Ok(zbus::connection::Builder::system()?.build().await?)
}

fn error_name(e: &zbus::Error) -> Option<&str> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.as_str()),
        _ => None,
    }
}

async fn timed<T>(
    op: &'static str,
    unit: &str,
    fut: impl Future<Output = Result<T, zbus::Error>>,
) -> Result<T, BusError> {
    tokio::time::timeout(CALL_TIMEOUT, fut)
        .await
        .map_err(|_| BusError::Timeout {
            op,
            unit: unit.to_string(),
        })?
        .map_err(BusError::Bus)
}

async fn run(c: &zbus::Connection, call: Call) -> Result<Option<String>, BusError> {
    match call {
        Call::StartOrSet {
            unit,
            create,
            update,
        } => {
            let props: Vec<(&str, Value)> = create.iter().map(|(k, v)| (*k, v.value())).collect();
            let aux: Vec<(&str, Vec<(&str, Value)>)> = Vec::new();
            let started = timed(
                "StartTransientUnit",
                &unit,
                c.call_method(
                    Some(SYSTEMD),
                    MANAGER_PATH,
                    Some(MANAGER),
                    "StartTransientUnit",
                    &(unit.as_str(), "replace", props, aux),
                ),
            )
            .await;
            match started {
                Ok(_) => {
                    debug!(unit, "Started transient unit");
                    settle(c, &unit, true).await?;
                }
                Err(BusError::Bus(e))
                    if error_name(&e) == Some("org.freedesktop.systemd1.UnitExists") =>
                {
                    let props: Vec<(&str, Value)> =
                        update.iter().map(|(k, v)| (*k, v.value())).collect();
                    timed(
                        "SetUnitProperties",
                        &unit,
                        c.call_method(
                            Some(SYSTEMD),
                            MANAGER_PATH,
                            Some(MANAGER),
                            "SetUnitProperties",
                            &(unit.as_str(), true, props),
                        ),
                    )
                    .await?;
                    debug!(unit, "Updated unit properties");
                }
                Err(e) => return Err(e),
            }
            Ok(None)
        }
        Call::Stop { unit } => {
            let stopped = timed(
                "StopUnit",
                &unit,
                c.call_method(
                    Some(SYSTEMD),
                    MANAGER_PATH,
                    Some(MANAGER),
                    "StopUnit",
                    &(unit.as_str(), "replace"),
                ),
            )
            .await;
            match stopped {
                Ok(_) => settle(c, &unit, false).await?,
                Err(BusError::Bus(e))
                    if error_name(&e) == Some("org.freedesktop.systemd1.NoSuchUnit") => {}
                Err(e) => return Err(e),
            }
            // A unit that failed to stop cleanly stays loaded as "failed" until reset.
            let _ = timed(
                "ResetFailedUnit",
                &unit,
                c.call_method(
                    Some(SYSTEMD),
                    MANAGER_PATH,
                    Some(MANAGER),
                    "ResetFailedUnit",
                    &(unit.as_str(),),
                ),
            )
            .await;
            Ok(None)
        }
        Call::State { unit } => active_state(c, &unit).await,
    }
}

async fn active_state(c: &zbus::Connection, unit: &str) -> Result<Option<String>, BusError> {
    let reply = timed(
        "GetUnit",
        unit,
        c.call_method(
            Some(SYSTEMD),
            MANAGER_PATH,
            Some(MANAGER),
            "GetUnit",
            &(unit,),
        ),
    )
    .await;
    let path: OwnedObjectPath = match reply {
        Ok(m) => m.body().deserialize()?,
        Err(BusError::Bus(e)) if error_name(&e) == Some("org.freedesktop.systemd1.NoSuchUnit") => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let reply = timed(
        "Get ActiveState",
        unit,
        c.call_method(
            Some(SYSTEMD),
            path.as_str(),
            Some(PROPERTIES),
            "Get",
            &(UNIT, "ActiveState"),
        ),
    )
    .await?;
    let value: zbus::zvariant::OwnedValue = reply.body().deserialize()?;
    Ok(Some(String::try_from(value).map_err(zbus::Error::from)?))
}

/// Waits until the job systemd queued for the unit has run: active after a start, gone or
/// inactive after a stop. A slice starts at once; a stop waits for what runs inside.
async fn settle(c: &zbus::Connection, unit: &str, up: bool) -> Result<(), BusError> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let state = active_state(c, unit).await?;
        let done = match (up, state.as_deref()) {
            (true, Some("active")) => true,
            (true, Some("failed")) => {
                return Err(BusError::Settle {
                    unit: unit.to_string(),
                    want: "active",
                    state: "failed".into(),
                });
            }
            (false, None | Some("inactive" | "failed")) => true,
            _ => false,
        };
        if done {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(BusError::Settle {
                unit: unit.to_string(),
                want: if up { "active" } else { "inactive" },
                state: state.unwrap_or_else(|| "gone".into()),
            });
        }
        tokio::time::sleep(SETTLE_POLL).await;
    }
}
