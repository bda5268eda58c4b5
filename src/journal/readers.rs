//! Link rows a request read, held in memory for the replay of its hit.
//!
//! A click's journal line names no address (docs/privacy.md), so the
//! replay reads the link's row again to learn whose click it was: a second
//! read of a row the request read a moment before, which was a third of
//! the database's work per redirect. The server hands the row it read to
//! the replay here instead, and the replay reads the database only for
//! the tokens it does not find (a cache hit's link, whose cached copy has
//! no address; a restart; an entry already gone).
//!
//! What stays true: nothing here reaches the disk; an entry lives until
//! its event is replayed, or for at most two generations
//! ([`GENERATION_ENTRIES`] rows or [`GENERATION_AGE`], whichever comes
//! first); an erasure drops every entry ([`ReaderHandoff::forget_all`]),
//! and the replay screens each event with the privacy view of its batch
//! whatever the row's source, so an address erased after the click is not
//! stored either way.

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

/// The rows requests read, by token, until the replay takes them.
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
}

impl ReaderHandoff {
    /// Hold `link`, the row a request read for `token`, for its hit's
    /// replay. Only one reader's letter's rows are held: a shared row's
    /// event names nobody, so its replay reads nothing.
    pub fn hold(&self, token: Token, link: &Arc<StoredLink>) {
        if link.letter_id == 0 || link.email.is_empty() {
            return;
        }
        let now = Instant::now();
        let retired = {
            let mut generations = self.generations.lock_even_poisoned();
            let retired = generations.rotate_if_due(now);
            generations.current.insert(token, Arc::clone(link));
            retired
        };
        // The retired generation's rows are freed outside the lock.
        drop(retired);
    }

    /// Take the rows held for `tokens`; the others are left to the database.
    pub fn take(&self, tokens: &[Token]) -> HashMap<Token, Arc<StoredLink>> {
        let mut taken = HashMap::new();
        let mut generations = self.generations.lock_even_poisoned();
        if generations.current.is_empty() && generations.previous.is_empty() {
            return taken;
        }
        for token in tokens {
            let held = generations
                .current
                .remove(token)
                .or_else(|| generations.previous.remove(token));
            if let Some(link) = held {
                taken.insert(*token, link);
            }
        }
        taken
    }

    /// Drop every row held (an address was erased).
    pub fn forget_all(&self) {
        let dropped = std::mem::take(&mut *self.generations.lock_even_poisoned());
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
    fn a_held_row_is_taken_once() {
        let handoff = ReaderHandoff::default();
        let (token, link) = row(3, "a@example.com");
        handoff.hold(token, &link);
        let (other, _) = row(4, "b@example.com");
        let taken = handoff.take(&[token, other]);
        assert_eq!(taken.len(), 1);
        assert_eq!(
            taken.get(&token).map(|l| l.email.as_str()),
            Some("a@example.com")
        );
        assert!(handoff.take(&[token]).is_empty());
        assert!(handoff.is_empty());
    }

    #[test]
    fn shared_rows_and_rows_without_an_address_are_not_held() {
        let handoff = ReaderHandoff::default();
        let (shared, link) = row(0, "a@example.com");
        handoff.hold(shared, &link);
        let (blanked, link) = row(5, "");
        handoff.hold(blanked, &link);
        assert!(handoff.is_empty());
    }

    #[test]
    fn at_most_two_generations_are_held() {
        let handoff = ReaderHandoff::default();
        let (first, link) = row(1, "a@example.com");
        handoff.hold(first, &link);
        for n in 0..2 * GENERATION_ENTRIES {
            let (token, link) = row(n as u64 + 2, "b@example.com");
            handoff.hold(token, &link);
        }
        assert!(handoff.len() <= 2 * GENERATION_ENTRIES);
        assert!(
            handoff.take(&[first]).is_empty(),
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
        handoff.hold(token, &link);
        handoff.forget_all();
        assert!(handoff.take(&[token]).is_empty());
    }
}
