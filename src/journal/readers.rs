//! Link rows a request or the replay read, held in memory for the replay
//! of later hits.
//!
//! A click's journal line names no address (docs/privacy.md), so the
//! replay reads the link's row again to learn whose click it was: a second
//! read of a row the request read a moment before, which was a third of
//! the database's work per redirect. The server hands the row it read to
//! the replay here instead, and the replay reads the database only for
//! the tokens it does not find (a cache hit's link, whose cached copy has
//! no address; a restart; an entry already gone). The rows the replay
//! reads are held too: a hot letter's links are clicked again and again
//! within seconds, each time a cache hit, and each of those clicks cost
//! the replay a read of the same row.
//!
//! What stays true: nothing here reaches the disk; an entry lives for at
//! most two generations ([`GENERATION_ENTRIES`] rows or
//! [`GENERATION_AGE`], whichever comes first); an erasure drops every
//! entry ([`ReaderHandoff::forget_all`]), and a row read before an erasure
//! is not held after it ([`ReaderHandoff::epoch`]); the replay screens
//! each event with the privacy view of its batch whatever the row's
//! source, so an address erased after the click is not stored either way.

use crate::locks::LockEvenPoisoned;
use crate::store::links::StoredLink;
use crate::token::Token;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Rows in one generation: with two generations held, at most twice this
/// many rows (a few hundred bytes each) are in memory at once.
pub const GENERATION_ENTRIES: usize = 65_536;
/// The oldest a generation gets before the next one starts; a replay that
/// lags longer reads its rows from the database, as before.
pub const GENERATION_AGE: Duration = Duration::from_secs(30);

/// The rows requests and the replay read, by token, for the replay.
#[derive(Default)]
pub struct ReaderHandoff {
    generations: Mutex<Generations>,
}

#[derive(Default)]
struct Generations {
    current: HashMap<Token, Arc<StoredLink>>,
    previous: HashMap<Token, Arc<StoredLink>>,
    /// When `current` began (`None` until the first row is held).
    began: Option<Instant>,
    /// Erasures taken in so far ([`ReaderHandoff::epoch`]).
    erasures: u64,
}

/// Which erasures a read had seen when it began: a row read under an
/// older epoch may hold an address erased since, and is not held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

impl ReaderHandoff {
    /// The epoch to give [`Self::hold`] for a row read from now on.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.generations.lock_even_poisoned().erasures)
    }

    /// Hold `link`, the row read for `token` by a read that began at
    /// `epoch`, for the replay of its hits. Only one reader's letter's
    /// rows are held: a shared row's event names nobody, so its replay
    /// reads nothing.
    pub fn hold(&self, epoch: Epoch, token: Token, link: &Arc<StoredLink>) {
        self.hold_all(epoch, [(token, link)]);
    }

    /// [`Self::hold`] for many rows, under one lock.
    pub fn hold_all<'a>(
        &self,
        epoch: Epoch,
        rows: impl IntoIterator<Item = (Token, &'a Arc<StoredLink>)>,
    ) {
        let mut rows = rows
            .into_iter()
            .filter(|(_, link)| link.letter_id != 0 && !link.email.is_empty())
            .peekable();
        if rows.peek().is_none() {
            return;
        }
        let now = Instant::now();
        let mut retired = Vec::new();
        {
            let mut generations = self.generations.lock_even_poisoned();
            if generations.erasures != epoch.0 {
                return;
            }
            for (token, link) in rows {
                let old = generations.rotate_if_due(now);
                if !old.is_empty() {
                    retired.push(old);
                }
                generations.current.insert(token, Arc::clone(link));
            }
        }
        // The retired generations' rows are freed outside the lock.
        drop(retired);
    }

    /// The rows held for `tokens`; the others are left to the database.
    /// A row stays held for the later hits of its link.
    pub fn find(&self, tokens: &[Token]) -> HashMap<Token, Arc<StoredLink>> {
        let mut found = HashMap::new();
        let generations = self.generations.lock_even_poisoned();
        if generations.current.is_empty() && generations.previous.is_empty() {
            return found;
        }
        for token in tokens {
            let held = generations
                .current
                .get(token)
                .or_else(|| generations.previous.get(token));
            if let Some(link) = held {
                found.insert(*token, Arc::clone(link));
            }
        }
        found
    }

    /// Drop every row held (an address was erased), and every row read
    /// before now that is offered later.
    pub fn forget_all(&self) {
        let dropped = {
            let mut generations = self.generations.lock_even_poisoned();
            let erasures = generations.erasures.wrapping_add(1);
            let dropped = std::mem::take(&mut *generations);
            generations.erasures = erasures;
            dropped
        };
        drop(dropped);
    }

    /// Rows held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        let generations = self.generations.lock_even_poisoned();
        generations.current.len() + generations.previous.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Generations {
    /// Start a new generation when the current one is full or old; the
    /// previous one is returned, to be freed by the caller.
    fn rotate_if_due(&mut self, now: Instant) -> HashMap<Token, Arc<StoredLink>> {
        let began = *self.began.get_or_insert(now);
        let due = self.current.len() >= GENERATION_ENTRIES
            || now.saturating_duration_since(began) >= GENERATION_AGE;
        if !due {
            return HashMap::new();
        }
        self.began = Some(now);
        let current = std::mem::take(&mut self.current);
        std::mem::replace(&mut self.previous, current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::LinkKind;

    fn row(letter_id: u64, email: &str) -> (Token, Arc<StoredLink>) {
        let token = Token::new();
        let link = StoredLink {
            id: 7,
            token,
            kind: LinkKind::Click,
            mailing_id: "m".into(),
            letter_id,
            email: email.into(),
            position: 1,
            url: "https://example.com/".into(),
        };
        (token, Arc::new(link))
    }

    #[test]
    fn a_held_row_is_found_for_every_later_hit() {
        let handoff = ReaderHandoff::default();
        let (token, link) = row(3, "a@example.com");
        handoff.hold(handoff.epoch(), token, &link);
        let (other, _) = row(4, "b@example.com");
        for _ in 0..2 {
            let found = handoff.find(&[token, other]);
            assert_eq!(found.len(), 1);
            assert_eq!(
                found.get(&token).map(|l| l.email.as_str()),
                Some("a@example.com")
            );
        }
        assert_eq!(handoff.len(), 1);
    }

    #[test]
    fn shared_rows_and_rows_without_an_address_are_not_held() {
        let handoff = ReaderHandoff::default();
        let (shared, link) = row(0, "a@example.com");
        handoff.hold(handoff.epoch(), shared, &link);
        let (blanked, link) = row(5, "");
        handoff.hold_all(handoff.epoch(), [(blanked, &link)]);
        assert!(handoff.is_empty());
    }

    #[test]
    fn at_most_two_generations_are_held() {
        let handoff = ReaderHandoff::default();
        let (first, link) = row(1, "a@example.com");
        handoff.hold(handoff.epoch(), first, &link);
        let rows: Vec<_> = (0..2 * GENERATION_ENTRIES)
            .map(|n| row(n as u64 + 2, "b@example.com"))
            .collect();
        handoff.hold_all(handoff.epoch(), rows.iter().map(|(t, l)| (*t, l)));
        assert!(handoff.len() <= 2 * GENERATION_ENTRIES);
        assert!(
            handoff.find(&[first]).is_empty(),
            "the oldest generation is gone"
        );
    }

    #[test]
    fn an_old_generation_is_retired_by_age() {
        let mut generations = Generations::default();
        let start = Instant::now();
        assert!(generations.rotate_if_due(start).is_empty());
        let (token, link) = row(1, "a@example.com");
        generations.current.insert(token, link);
        assert!(generations
            .rotate_if_due(start + GENERATION_AGE / 2)
            .is_empty());
        assert!(generations.rotate_if_due(start + GENERATION_AGE).is_empty());
        assert_eq!(
            generations.previous.len(),
            1,
            "moved to the previous generation"
        );
        let retired = generations.rotate_if_due(start + 2 * GENERATION_AGE);
        assert_eq!(retired.len(), 1, "and then retired");
    }

    #[test]
    fn an_erasure_forgets_everything() {
        let handoff = ReaderHandoff::default();
        let (token, link) = row(3, "a@example.com");
        handoff.hold(handoff.epoch(), token, &link);
        handoff.forget_all();
        assert!(handoff.find(&[token]).is_empty());
    }

    #[test]
    fn a_row_read_before_an_erasure_is_not_held_after_it() {
        let handoff = ReaderHandoff::default();
        let before = handoff.epoch();
        handoff.forget_all();
        let (token, link) = row(3, "a@example.com");
        handoff.hold(before, token, &link);
        assert!(handoff.is_empty());
        handoff.hold(handoff.epoch(), token, &link);
        assert_eq!(handoff.len(), 1);
    }
}
