//! The kubelet's side of a plugin's Registration service (pluginregistration): who is on
//! this socket, and the verdict. Bounds as upstream's: 10 s to connect, 1 s for GetInfo, 5 s
//! for the verdict.

use std::path::Path;
use std::time::Duration;

use tonic::transport::Channel;

use api::registration_client::RegistrationClient;

/// The generated pluginregistration messages, client and server.
#[allow(missing_docs)]
pub mod api {
    tonic::include_proto!("pluginregistration");
}

const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
const INFO_TIMEOUT: Duration = Duration::from_secs(1);
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

pub struct PluginConn {
    client: RegistrationClient<Channel>,
}

impl PluginConn {
    pub async fn dial(socket: &Path) -> Result<Self, String> {
        let channel = crate::grpc_uds::dial(socket, DIAL_TIMEOUT)
            .await
            .map_err(|e| format!("failed to dial socket {}, err: {e}", socket.display()))?;
        Ok(Self {
            client: RegistrationClient::new(channel),
        })
    }

    pub async fn get_info(&mut self) -> Result<api::PluginInfo, String> {
        match tokio::time::timeout(INFO_TIMEOUT, self.client.get_info(api::InfoRequest {})).await {
            Ok(Ok(reply)) => Ok(reply.into_inner()),
            Ok(Err(status)) => Err(status.to_string()),
            Err(_) => Err(format!("no answer within {INFO_TIMEOUT:?}")),
        }
    }

    /// Tells the plugin whether it is registered (`error` empty) or why not.
    pub async fn notify(&mut self, error: &str) -> Result<(), String> {
        let status = api::RegistrationStatus {
            plugin_registered: error.is_empty(),
            error: error.to_string(),
        };
        match tokio::time::timeout(
            NOTIFY_TIMEOUT,
            self.client.notify_registration_status(status),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) => Err(status.to_string()),
            Err(_) => Err(format!("no answer within {NOTIFY_TIMEOUT:?}")),
        }
    }
}
