//! A published volume's usage from its driver (NodeGetVolumeStats), as upstream's CSI metrics
//! provider reads it: only from a driver that offers GET_VOLUME_STATS, and within a bound of
//! its own, as the stats provider cannot wait as long as a mount may.

use std::path::Path;
use std::time::Duration;

use tracing::debug;

use super::client::{Client, VolumeStats};
use super::drivers::Drivers;

/// Bounds the whole reading: dialling, capabilities and the call.
const USAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The usage of volume `handle` published at `target` by `driver`; None when the driver is
/// not registered, does not offer GET_VOLUME_STATS, or fails (logged).
pub async fn volume_stats(
    drivers: &Drivers,
    driver: &str,
    handle: &str,
    target: &Path,
) -> Option<VolumeStats> {
    let endpoint = drivers.get(driver)?.endpoint;
    let read = async {
        let mut client = Client::connect(&endpoint).await?;
        if !client.node_get_capabilities().await?.get_volume_stats {
            return Ok(None);
        }
        let target = target.to_string_lossy();
        client
            .node_get_volume_stats(handle, &target, USAGE_TIMEOUT)
            .await
            .map(Some)
    };
    match tokio::time::timeout(USAGE_TIMEOUT, read).await {
        Ok(Ok(stats)) => stats,
        Ok(Err(e)) => {
            debug!(driver, volume = handle, err = %e, "Reading a CSI volume's usage");
            None
        }
        Err(_) => {
            debug!(
                driver,
                volume = handle,
                "Reading a CSI volume's usage timed out"
            );
            None
        }
    }
}
