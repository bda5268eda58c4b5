//! The second stage of the rollup's counting: a batch's events counted in
//! memory ([`Tally`]), the rows each statistics table gets, with the user
//! agents classified once per batch.

use super::batch::{counted_as_bot, is_regular, BatchEvent};
use crate::bots::clients::{Classifier, ClientClass};
use crate::kind::EventKind;
use chrono::{NaiveDateTime, Timelike};
use std::collections::HashMap;

/// A mailing, by its index in [`Tally::mailings`].
pub(super) type M = u32;

/// A letter's row of `stats_letter_events`: mailing, letter, kind, clicked
/// position (0 for other kinds) and bot flag.
type LetterKey = (M, u64, EventKind, u32, bool);

/// A batch, counted: the rows to add to each statistics table.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(super) mailings: Vec<String>,
    mailing_index: HashMap<String, M>,
    pub(super) hourly: HashMap<(M, NaiveDateTime, EventKind, bool), u64>,
    pub(super) minutes: HashMap<(M, NaiveDateTime, EventKind, bool), u64>,
    pub(super) totals: HashMap<(M, EventKind, bool), u64>,
    pub(super) links: HashMap<(M, u32, bool), u64>,
    pub(super) bot_reasons: HashMap<(M, EventKind, String), u64>,
    pub(super) late: HashMap<(M, u32, EventKind, bool), u64>,
    /// Per letter: count and first time, by kind and clicked position.
    pub(super) letters: HashMap<LetterKey, (u64, NaiveDateTime)>,
    /// Per letter that clicked (any link): the first click's time.
    pub(super) first_clicks: HashMap<(M, bool, u64), NaiveDateTime>,
    pub(super) breakdowns: HashMap<(M, &'static str, String, EventKind, bool), u64>,
    /// The user agents of the batch's opens and clicks, classified.
    pub(super) agents: HashMap<String, ClientClass>,
}

impl Tally {
    /// Count `events`; minutes only from `minutes_since` on (the chart of
    /// the first hours keeps three days).
    pub(crate) fn of(events: &[BatchEvent], minutes_since: NaiveDateTime) -> Tally {
        let classifier = Classifier::default();
        let mut tally = Tally::default();
        for event in events {
            tally.add(event, &classifier, minutes_since);
        }
        tally
    }

    fn mailing(&mut self, id: &str) -> M {
        if let Some(m) = self.mailing_index.get(id) {
            return *m;
        }
        let m = self.mailings.len() as M;
        self.mailings.push(id.to_owned());
        self.mailing_index.insert(id.to_owned(), m);
        m
    }

    fn add(&mut self, event: &BatchEvent, classifier: &Classifier, minutes_since: NaiveDateTime) {
        let m = self.mailing(&event.mailing_id);
        let (kind, at, bot) = (event.kind, event.occurred_at, counted_as_bot(event));
        let engagement = matches!(kind, EventKind::Open | EventKind::Click);
        let class = match (engagement, event.user_agent.as_deref()) {
            (true, Some(agent)) => Some(self.class_of(agent, classifier)),
            (true, None) => Some(classifier.classify(None)),
            (false, _) => None,
        };
        if event.link_id == Some(0) {
            let key = (m, event.position.unwrap_or(0), kind, bot);
            *self.late.entry(key).or_default() += 1;
        }
        if !is_regular(event) {
            return;
        }
        *self.hourly.entry((m, hour(at), kind, bot)).or_default() += 1;
        if engagement && at >= minutes_since {
            *self.minutes.entry((m, minute(at), kind, bot)).or_default() += 1;
        }
        *self.totals.entry((m, kind, bot)).or_default() += 1;
        let clicked = match (kind, event.position) {
            (EventKind::Click, Some(position)) if position > 0 => Some(position),
            _ => None,
        };
        if let Some(position) = clicked {
            *self.links.entry((m, position, bot)).or_default() += 1;
        }
        if event.bot {
            let reason = event.bot_reason.as_deref().unwrap_or("unknown");
            *self
                .bot_reasons
                .entry((m, kind, reason.to_owned()))
                .or_default() += 1;
        }
        if let Some(letter) = event.letter_id.filter(|l| *l > 0) {
            self.add_letter(m, letter, event, bot);
        }
        if let Some(class) = class {
            self.add_breakdowns(m, event, bot, &class);
        }
    }

    /// The class of a user agent, classified once per batch (and recorded
    /// once per installation, [`Tally::write`]).
    fn class_of(&mut self, agent: &str, classifier: &Classifier) -> ClientClass {
        if let Some(class) = self.agents.get(agent) {
            return class.clone();
        }
        let class = classifier.classify(Some(agent));
        self.agents.insert(agent.to_owned(), class.clone());
        class
    }

    fn add_letter(&mut self, m: M, letter: u64, event: &BatchEvent, bot: bool) {
        let (kind, at) = (event.kind, event.occurred_at);
        let position = match kind {
            EventKind::Click => event.position.unwrap_or(0),
            _ => 0,
        };
        let row = self
            .letters
            .entry((m, letter, kind, position, bot))
            .or_insert((0, at));
        row.0 += 1;
        row.1 = row.1.min(at);
        if kind == EventKind::Click {
            keep_first(&mut self.first_clicks, (m, bot, letter), at);
        }
    }

    fn add_breakdowns(&mut self, m: M, event: &BatchEvent, bot: bool, class: &ClientClass) {
        let provider = event
            .email
            .as_deref()
            .map_or("unknown", crate::address::mailbox_provider);
        let values: [(&'static str, &str); 6] = [
            ("client", &class.client),
            ("client_type", class.client_type.as_str()),
            ("os", &class.os),
            ("device", class.device.as_str()),
            ("provider", provider),
            ("country", event.country.as_deref().unwrap_or("unknown")),
        ];
        for (dimension, value) in values {
            let key = (m, dimension, value.to_owned(), event.kind, bot);
            *self.breakdowns.entry(key).or_default() += 1;
        }
    }
}

fn keep_first<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, NaiveDateTime>,
    key: K,
    at: NaiveDateTime,
) {
    map.entry(key)
        .and_modify(|first| *first = (*first).min(at))
        .or_insert(at);
}

fn hour(at: NaiveDateTime) -> NaiveDateTime {
    at.date().and_hms_opt(at.hour(), 0, 0).unwrap_or(at)
}

fn minute(at: NaiveDateTime) -> NaiveDateTime {
    at.date()
        .and_hms_opt(at.hour(), at.minute(), 0)
        .unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn at(h: u32, m: u32, s: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 11, 27)
            .and_then(|d| d.and_hms_opt(h, m, s))
            .expect("a valid time")
    }

    fn event(
        kind: EventKind,
        letter: u64,
        position: Option<u32>,
        when: NaiveDateTime,
    ) -> BatchEvent {
        BatchEvent {
            mailing_id: "m1".into(),
            letter_id: Some(letter),
            kind,
            occurred_at: when,
            position,
            link_id: Some(7),
            bot: false,
            bot_reason: None,
            user_agent: Some("Mozilla/5.0 (Windows NT 10.0) Microsoft Outlook 16.0".into()),
            country: Some("DE".into()),
            email: Some("a@gmail.com".into()),
        }
    }

    #[test]
    fn a_letters_clicks_count_per_position_and_once_for_uniques() {
        let events = [
            event(EventKind::Click, 5, Some(2), at(10, 5, 9)),
            event(EventKind::Click, 5, Some(2), at(10, 1, 0)),
            event(EventKind::Click, 5, Some(3), at(11, 0, 0)),
        ];
        let tally = Tally::of(&events, at(0, 0, 0));
        assert_eq!(tally.totals[&(0, EventKind::Click, false)], 3);
        assert_eq!(tally.links[&(0, 2, false)], 2);
        assert_eq!(
            tally.letters[&(0, 5, EventKind::Click, 2, false)],
            (2, at(10, 1, 0))
        );
        // The letter's first click, and its first on each position.
        assert_eq!(tally.first_clicks[&(0, false, 5)], at(10, 1, 0));
        assert_eq!(tally.first_clicks.len(), 1);
        assert_eq!(
            tally.letters[&(0, 5, EventKind::Click, 3, false)],
            (1, at(11, 0, 0))
        );
        assert_eq!(tally.hourly[&(0, at(10, 0, 0), EventKind::Click, false)], 2);
        assert_eq!(
            tally.minutes[&(0, at(10, 5, 0), EventKind::Click, false)],
            1
        );
    }

    #[test]
    fn late_events_are_counted_apart_and_nowhere_else() {
        let mut late = event(EventKind::Click, 5, Some(2), at(10, 0, 0));
        late.link_id = Some(0);
        let tally = Tally::of(&[late], at(0, 0, 0));
        assert_eq!(tally.late[&(0, 2, EventKind::Click, false)], 1);
        assert!(tally.totals.is_empty() && tally.letters.is_empty());
        assert!(tally.breakdowns.is_empty() && tally.hourly.is_empty());
        // Its user agent is still classified and recorded.
        assert_eq!(tally.agents.len(), 1);
    }

    #[test]
    fn an_unsubscribe_by_a_bot_counts_with_the_humans_and_keeps_its_reason() {
        let mut unsubscribe = event(EventKind::Unsubscribe, 5, None, at(10, 0, 0));
        unsubscribe.bot = true;
        unsubscribe.bot_reason = Some("datacenter".into());
        let mut open = event(EventKind::Open, 5, None, at(10, 0, 0));
        open.bot = true;
        let tally = Tally::of(&[unsubscribe, open], at(0, 0, 0));
        assert_eq!(tally.totals[&(0, EventKind::Unsubscribe, false)], 1);
        assert_eq!(tally.totals[&(0, EventKind::Open, true)], 1);
        assert_eq!(
            tally.bot_reasons[&(0, EventKind::Unsubscribe, "datacenter".into())],
            1
        );
        assert_eq!(
            tally.bot_reasons[&(0, EventKind::Open, "unknown".into())],
            1
        );
        // Unsubscribes are not engagement: no breakdown, no minute.
        assert!(tally.breakdowns.keys().all(|k| k.3 == EventKind::Open));
        assert!(tally.minutes.keys().all(|k| k.2 == EventKind::Open));
    }

    #[test]
    fn shared_rows_and_old_minutes_are_left_out_where_they_do_not_belong() {
        let shared = event(EventKind::Image, 0, None, at(9, 0, 0));
        let old = event(EventKind::Open, 6, None, at(1, 0, 0));
        let tally = Tally::of(&[shared, old], at(2, 0, 0));
        assert_eq!(tally.totals.len(), 2);
        assert!(tally.letters.keys().all(|k| k.1 == 6));
        assert!(tally.minutes.is_empty(), "{:?}", tally.minutes);
    }

    #[test]
    fn breakdowns_name_the_client_provider_and_country_and_unknown_without_them() {
        let known = event(EventKind::Open, 5, None, at(10, 0, 0));
        let mut bare = event(EventKind::Click, 6, Some(1), at(10, 0, 0));
        bare.user_agent = None;
        bare.country = None;
        bare.email = None;
        let tally = Tally::of(&[known, bare], at(0, 0, 0));
        let value = |dimension: &'static str, kind| {
            let mut found: Vec<&str> = tally
                .breakdowns
                .keys()
                .filter(|k| k.1 == dimension && k.3 == kind)
                .map(|k| k.2.as_str())
                .collect();
            found.sort_unstable();
            found.join(",")
        };
        assert_eq!(value("client", EventKind::Open), "Outlook");
        assert_eq!(value("provider", EventKind::Open), "Gmail");
        assert_eq!(value("country", EventKind::Open), "DE");
        for dimension in crate::store::breakdowns::DIMENSIONS {
            assert_eq!(value(dimension, EventKind::Click), "unknown", "{dimension}");
        }
        assert_eq!(tally.breakdowns.len(), 12);
    }
}
