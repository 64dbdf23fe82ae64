//! What the eviction manager remembers between passes: when each threshold was first met (for
//! soft grace periods), when each node condition was last seen (so a condition stays True for
//! `evictionPressureTransitionPeriod` and does not flap), and which thresholds are met until
//! their minimum reclaim is satisfied. Pure, with the time passed in.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::thresholds::{Condition, Observations, Threshold, met};

#[derive(Debug, Default)]
pub struct Tracker {
    /// Bounded by the configured thresholds.
    first_met: Vec<(Threshold, Instant)>,
    condition_seen: BTreeMap<Condition, Instant>,
    /// Met past their grace period and not yet resolved.
    acting: Vec<Threshold>,
}

/// The outcome of one pass's observations.
#[derive(Debug, Default, PartialEq)]
pub struct Step {
    /// The node conditions to report (within the transition period).
    pub conditions: Vec<Condition>,
    /// Thresholds whose grace period has passed: the ones to act on.
    pub acting: Vec<Threshold>,
}

impl Tracker {
    pub fn step(
        &mut self,
        thresholds: &[Threshold],
        observations: &Observations,
        transition: Duration,
        now: Instant,
    ) -> Step {
        let mut current: Vec<Threshold> = thresholds
            .iter()
            .filter(|t| met(t, observations, false))
            .cloned()
            .collect();
        // A threshold acted on stays until the minimum reclaim is reached too.
        for t in &self.acting {
            if met(t, observations, true) && !current.iter().any(|c| c.same(t)) {
                current.push(t.clone());
            }
        }
        self.first_met = current
            .iter()
            .map(|t| {
                let at = self
                    .first_met
                    .iter()
                    .find(|(seen, _)| seen.same(t))
                    .map_or(now, |(_, at)| *at);
                (t.clone(), at)
            })
            .collect();
        for t in &current {
            self.condition_seen.insert(t.signal.condition(), now);
        }
        self.condition_seen
            .retain(|_, at| now.saturating_duration_since(*at) < transition || *at == now);
        self.acting = self
            .first_met
            .iter()
            .filter(|(t, at)| now.saturating_duration_since(*at) >= t.grace)
            .map(|(t, _)| t.clone())
            .collect();
        Step {
            conditions: self.condition_seen.keys().copied().collect(),
            acting: self.acting.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::thresholds::{Observation, Signal, Value};
    use super::*;

    fn threshold(signal: Signal, grace: u64) -> Threshold {
        Threshold {
            signal,
            value: Value::Quantity(100),
            grace: Duration::from_secs(grace),
            min_reclaim: Some(Value::Quantity(50)),
        }
    }

    fn obs(signal: Signal, available: i64) -> Observations {
        Observations::from([(
            signal,
            Observation {
                available,
                capacity: 1000,
            },
        )])
    }

    #[test]
    fn hard_thresholds_act_at_once_and_hold_until_the_minimum_reclaim() {
        let t = [threshold(Signal::MemoryAvailable, 0)];
        let mut tr = Tracker::default();
        let t0 = Instant::now();
        let transition = Duration::from_secs(30);
        let s = tr.step(&t, &obs(Signal::MemoryAvailable, 50), transition, t0);
        assert_eq!(s.conditions, vec![Condition::Memory]);
        assert_eq!(s.acting.len(), 1);
        // Above the threshold but below threshold + minimum reclaim: still acting.
        let s = tr.step(&t, &obs(Signal::MemoryAvailable, 120), transition, t0);
        assert_eq!(s.acting.len(), 1);
        // Past it: nothing to act on, the condition stays for the transition period.
        let t1 = t0 + Duration::from_secs(10);
        let s = tr.step(&t, &obs(Signal::MemoryAvailable, 500), transition, t1);
        assert!(s.acting.is_empty());
        assert_eq!(s.conditions, vec![Condition::Memory]);
        let t2 = t0 + Duration::from_secs(31);
        let s = tr.step(&t, &obs(Signal::MemoryAvailable, 500), transition, t2);
        assert!(s.conditions.is_empty());
    }

    #[test]
    fn soft_thresholds_wait_for_their_grace_period_but_raise_the_condition() {
        let t = [threshold(Signal::NodeFsAvailable, 20)];
        let mut tr = Tracker::default();
        let t0 = Instant::now();
        let s = tr.step(&t, &obs(Signal::NodeFsAvailable, 10), Duration::ZERO, t0);
        assert_eq!(s.conditions, vec![Condition::Disk]);
        assert!(s.acting.is_empty());
        let s = tr.step(
            &t,
            &obs(Signal::NodeFsAvailable, 10),
            Duration::ZERO,
            t0 + Duration::from_secs(20),
        );
        assert_eq!(s.acting.len(), 1);
        // Recovering resets the clock.
        tr.step(
            &t,
            &obs(Signal::NodeFsAvailable, 900),
            Duration::ZERO,
            t0 + Duration::from_secs(21),
        );
        let s = tr.step(
            &t,
            &obs(Signal::NodeFsAvailable, 10),
            Duration::ZERO,
            t0 + Duration::from_secs(22),
        );
        assert!(s.acting.is_empty());
    }
}
