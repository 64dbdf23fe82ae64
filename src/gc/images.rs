//! Image garbage collection, as upstream's image GC manager: images no container uses go,
//! least recently used first, when the image filesystem fills past the high threshold (down
//! to the low one) or, with imageMaximumGCAge, once unused for that long. An image younger
//! than imageMinimumGCAge stays (it may have been pulled for a container about to start), and
//! so do images the runtime pins and the configured sandbox image.

use std::collections::{HashMap, HashSet};

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::GcError;
use crate::cri::{RuntimeClient, api};
use crate::events::{EventRecorder, EventType};

/// Upstream's ImageGCPeriod.
pub const PERIOD: Duration = Duration::from_secs(300);
/// The `reason` label of kubelet_image_garbage_collected_total.
pub const REASON_AGE: &str = "age";
pub const REASON_SPACE: &str = "space";

/// imageGC* of the KubeletConfiguration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImagePolicy {
    pub high_threshold_percent: i32,
    pub low_threshold_percent: i32,
    pub min_age: Duration,
    /// Zero: off.
    pub max_age: Duration,
}

impl ImagePolicy {
    /// Upstream starts no image GC loop at all when neither a threshold nor an age can
    /// trigger it (the eviction manager may still ask for unused images to go).
    pub fn periodic(&self) -> bool {
        self.high_threshold_percent < 100 || !self.max_age.is_zero()
    }
}

/// What the GC remembers of an image, keyed by image ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub first_detected: SystemTime,
    /// The last pass that saw a container use it; never, for an image no container used.
    pub last_used: Option<SystemTime>,
    pub size: u64,
    pub pinned: bool,
}

/// An image that may be removed, in the order removal is tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub record: Record,
}

/// Brings `records` in line with the runtime's images: new ones are first detected at `now`,
/// used ones are marked used at `now`, vanished ones are dropped (so the map never holds more
/// than the node's images).
pub fn refresh(
    records: &mut HashMap<String, Record>,
    images: &[api::Image],
    in_use: &HashSet<String>,
    now: SystemTime,
) {
    let present: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
    records.retain(|id, _| present.contains(id.as_str()));
    for image in images.iter().filter(|i| !i.id.is_empty()) {
        let r = records.entry(image.id.clone()).or_insert(Record {
            first_detected: now,
            last_used: None,
            size: 0,
            pinned: false,
        });
        if in_use.contains(&image.id) {
            r.last_used = Some(now);
        }
        r.size = image.size;
        r.pinned = image.pinned;
    }
}

/// Unused, unpinned images, least recently used first (never used before all others), ties
/// broken by first detection.
pub fn eviction_order(
    records: &HashMap<String, Record>,
    in_use: &HashSet<String>,
) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = records
        .iter()
        .filter(|(id, r)| !in_use.contains(*id) && !r.pinned)
        .map(|(id, r)| Candidate {
            id: id.clone(),
            record: *r,
        })
        .collect();
    out.sort_by(|a, b| {
        (a.record.last_used, a.record.first_detected, &a.id).cmp(&(
            b.record.last_used,
            b.record.first_detected,
            &b.id,
        ))
    });
    out
}

/// May the image go to free space at `now`? Not if a container used it in this very pass, nor
/// while it is younger than the minimum age.
pub fn eligible_for_space(c: &Candidate, now: SystemTime, min_age: Duration) -> bool {
    if c.record.last_used.is_some_and(|t| t >= now) {
        return false;
    }
    now.duration_since(c.record.first_detected)
        .is_ok_and(|age| age >= min_age)
}

/// Unused for longer than `max_age` at `now` (an image never used counts from forever ago).
pub fn too_old(c: &Candidate, now: SystemTime, max_age: Duration) -> bool {
    match c.record.last_used {
        None => true,
        Some(t) => now.duration_since(t).is_ok_and(|idle| idle > max_age),
    }
}

/// Bytes to free to get from `available` of `capacity` down to the low threshold, when usage
/// has reached the high one; integer percentages as upstream computes them.
pub fn amount_to_free(capacity: u64, available: u64, policy: &ImagePolicy) -> Option<u64> {
    let capacity = i128::from(capacity);
    let available = i128::from(available).min(capacity);
    if capacity == 0 {
        return None;
    }
    let usage_percent = 100 - available * 100 / capacity;
    if usage_percent < i128::from(policy.high_threshold_percent) {
        return None;
    }
    let want = capacity * i128::from(100 - policy.low_threshold_percent) / 100 - available;
    Some(u64::try_from(want.max(0)).unwrap_or(u64::MAX))
}

struct Inner {
    cri: RuntimeClient,
    policy: ImagePolicy,
    /// `--pod-infra-container-image`: its help promises the image GC never prunes it, and
    /// runtimes that do not pin their sandbox image (containerd before 1.7) rely on that.
    sandbox_image: String,
    events: EventRecorder,
    node_name: String,
    records: Mutex<HashMap<String, Record>>,
    /// statvfs bounded, and never started again while a hung one runs.
    fs: crate::stats::fs::FsProbe,
}

/// The image collector. Clones share their records.
#[derive(Clone)]
pub struct ImageGc {
    inner: Arc<Inner>,
}

impl ImageGc {
    pub fn new(
        cri: RuntimeClient,
        policy: ImagePolicy,
        sandbox_image: String,
        events: EventRecorder,
        node_name: String,
    ) -> Self {
        ImageGc {
            inner: Arc::new(Inner {
                cri,
                policy,
                sandbox_image,
                events,
                node_name,
                records: Mutex::new(HashMap::new()),
                fs: crate::stats::fs::FsProbe::default(),
            }),
        }
    }

    fn records(&self) -> MutexGuard<'_, HashMap<String, Record>> {
        self.inner.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn node_event(&self, reason: &str, message: &str) {
        self.inner.events.node(
            &self.inner.node_name,
            None,
            EventType::Warning,
            reason,
            message,
        );
    }

    /// Images in use: those of every container the runtime has, in any state, and the
    /// sandbox image.
    async fn in_use(&self) -> Result<HashSet<String>, GcError> {
        let cri = &self.inner.cri;
        let containers = cri
            .list_containers(None)
            .await
            .map_err(GcError::cri("ListContainers"))?;
        let mut used: HashSet<String> = containers
            .into_iter()
            .flat_map(|c| [c.image_ref, c.image_id])
            .filter(|r| !r.is_empty())
            .collect();
        if !self.inner.sandbox_image.is_empty() {
            match cri.image_status(&self.inner.sandbox_image).await {
                Ok(Some(image)) => {
                    used.insert(image.id);
                }
                Ok(None) => {}
                Err(err) => debug!(%err, image = %self.inner.sandbox_image, "Sandbox image status"),
            }
        }
        Ok(used)
    }

    /// Lists images and containers, updates the records and returns the removal candidates.
    async fn candidates(&self, now: SystemTime) -> Result<Vec<Candidate>, GcError> {
        let images = self
            .inner
            .cri
            .list_images()
            .await
            .map_err(GcError::cri("ListImages"))?;
        let in_use = self.in_use().await?;
        let mut records = self.records();
        refresh(&mut records, &images, &in_use, now);
        Ok(eviction_order(&records, &in_use))
    }

    async fn remove(&self, c: &Candidate, reason: &str) -> Result<(), GcError> {
        info!(image_id = %c.id, size = c.record.size, reason, "Removing image to free bytes");
        match self.inner.cri.remove_image(&c.id).await {
            Ok(()) => {}
            // Gone already (another collector, or by hand): freed all the same.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(GcError::cri("RemoveImage")(e)),
        }
        self.records().remove(&c.id);
        crate::metrics::kubelet()
            .image_garbage_collected
            .inc(&[reason]);
        Ok(())
    }

    /// Removes candidates eligible at `now` until `want` bytes are freed; returns the bytes
    /// freed. Failed removals do not stop the others.
    async fn free_space(
        &self,
        want: u64,
        now: SystemTime,
        candidates: &[Candidate],
    ) -> Result<u64, GcError> {
        let mut freed = 0u64;
        let mut errors = Vec::new();
        for c in candidates {
            if !eligible_for_space(c, now, self.inner.policy.min_age) {
                debug!(image_id = %c.id, "Image not eligible for garbage collection yet");
                continue;
            }
            match self.remove(c, REASON_SPACE).await {
                Ok(()) => freed = freed.saturating_add(c.record.size),
                Err(e) => {
                    errors.push(e.to_string());
                    continue;
                }
            }
            if freed >= want {
                break;
            }
        }
        if errors.is_empty() {
            Ok(freed)
        } else {
            Err(GcError::ImageRemoval {
                wanted: want,
                freed,
                errors: errors.join(", "),
            })
        }
    }

    /// With imageMaximumGCAge, removes images unused for longer, once the kubelet has run
    /// that long itself (before, "unused" only means "not seen used yet"). Returns the rest.
    async fn free_old(
        &self,
        candidates: Vec<Candidate>,
        now: SystemTime,
        began: SystemTime,
    ) -> Result<Vec<Candidate>, GcError> {
        let max_age = self.inner.policy.max_age;
        let running_for = now.duration_since(began).unwrap_or_default();
        if max_age.is_zero() || running_for <= max_age {
            return Ok(candidates);
        }
        let mut rest = Vec::with_capacity(candidates.len());
        let mut errors = Vec::new();
        for c in candidates {
            if !too_old(&c, now, max_age) {
                rest.push(c);
                continue;
            }
            if let Err(e) = self.remove(&c, REASON_AGE).await {
                errors.push(e.to_string());
                rest.push(c);
            }
        }
        if errors.is_empty() {
            Ok(rest)
        } else {
            Err(GcError::OldImageRemoval {
                max_age: crate::config::GoDuration(max_age).to_string(),
                errors: errors.join(", "),
            })
        }
    }

    /// Capacity and available bytes of the filesystem holding the runtime's images.
    async fn image_fs(&self) -> Result<(u64, u64), GcError> {
        let info = self
            .inner
            .cri
            .image_fs_info()
            .await
            .map_err(GcError::cri("ImageFsInfo"))?;
        let mountpoint = crate::stats::fs::image_fs_mountpoint(&info).ok_or(GcError::NoImageFs)?;
        let fs = self
            .inner
            .fs
            .statvfs(&mountpoint)
            .await
            .map_err(|e| GcError::ImageFsStats {
                path: mountpoint.clone(),
                reason: e.to_string(),
            })?;
        Ok((fs.capacity, fs.available))
    }

    /// One pass of the policy (upstream's GarbageCollect); `began` is when the loop started.
    pub async fn garbage_collect(&self, began: SystemTime) -> Result<(), GcError> {
        let now = SystemTime::now();
        let candidates = self.candidates(now).await?;
        let candidates = self.free_old(candidates, now, began).await?;
        let (capacity, available) = self.image_fs().await?;
        if available > capacity {
            info!(available, capacity, "Availability is larger than capacity");
        }
        if capacity == 0 {
            let err = GcError::InvalidCapacity;
            self.node_event("InvalidDiskCapacity", &err.to_string());
            return Err(err);
        }
        let policy = &self.inner.policy;
        let Some(want) = amount_to_free(capacity, available, policy) else {
            return Ok(());
        };
        info!(
            high_threshold = policy.high_threshold_percent,
            low_threshold = policy.low_threshold_percent,
            amount_to_free = want,
            "Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold"
        );
        let freed = self.free_space(want, now, &candidates).await?;
        if freed < want {
            let err = GcError::NotEnoughFreed {
                wanted: want,
                freed,
            };
            self.node_event("FreeDiskSpaceFailed", &err.to_string());
            return Err(err);
        }
        Ok(())
    }

    /// Removes every unused image old enough to go, whatever the disk usage (upstream's
    /// DeleteUnusedImages, which the eviction manager calls under disk pressure). Returns the
    /// bytes freed.
    pub async fn delete_unused(&self) -> Result<u64, GcError> {
        info!("Attempting to delete unused images");
        let now = SystemTime::now();
        let candidates = self.candidates(now).await?;
        self.free_space(u64::MAX, now, &candidates).await
    }

    /// Runs a pass every `period` (the first at once) until `cancel` fires. A failure is an
    /// event only when it repeats: the first pass may run before the runtime has stats.
    pub async fn run(self, period: Duration, cancel: CancellationToken) {
        let began = SystemTime::now();
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failed_before = false;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.garbage_collect(began).await {
                Ok(()) => {
                    if failed_before {
                        info!("Image garbage collection succeeded");
                    } else {
                        debug!("Image garbage collection succeeded");
                    }
                    failed_before = false;
                }
                Err(err) if failed_before => {
                    error!(%err, "Image garbage collection failed multiple times in a row");
                    self.node_event("ImageGCFailed", &err.to_string());
                }
                Err(err) => {
                    warn!(%err, "Image garbage collection failed once. Stats initialization may not have completed yet");
                    failed_before = true;
                }
            }
        }
    }

    #[cfg(test)]
    pub fn record(&self, id: &str) -> Option<Record> {
        self.records().get(id).copied()
    }

    #[cfg(test)]
    pub fn set_first_detected(&self, id: &str, at: SystemTime) {
        if let Some(r) = self.records().get_mut(id) {
            r.first_detected = at;
        }
    }
}
