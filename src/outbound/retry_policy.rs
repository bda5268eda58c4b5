//! When a sender tries a failed event again and when it gives up: one
//! policy shared by every endpoint, kept apart from the senders so that
//! the configured set (`configured.rs`) and each sender (`dispatch.rs`)
//! take it from here.

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
        let doubling = 2u32.saturating_pow(failures.saturating_sub(1).min(30));
        let delay = self.base.saturating_mul(doubling).min(self.max);
        delay.mul_f64(0.75 + rand::random::<f64>() * 0.5)
    }
}
