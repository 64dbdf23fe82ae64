//! The generated CSI (csi.v1) messages, clients and servers.

#![allow(missing_docs)]

tonic::include_proto!("csi.v1");

/// Secrets are blanked so that a request can never leak them into logs.
fn redacted(secrets: &std::collections::HashMap<String, String>) -> Vec<&str> {
    let mut keys: Vec<&str> = secrets.keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys
}

impl std::fmt::Debug for NodeStageVolumeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeStageVolumeRequest")
            .field("volume_id", &self.volume_id)
            .field("publish_context", &self.publish_context)
            .field("staging_target_path", &self.staging_target_path)
            .field("volume_capability", &self.volume_capability)
            .field("secrets (keys only)", &redacted(&self.secrets))
            .field("volume_context", &self.volume_context)
            .finish()
    }
}

impl std::fmt::Debug for NodePublishVolumeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodePublishVolumeRequest")
            .field("volume_id", &self.volume_id)
            .field("publish_context", &self.publish_context)
            .field("staging_target_path", &self.staging_target_path)
            .field("target_path", &self.target_path)
            .field("volume_capability", &self.volume_capability)
            .field("readonly", &self.readonly)
            .field("secrets (keys only)", &redacted(&self.secrets))
            .field("volume_context", &self.volume_context)
            .finish()
    }
}

impl std::fmt::Debug for NodeExpandVolumeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeExpandVolumeRequest")
            .field("volume_id", &self.volume_id)
            .field("volume_path", &self.volume_path)
            .field("capacity_range", &self.capacity_range)
            .field("staging_target_path", &self.staging_target_path)
            .field("volume_capability", &self.volume_capability)
            .field("secrets (keys only)", &redacted(&self.secrets))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_secret_keys_but_never_values() {
        let req = NodePublishVolumeRequest {
            volume_id: "vol-1".into(),
            secrets: [("password".to_string(), "hunter2".to_string())].into(),
            ..Default::default()
        };
        let shown = format!("{req:?}");
        assert!(
            shown.contains("vol-1") && shown.contains("password"),
            "{shown}"
        );
        assert!(!shown.contains("hunter2"), "{shown}");
        let stage = NodeStageVolumeRequest {
            secrets: [("token".to_string(), "s3cret".to_string())].into(),
            ..Default::default()
        };
        assert!(!format!("{stage:?}").contains("s3cret"));
        let expand = NodeExpandVolumeRequest {
            secrets: [("token".to_string(), "s3cret".to_string())].into(),
            ..Default::default()
        };
        assert!(!format!("{expand:?}").contains("s3cret"));
    }
}
