//! When a sender tries a failed event again and when it gives up: one
//! policy shared by every endpoint, kept apart from the senders so that
//! the configured set (`configured.rs`) and each sender (`dispatch.rs`)
//! take it from here.

use crate::retry::{Backoff, Jitter};
use std::time::Duration;

/// When to try again and when to give up (shared by every endpoint).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// The first retry's delay; each further one doubles it, with jitter.
    pub base: Duration,
    /// The longest delay between two attempts.
    pub max: Duration,
    /// An event still undelivered this long after it was queued is given up
    /// (moved to the dead letters).
    pub give_up_after: Duration,
    /// How often an idle sender looks for due rows (it is also woken as soon
    /// as the replay enqueues).
    pub poll: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_secs(5),
            max: Duration::from_secs(3_600),
            give_up_after: Duration::from_secs(3 * 24 * 3_600),
            poll: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// The delay before the attempt after `failures` failed ones: base ×
    /// 2^(failures-1), at most `max`, times a jitter in [0.75, 1.25) so
    /// that rows that failed together do not come back together.
    pub fn delay(&self, failures: u32) -> Duration {
        self.backoff().delay(failures.saturating_sub(1))
    }

    /// The schedule of [`RetryPolicy::delay`], with `give_up_after` as its
    /// deadline (counted from when the event was queued): attempts
    /// unlimited, the doubling stopping after 30 steps.
    pub fn backoff(&self) -> Backoff {
        Backoff::exponential(self.base, 2)
            .with_growth_stopping_after(30)
            .with_cap(self.max)
            .with_jitter(Jitter::Spread(0.25))
            .with_deadline(self.give_up_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The delays before `crate::retry`, jitter aside (a draw of 0.5 is
    /// ×1): 5 s doubling to the hour, ×0.75 to ×1.25 around that; dead
    /// letters at three days.
    #[test]
    fn the_retry_policy_keeps_its_old_schedule() {
        let policy = RetryPolicy::default();
        let backoff = policy.backoff();
        let secs: Vec<u64> = (1..=13)
            .map(|failures| backoff.delay_drawn(failures - 1, || 0.5).as_secs())
            .collect();
        assert_eq!(
            secs,
            [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600, 3600]
        );
        assert_eq!(backoff.delay_drawn(0, || 0.0), Duration::from_millis(3_750));
        assert_eq!(backoff.delay_drawn(11, || 0.0), Duration::from_secs(2_700));
        for failures in 1..=40 {
            let delay = policy.delay(failures);
            assert!(delay >= Duration::from_millis(3_750) && delay < Duration::from_secs(4_500));
        }
        let three_days = Duration::from_secs(3 * 24 * 3_600);
        assert!(backoff
            .next(7, three_days - Duration::from_millis(1), true)
            .is_ok());
        assert_eq!(
            backoff.next(7, three_days, true),
            Err(crate::retry::Stop::PastDeadline)
        );
        // The doubling stopped at 2^30, whatever the cap.
        let uncapped = RetryPolicy {
            base: Duration::from_millis(1),
            max: Duration::from_secs(1 << 40),
            ..policy
        };
        let held = uncapped.backoff().delay_drawn(45, || 0.5);
        assert_eq!(held, Duration::from_millis(1 << 30));
    }
}
