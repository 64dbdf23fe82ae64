//! The rotation settings, read from `containerLogMaxSize`, `containerLogMaxFiles`,
//! `containerLogMaxWorkers` and `containerLogMonitorInterval`.
//!
//! Upstream checks the first two when it builds its log manager, not in config validation, so
//! their problems are reported here with upstream's words (the other two are validated with
//! the rest of the configuration in `cli::validate`).

use std::time::Duration;

use crate::config::KubeletConfiguration;
use crate::quantity::{Amount, NANO, QuantityError};

/// Why the settings cannot drive rotation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("invalid MaxFiles {0}, must be > 1")]
    MaxFiles(i32),
    #[error("failed to parse container log max size {size:?}: {reason}")]
    MaxSize { size: String, reason: String },
}

/// How the container logs are rotated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// A log at least this big (bytes) is rotated.
    pub max_size: u64,
    /// Files per container log at most: the current one plus the rotated ones.
    pub max_files: usize,
    /// Containers rotated at the same time, at most.
    pub workers: usize,
    /// How often the logs are looked at.
    pub interval: Duration,
}

impl Policy {
    /// `None` when rotation is off: a negative max size, as upstream.
    pub fn from_config(kc: &KubeletConfiguration) -> Result<Option<Policy>, PolicyError> {
        let max_files = match usize::try_from(kc.container_log_max_files) {
            Ok(n) if n > 1 => n,
            _ => return Err(PolicyError::MaxFiles(kc.container_log_max_files)),
        };
        let size =
            parse_max_size(&kc.container_log_max_size).map_err(|reason| PolicyError::MaxSize {
                size: kc.container_log_max_size.clone(),
                reason,
            })?;
        let Ok(max_size) = u64::try_from(size) else {
            return Ok(None);
        };
        Ok(Some(Policy {
            max_size,
            max_files,
            // Validation already refused fewer than one worker; one still runs if it did not.
            workers: usize::try_from(kc.container_log_max_workers)
                .unwrap_or(1)
                .max(1),
            interval: kc.container_log_monitor_interval.as_duration(),
        }))
    }
}

/// A quantity as a whole number of bytes; a fraction of a byte is refused, as upstream's
/// `AsInt64` refuses it.
fn parse_max_size(raw: &str) -> Result<i64, String> {
    let amount = Amount::parse(raw).map_err(|e| match e {
        QuantityError::Syntax(_) => {
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                .to_string()
        }
        QuantityError::Overflow(_) => "invalid max log size".to_string(),
    })?;
    let nano = amount.nano();
    if nano % NANO != 0 {
        return Err("invalid max log size".into());
    }
    i64::try_from(nano / NANO).map_err(|_| "invalid max log size".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::duration::GoDuration;

    fn config(size: &str, files: i32) -> KubeletConfiguration {
        let mut kc = KubeletConfiguration::defaulted();
        kc.container_log_max_size = size.into();
        kc.container_log_max_files = files;
        kc
    }

    #[test]
    fn defaults_rotate_at_ten_mebibytes_keeping_five_files() {
        let p = Policy::from_config(&config("10Mi", 5)).unwrap().unwrap();
        assert_eq!(p.max_size, 10 * 1024 * 1024);
        assert_eq!(p.max_files, 5);
        assert_eq!(p.workers, 1);
        assert_eq!(p.interval, GoDuration::from_secs(10).as_duration());
    }

    #[test]
    fn sizes_parse_as_quantities_in_whole_bytes() {
        assert_eq!(parse_max_size("1Ki"), Ok(1024));
        assert_eq!(parse_max_size("1.5Ki"), Ok(1536));
        assert_eq!(parse_max_size("2k"), Ok(2000));
        assert_eq!(parse_max_size("0"), Ok(0));
        assert_eq!(parse_max_size("-1"), Ok(-1));
        assert_eq!(
            parse_max_size("1500m"),
            Err("invalid max log size".to_string())
        );
        assert!(
            parse_max_size("ten")
                .unwrap_err()
                .contains("regular expression")
        );
    }

    #[test]
    fn a_negative_size_turns_rotation_off() {
        assert_eq!(Policy::from_config(&config("-1", 5)), Ok(None));
    }

    #[test]
    fn upstream_messages_for_bad_settings() {
        let files = Policy::from_config(&config("10Mi", 1)).unwrap_err();
        assert_eq!(files.to_string(), "invalid MaxFiles 1, must be > 1");
        let size = Policy::from_config(&config("lots", 5)).unwrap_err();
        assert!(
            size.to_string().starts_with(
                "failed to parse container log max size \"lots\": quantities must match"
            ),
            "{size}"
        );
    }
}
