//! Which pods go when during a node shutdown: groups by pod priority, each with its share of
//! the shutdown grace period, lowest priority first (upstream's order).

/// Upstream's SystemCriticalPriority, where `shutdownGracePeriodCriticalPods` starts.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The lowest priority in the group.
    pub priority: i32,
    pub grace_seconds: i64,
}

/// The groups from the configuration: `shutdownGracePeriodByPodPriority` as given (sorted), or
/// the two groups `shutdownGracePeriod` and `shutdownGracePeriodCriticalPods` stand for (the
/// critical pods get their period, everything else the rest). Empty: the feature is off.
pub fn from_config(grace: i64, critical: i64, by_priority: &[(i32, i64)]) -> Vec<Group> {
    let mut groups: Vec<Group> = if by_priority.is_empty() {
        if grace <= 0 {
            return Vec::new();
        }
        vec![
            Group {
                priority: 0,
                grace_seconds: grace - critical,
            },
            Group {
                priority: SYSTEM_CRITICAL_PRIORITY,
                grace_seconds: critical,
            },
        ]
    } else {
        by_priority
            .iter()
            .map(|&(priority, grace_seconds)| Group {
                priority,
                grace_seconds,
            })
            .collect()
    };
    groups.sort_by_key(|g| g.priority);
    groups
}

/// How long logind must wait for us: every group's period in turn.
pub fn total_seconds(groups: &[Group]) -> i64 {
    groups
        .iter()
        .fold(0i64, |sum, g| sum.saturating_add(g.grace_seconds.max(0)))
}

/// The group a pod of this priority belongs to: the one with the highest priority not above
/// it, or the lowest group for pods below them all.
pub fn index_for(groups: &[Group], priority: i32) -> usize {
    groups
        .iter()
        .rposition(|g| g.priority <= priority)
        .unwrap_or(0)
}

/// The grace period a pod gets: its own when shorter than its group's.
pub fn pod_grace(group: &Group, own: Option<i64>) -> i64 {
    match own {
        Some(own) if own <= group.grace_seconds => own.max(0),
        _ => group.grace_seconds.max(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_groups_from_the_plain_settings() {
        let g = from_config(30, 10, &[]);
        assert_eq!(
            g,
            [
                Group {
                    priority: 0,
                    grace_seconds: 20
                },
                Group {
                    priority: SYSTEM_CRITICAL_PRIORITY,
                    grace_seconds: 10
                }
            ]
        );
        assert_eq!(total_seconds(&g), 30);
        assert!(from_config(0, 0, &[]).is_empty());
    }

    #[test]
    fn pods_land_in_the_highest_group_not_above_them() {
        let g = from_config(0, 0, &[(100_000, 5), (0, 10), (2_000_000_000, 3)]);
        assert_eq!(g[0].priority, 0);
        assert_eq!(index_for(&g, -5), 0);
        assert_eq!(index_for(&g, 0), 0);
        assert_eq!(index_for(&g, 99_999), 0);
        assert_eq!(index_for(&g, 100_000), 1);
        assert_eq!(index_for(&g, 2_000_001_000), 2);
        assert_eq!(total_seconds(&g), 18);
    }

    #[test]
    fn a_pods_own_shorter_grace_wins() {
        let group = Group {
            priority: 0,
            grace_seconds: 20,
        };
        assert_eq!(pod_grace(&group, Some(5)), 5);
        assert_eq!(pod_grace(&group, Some(30)), 20);
        assert_eq!(pod_grace(&group, None), 20);
    }
}
