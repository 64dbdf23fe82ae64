//! Rotation passes against the fake runtime (a real gRPC server), with logs in a temp dir.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::blocking::Lane;
use super::monitor::Monitor;
use super::policy::Policy;
use super::rotate::Rotator;
use crate::cri::api;
use crate::cri::fake::FakeCri;

const MAX: u64 = 1024;

/// A running container whose log lives in `dir`; returns its id and log path.
async fn running_container(cri: &FakeCri, dir: &Path, name: &str) -> (String, PathBuf) {
    cri.runtime.add_image("busybox:1");
    let sandbox = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: format!("pod-{name}"),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        log_directory: dir.to_string_lossy().into_owned(),
        labels: HashMap::new(),
        ..Default::default()
    };
    let c = &cri.client;
    let sb = c.run_pod_sandbox(sandbox.clone(), "").await.unwrap();
    let config = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: "busybox:1".into(),
            ..Default::default()
        }),
        log_path: format!("{name}/0.log"),
        ..Default::default()
    };
    let id = c.create_container(&sb, config, sandbox).await.unwrap();
    c.start_container(&id).await.unwrap();
    (id, dir.join(name).join("0.log"))
}

fn monitor(cri: &FakeCri, max_files: usize, workers: usize) -> Monitor {
    Monitor::new(Rotator {
        cri: cri.client.clone(),
        policy: Policy {
            max_size: MAX,
            max_files,
            workers,
            interval: Duration::from_secs(10),
        },
        rotations: Lane::new(workers),
        compressions: Lane::new(workers),
    })
}

/// The file names in `log`'s folder, sorted.
fn listing(log: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn grow(log: &Path, bytes: u64) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
    f.write_all(&vec![b'x'; bytes as usize]).unwrap();
}

async fn pass(m: &mut Monitor) {
    m.pass().await.unwrap();
    m.settle().await;
}

#[tokio::test]
async fn big_logs_rotate_small_ones_stay() {
    let cri = FakeCri::start(Duration::from_secs(5)).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, big) = running_container(&cri, dir.path(), "big").await;
    let (_, small) = running_container(&cri, dir.path(), "small").await;
    grow(&big, MAX);
    grow(&small, MAX - 1);
    let mut m = monitor(&cri, 5, 2);
    pass(&mut m).await;

    let names = listing(&big);
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[0], "0.log");
    assert!(names[1].starts_with("0.log.") && names[1].len() == "0.log.20060102-150405".len());
    // The runtime reopened a fresh, empty log.
    assert_eq!(std::fs::metadata(&big).unwrap().len(), 0);
    assert_eq!(listing(&small), ["0.log"]);
    assert_eq!(std::fs::metadata(&small).unwrap().len(), MAX - 1);
    let calls = cri.runtime.calls();
    assert_eq!(
        calls.iter().filter(|c| **c == "ReopenContainerLog").count(),
        1
    );

    // The log paths are known now: the next pass asks for no status.
    let statuses = calls.iter().filter(|c| **c == "ContainerStatus").count();
    pass(&mut m).await;
    let again = cri.runtime.calls();
    assert_eq!(
        again.iter().filter(|c| **c == "ContainerStatus").count(),
        statuses
    );
}

#[tokio::test]
async fn older_rotations_are_compressed_and_the_oldest_removed() {
    let cri = FakeCri::start(Duration::from_secs(5)).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, log) = running_container(&cri, dir.path(), "app").await;
    let folder = log.parent().unwrap().to_path_buf();
    // Rotations from earlier passes, an abandoned compression and a compressed twin.
    for name in [
        "0.log.20200101-000000.gz",
        "0.log.20200102-000000.gz",
        "0.log.20200103-000000",
        "0.log.20200104-000000",
        "0.log.20200104-000000.gz",
        "0.log.20200105-000000.gz.tmp",
    ] {
        std::fs::write(folder.join(name), name).unwrap();
    }
    grow(&log, 2 * MAX);
    let mut m = monitor(&cri, 4, 1);
    pass(&mut m).await;

    let names = listing(&log);
    // Four files: the new log, the one just rotated (plain), and the two newest before it
    // (gzipped); the oldest two and the leftovers are gone.
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(
        &names[..3],
        [
            "0.log",
            "0.log.20200103-000000.gz",
            "0.log.20200104-000000.gz",
        ]
    );
    assert!(!names[3].ends_with(".gz") && names[3].as_str() > "0.log.20200105");
}

#[tokio::test]
async fn a_refused_reopen_gives_the_log_its_name_back() {
    let cri = FakeCri::start(Duration::from_secs(5)).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, log) = running_container(&cri, dir.path(), "app").await;
    grow(&log, MAX);
    cri.runtime
        .fail_next("ReopenContainerLog", tonic::Status::unknown("no"));
    let mut m = monitor(&cri, 5, 1);
    pass(&mut m).await;
    assert_eq!(listing(&log), ["0.log"]);
    assert_eq!(std::fs::metadata(&log).unwrap().len(), MAX);
    // Tried again on the next pass.
    pass(&mut m).await;
    assert_eq!(listing(&log).len(), 2);
}

#[tokio::test]
async fn a_removed_log_is_reopened() {
    let cri = FakeCri::start(Duration::from_secs(5)).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, log) = running_container(&cri, dir.path(), "app").await;
    std::fs::remove_file(&log).unwrap();
    let mut m = monitor(&cri, 5, 1);
    pass(&mut m).await;
    assert_eq!(listing(&log), ["0.log"]);
}

#[tokio::test]
async fn exited_containers_are_left_alone() {
    let cri = FakeCri::start(Duration::from_secs(5)).await;
    let dir = tempfile::tempdir().unwrap();
    let (id, log) = running_container(&cri, dir.path(), "app").await;
    grow(&log, 4 * MAX);
    assert!(cri.runtime.exit_container(&id, 0));
    let mut m = monitor(&cri, 5, 1);
    pass(&mut m).await;
    assert_eq!(listing(&log), ["0.log"]);
}
