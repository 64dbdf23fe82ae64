//! The plugin manager with its handlers: CSI drivers register here (the volume manager finds
//! them in the returned registry), and with an API server the node's CSINode object is made
//! at start, as upstream's CSI plugin makes it; device plugins may announce themselves here
//! too, for the device manager.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Core, KubeletError};
use crate::pluginmanager::{self, Handlers};
use crate::tasks::Tasks;
use crate::volume::csi::nodeinfo::NodeInfoPublisher;
use crate::volume::csi::{Drivers, Registration};

/// Pause between tries to make the CSINode, doubling up to the cap: the Node may not be
/// registered yet.
const INIT_FIRST_PAUSE: Duration = Duration::from_millis(500);
const INIT_MAX_PAUSE: Duration = Duration::from_secs(30);

pub(super) fn spawn(
    core: &Core,
    tasks: &mut Tasks,
    cancel: &CancellationToken,
) -> Result<Arc<Drivers>, KubeletError> {
    let drivers = Arc::new(Drivers::default());
    let publisher = core
        .api
        .as_ref()
        .map(|client| NodeInfoPublisher::new(client.clone(), &core.node_name));
    if let Some(p) = publisher.clone() {
        tasks.background(
            "CSINode initialization",
            initialize(p, cancel.child_token()),
        );
    }
    core.devices.mark_registry_announcements();
    let handlers = Handlers {
        csi: Some(Registration::new(drivers.clone(), publisher)),
        devices: Some(core.devices.clone()),
    };
    pluginmanager::spawn(&core.settings.flags.root_dir, handlers, tasks, cancel)?;
    Ok(drivers)
}

async fn initialize(publisher: NodeInfoPublisher, cancel: CancellationToken) {
    let mut pause = INIT_FIRST_PAUSE;
    loop {
        match publisher.initialize().await {
            Ok(()) => {
                info!("CSINode initialized");
                return;
            }
            Err(e) => warn!(err = %e, retry_in = ?pause, "Failed to initialize CSINode"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(INIT_MAX_PAUSE);
    }
}
