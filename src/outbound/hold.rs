//! Which events wait for their settled verdict before they go out, and
//! how long at most: the replay queues them held (`enqueue`), the
//! rollup's settle pass releases them.

use crate::payload;
use std::time::Duration;

/// How long the safety net waits, past the settle time, before a held event
/// goes out unsettled (see [`Hold`]): rollup passes run every few seconds,
/// so two minutes cover a slow or briefly failing one.
pub const DEFAULT_HOLD_GRACE: Duration = Duration::from_secs(120);

/// Clicks, opens and image loads wait for their settled verdict
/// (docs/serve.md, "What is held, and for how long"): they are queued held,
/// and the rollup's settle pass renders them again with the final verdict
/// and releases them. `settle` zero holds nothing: events go at once with
/// their first verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hold {
    /// `--verdict-settle-secs`: how long after it happened a hit's verdict
    /// is final.
    pub settle: Duration,
    /// The safety net: a held event still not released `settle + grace`
    /// after it was queued (no rollup is running, or it is far behind) is
    /// sent anyway, with its first verdict and `"settled": false`.
    pub grace: Duration,
}

impl Default for Hold {
    /// Nothing held.
    fn default() -> Self {
        Hold {
            settle: Duration::ZERO,
            grace: DEFAULT_HOLD_GRACE,
        }
    }
}

impl Hold {
    /// Hold events of `kind` until their verdicts settle, `settle` after
    /// they happened.
    pub fn until_settled(settle: Duration) -> Hold {
        Hold {
            settle,
            ..Hold::default()
        }
    }

    /// When an event of `kind` queued now goes out at the latest (`None`:
    /// at once, not held).
    pub fn safety_net(&self, kind: crate::kind::EventKind) -> Option<Duration> {
        (!self.settle.is_zero() && payload::waits_for_verdict(kind))
            .then(|| self.settle.saturating_add(self.grace))
    }
}
