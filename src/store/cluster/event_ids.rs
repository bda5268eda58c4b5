//! Ids of `events` rows on a Spider cluster, made by the server itself, so
//! that the journal replay can write events straight to the data nodes and
//! go on writing while the head is down.
//!
//! An id is `1 << 62 | milliseconds since 2026-01-01 UTC << 22 | writer <<
//! 12 | counter`:
//!
//! * the top bit puts every such id above the ids the head's `sequences`
//!   handed out before (the rollup's watermark and the event stream's
//!   cursor only move up);
//! * the time makes ids of every writer increase with the time they were
//!   made, so across servers they become visible in roughly id order, as
//!   the rollup's per-day watermark wants (with several writers, the
//!   rollup's settle time covers their clocks' skew as it covers commits
//!   overtaking each other);
//! * the writer number (10 bits) keeps two servers' ids apart: it is
//!   reserved once from the head's `sequences` row [`EVENT_WRITERS`] and
//!   kept in the server's saved topology file (`saved_topology`), so a
//!   server started while the head is down has it too;
//! * the counter (12 bits) tells apart the ids of one millisecond; when it
//!   runs out the id moves on to the next millisecond, and a clock that
//!   steps back is not followed: one writer's ids always increase.
//!
//! Ids are taken just before each statement, as the head's sequence was,
//! so one writer's rows become visible in id order. The single server keeps
//! `AUTO_INCREMENT`.

use crate::locks::LockEvenPoisoned;
use crate::store::error::StoreError;
use sqlx::MySqlPool;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// The `sequences` row writer numbers are reserved from.
pub const EVENT_WRITERS: &str = "events.writer";

/// Writer numbers: reservations are taken modulo this.
pub const WRITERS: u64 = 1 << WRITER_BITS;

const COUNTER_BITS: u32 = 12;
const WRITER_BITS: u32 = 10;
/// 2026-01-01T00:00:00Z in Unix milliseconds.
const EPOCH_MS: i64 = 1_767_225_600_000;
/// Set in every id (see the module documentation).
const MARK: u64 = 1 << 62;
/// Milliseconds fit in the 40 bits below [`MARK`]: about 34 years.
const MILLIS_MASK: u64 = (1 << (62 - COUNTER_BITS - WRITER_BITS)) - 1;

/// One writer's event ids.
#[derive(Debug)]
pub struct EventIdClock {
    writer: u64,
    /// The millisecond and counter of the last id handed out.
    last: Mutex<Option<(u64, u64)>>,
}

impl EventIdClock {
    /// A clock for writer number `writer` (taken modulo [`WRITERS`]).
    pub fn new(writer: u64) -> EventIdClock {
        EventIdClock {
            writer: writer % WRITERS,
            last: Mutex::new(None),
        }
    }

    /// This clock's writer number.
    pub fn writer(&self) -> u64 {
        self.writer
    }

    /// `count` new ids, increasing, above every id this clock gave before.
    pub fn take(&self, count: usize) -> Vec<u64> {
        let now = chrono::Utc::now().timestamp_millis() - EPOCH_MS;
        self.take_at(u64::try_from(now).unwrap_or(0), count)
    }

    fn take_at(&self, now_ms: u64, count: usize) -> Vec<u64> {
        let mut last = self.last.lock_even_poisoned();
        let mut ids = Vec::with_capacity(count);
        for _ in 0..count {
            let (ms, counter) = match *last {
                Some((ms, counter)) if ms >= now_ms => {
                    if (counter + 1) >> COUNTER_BITS != 0 {
                        (ms + 1, 0)
                    } else {
                        (ms, counter + 1)
                    }
                }
                _ => (now_ms, 0),
            };
            *last = Some((ms, counter));
            ids.push(
                MARK | (ms & MILLIS_MASK) << (COUNTER_BITS + WRITER_BITS)
                    | self.writer << COUNTER_BITS
                    | counter,
            );
        }
        ids
    }
}

type Clocks = HashMap<String, Arc<EventIdClock>>;
static CLOCKS: LazyLock<Mutex<Clocks>> = LazyLock::new(Default::default);

/// The event id clock of the head `pool`, its writer number reserved on
/// the head the first time (when the saved topology gave none).
pub async fn event_clock(pool: &MySqlPool) -> Result<Arc<EventIdClock>, StoreError> {
    let key = super::saved_topology::head_of(pool);
    if let Some(clock) = CLOCKS.lock_even_poisoned().get(&key) {
        return Ok(clock.clone());
    }
    let reserved = crate::store::sequences::reserve(pool, EVENT_WRITERS, 1).await?;
    Ok(adopt(&key, reserved.start))
}

/// The clock of `head` if it has one, else one of writer number `writer`.
pub(super) fn adopt(head: &str, writer: u64) -> Arc<EventIdClock> {
    CLOCKS
        .lock_even_poisoned()
        .entry(head.to_owned())
        .or_insert_with(|| Arc::new(EventIdClock::new(writer)))
        .clone()
}

/// The clock of `head`, when it has one already.
pub(super) fn known(head: &str) -> Option<Arc<EventIdClock>> {
    CLOCKS.lock_even_poisoned().get(head).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_increase_carry_their_writer_and_stay_above_the_old_sequence() {
        let clock = EventIdClock::new(WRITERS + 5);
        assert_eq!(clock.writer(), 5);
        let mut ids = clock.take_at(1_000, 3);
        // The clock steps back: ids still increase.
        ids.extend(clock.take_at(900, 2));
        ids.extend(clock.take_at(1_001, 1));
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert!(ids.iter().all(|&id| id >= MARK && id <= i64::MAX as u64));
        let writer = |id: u64| (id >> COUNTER_BITS) & (WRITERS - 1);
        assert!(ids.iter().all(|&id| writer(id) == 5));
        let millis = |id: u64| (id & !MARK) >> (COUNTER_BITS + WRITER_BITS);
        assert_eq!(
            ids.iter().map(|&id| millis(id)).collect::<Vec<_>>(),
            [1_000, 1_000, 1_000, 1_000, 1_000, 1_001]
        );
        // Another writer's ids of the same millisecond differ.
        let other = EventIdClock::new(6).take_at(1_000, 3);
        assert!(other.iter().all(|id| !ids.contains(id)));
    }

    #[test]
    fn a_full_millisecond_moves_on_to_the_next() {
        let clock = EventIdClock::new(1);
        let ids = clock.take_at(7, 5_000);
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            ids.iter().collect::<std::collections::HashSet<_>>().len(),
            5_000
        );
        let millis = |id: u64| (id & !MARK) >> (COUNTER_BITS + WRITER_BITS);
        assert_eq!((millis(ids[4_095]), millis(ids[4_096])), (7, 8));
        // The next call, still at millisecond 7, goes on after them.
        let next = clock.take_at(7, 1);
        assert!(next[0] > ids[4_999]);
    }
}
