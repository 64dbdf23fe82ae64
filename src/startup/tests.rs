use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodCondition, PodSpec,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::*;

fn pod(uid: &str, containers: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("p-{uid}")),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            creation_timestamp: Some(Time(jiff::Timestamp::now())),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: containers
                .iter()
                .map(|n| Container {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn status(running: &[&str], ready: bool) -> PodStatus {
    PodStatus {
        container_statuses: Some(
            running
                .iter()
                .map(|n| ContainerStatus {
                    name: n.to_string(),
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: Some(Time(jiff::Timestamp::now())),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
        ),
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

#[test]
fn a_start_is_recorded_phase_by_phase_and_observed_once() {
    let t = Tracker::default();
    let p = pod("u1", &["a", "b"]);
    t.seen(&p);
    t.seen(&p);
    t.mark("u1", Phase::Admitted);
    t.mark("u1", Phase::VolumesReady);
    t.mark("u1", Phase::SandboxCreated);
    t.pull_started("u1", "a", "img-a");
    t.image_ready("u1", "a", "img-a");
    t.image_ready("u1", "b", "img-b");
    for c in ["a", "b"] {
        t.container_created("u1", c, false);
        t.container_started("u1", c, false);
    }
    let m = crate::metrics::kubelet();
    let before = m.pod_start_total_duration.count(&[]);
    t.observe_status(&p, &status(&["a"], false));
    assert_eq!(
        m.pod_start_total_duration.count(&[]),
        before,
        "one of two runs"
    );
    t.observe_status(&p, &status(&["a", "b"], false));
    t.observe_status(&p, &status(&["a", "b"], true));
    t.observe_status(&p, &status(&["a", "b"], true));
    assert!(m.pod_start_total_duration.count(&[]) > before);
    let reports = t.reports();
    assert_eq!(reports.len(), 1);
    let r = &reports[0];
    let names: Vec<&str> = r.phases.iter().map(|p| p.phase).collect();
    assert_eq!(
        names,
        [
            "seen",
            "admitted",
            "volumesReady",
            "sandboxCreated",
            "running",
            "ready"
        ]
    );
    assert!(r.images[0].pulled && !r.images[1].pulled);
    assert_eq!(r.containers.len(), 2);
    assert!(r.total_seconds.is_some() && r.counted_in_metrics);
    let line = t.pods().get("u1").map(summary_line).expect("tracked");
    assert!(line.starts_with("admitted +"), "{line}");
    assert!(line.contains("pulled img-a for a in"), "{line}");
    assert!(line.ends_with(&format!("ready {}", line.rsplit("ready ").next().unwrap())));
    t.forget("u1");
    assert!(t.reports().is_empty());
}

#[test]
fn static_pods_and_pods_started_before_are_not_counted() {
    let t = Tracker::default();
    let mut s = pod("st", &["a"]);
    s.metadata.annotations = Some(
        [(
            "kubernetes.io/config.source".to_string(),
            "file".to_string(),
        )]
        .into_iter()
        .collect(),
    );
    t.seen(&s);
    let mut old = pod("old", &["a"]);
    old.status = Some(PodStatus {
        start_time: Some(Time(jiff::Timestamp::now())),
        ..Default::default()
    });
    t.seen(&old);
    assert!(t.reports().iter().all(|r| !r.counted_in_metrics));
}

#[test]
fn overlapping_pulls_count_once() {
    let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + s);
    let step = |s, e| ImageStep {
        container: "c".into(),
        image: "i".into(),
        pull_started: Some(at(s)),
        done: Some(at(e)),
    };
    let p = PodStartup {
        namespace: String::new(),
        name: String::new(),
        uid: String::new(),
        created: Some(at(0)),
        counted: true,
        phases: vec![(Phase::Seen, at(0)), (Phase::Running, at(20))],
        images: vec![step(1, 5), step(3, 7), step(10, 12)],
        containers: vec![],
    };
    assert_eq!(p.pulling(), Duration::from_secs(8));
    assert_eq!(p.durations(), Some((20.0, 12.0)));
}

#[test]
fn the_record_is_bounded() {
    let t = Tracker::default();
    for i in 0..MAX_TRACKED + 5 {
        t.seen(&pod(&format!("u{i}"), &["a"]));
    }
    assert_eq!(t.pods().len(), MAX_TRACKED);
}
