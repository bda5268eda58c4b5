//! Turning a hit into an event: classify it, fill the row, journal it.
//!
//! What a journaled event holds about the person (docs/privacy.md):
//! * never the address: the replay reads it from the link's row (and
//!   applies an unsubscribe the server could not, the database away), so
//!   an address erased meanwhile is not written back;
//! * the request's network (/24, /48) and user agent only for a hit on one
//!   reader's letter whose reader has not withdrawn: not for a row every
//!   letter of a mailing shares (images, anonymous letters), a late hit
//!   or an erased letter;
//! * a hit on the letter of an address that withdrew from tracking (or was
//!   erased after the letter was made) is journaled for nobody
//!   ([`EventRow::withhold`]), checked in memory ([`crate::privacy`]).
//!   Opens are journaled with their token only (the pixel reads nothing),
//!   so the replay makes that check for them.

use super::request::RequestMeta;
use super::state::{AppState, Reader, ServedLink};
use crate::bots::Hit;
use crate::event::EventRow;
use crate::kind::EventKind;
use crate::locks::LockEvenPoisoned;
use crate::privacy::Withheld;
use crate::store::link_templates::LinkTemplate;
use crate::token::Token;
use chrono::Utc;
use uuid::ClockSequence;

/// Classify and journal one hit (not async: the journal's write is
/// one system call under a std mutex). Returns once the event is in the
/// journal (`true`) or could not be journaled (`false`, logged); the
/// database insert happens later, in the background. `link` is `None`
/// for an event journaled with its token only: the replay looks the
/// link up (journal record version 2). `meta` is taken, so its user
/// agent moves into the event instead of being copied.
pub(crate) fn journal_hit(
    state: &AppState,
    kind: EventKind,
    token: Token,
    link: Option<&ServedLink>,
    meta: RequestMeta,
) -> bool {
    journal_hit_at(state, kind, token, link, meta, Utc::now())
}

/// [`journal_hit`] of a hit that happened at `now` (the
/// pixel's, whose token check read the clock: the time and the event's
/// id come from that one reading).
pub(crate) fn journal_hit_at(
    state: &AppState,
    kind: EventKind,
    token: Token,
    link: Option<&ServedLink>,
    meta: RequestMeta,
    now: chrono::DateTime<Utc>,
) -> bool {
    if !state.settings.record_events {
        return true;
    }
    let letter = link.map(|l| (l.mailing_id.as_str(), l.letter_id, l.position));
    let verdict = classify(state, kind, token, letter, &meta, now);
    let row = event(kind, token, Named::link(link), meta, now, verdict);
    journal(state, screened(state, row, link))
}

/// Journal a click on the letter's honeypot link: a bot by definition
/// (reason `honeypot`); the rollup marks the letter's clicks around it.
pub(crate) fn journal_honeypot(
    state: &AppState,
    token: Token,
    link: &ServedLink,
    meta: RequestMeta,
) -> bool {
    if !state.settings.record_events {
        return true;
    }
    let verdict = Some(crate::bots::letter_judgement::HONEYPOT.to_owned());
    let named = Named::link(Some(link));
    let row = event(EventKind::Click, token, named, meta, Utc::now(), verdict);
    journal(state, screened(state, row, Some(link)))
}

/// Journal a late hit: a token whose row is gone, answered
/// from its link template. The event names the mailing and position
/// and nobody: no link, letter, address, network or user agent.
/// `link_id` 0 marks it late (there is no row for the replay to look
/// up), and the statistics keep late events apart from the letters' own.
pub(crate) fn journal_late(
    state: &AppState,
    kind: EventKind,
    token: Token,
    template: &LinkTemplate,
    meta: RequestMeta,
) -> bool {
    if !state.settings.record_events {
        return true;
    }
    let now = Utc::now();
    let verdict = classify(state, kind, token, None, &meta, now);
    let mut row = event(kind, token, Named::late(template), meta, now, verdict);
    row.forget_request();
    journal(state, row)
}

/// The request-time bot verdict of a hit (the rollup may revise it).
fn classify(
    state: &AppState,
    kind: EventKind,
    token: Token,
    letter: Option<(&str, u64, u32)>,
    meta: &RequestMeta,
    now: chrono::DateTime<Utc>,
) -> Option<String> {
    state.bots.classify(&Hit {
        kind,
        is_head: meta.is_head,
        user_agent: meta.user_agent.as_deref(),
        network: meta.network,
        built_at: token.created_at(),
        now,
        letter,
    })
}

/// The row of a hit, as the request and its link name it.
fn event(
    kind: EventKind,
    token: Token,
    named: Named,
    meta: RequestMeta,
    now: chrono::DateTime<Utc>,
    verdict: Option<String>,
) -> EventRow {
    EventRow {
        event_id: event_id(now),
        occurred_at: now,
        kind,
        token: *token.as_bytes(),
        link_id: named.link_id,
        mailing_id: named.mailing_id,
        letter_id: named.letter_id,
        email: None,
        position: named.position,
        ip: meta.network.map(network_text),
        user_agent: meta.user_agent,
        country: meta.country,
        bot: verdict.is_some(),
        bot_reason: verdict,
    }
}

/// What of `row` may be journaled, by whose letter `link` is (see the
/// module docs).
fn screened(state: &AppState, mut row: EventRow, link: Option<&ServedLink>) -> EventRow {
    let Some(link) = link else {
        // An open, journaled with its token only: the replay screens it.
        return row;
    };
    match link.reader {
        Reader::Nobody => row.forget_request(),
        Reader::Person(None) => {}
        Reader::Person(Some(fingerprint)) => {
            let made_at = Token::from_bytes(&row.token)
                .map(|t| t.created_at())
                .unwrap_or_else(|_| Utc::now());
            match state.privacy.withholds(fingerprint, made_at) {
                Withheld::No => {}
                // Unsubscribing is no tracking: it still names whom it
                // unsubscribes, without the request's details.
                Withheld::OptedOut | Withheld::Erased if row.kind == EventKind::Unsubscribe => {
                    row.forget_request()
                }
                Withheld::OptedOut | Withheld::Erased => row.withhold(),
            }
        }
    }
    row
}

fn journal(state: &AppState, mut row: EventRow) -> bool {
    if let Some(router) = &state.cluster {
        // On a cluster, the event is stored on its link's node, so a
        // node's outage holds back only its own links' events.
        router.place_event(&row.token, &mut row.event_id);
    }
    crate::journal::append(&state.recorder, row)
}

/// What an event names: its link's row, a late hit's template, or nothing
/// yet (an open journaled with its token only). Never the address.
struct Named {
    link_id: Option<u64>,
    mailing_id: Option<String>,
    letter_id: Option<u64>,
    position: Option<u32>,
}

impl Named {
    fn link(link: Option<&ServedLink>) -> Named {
        Named {
            link_id: link.map(|l| l.id),
            mailing_id: link.map(|l| l.mailing_id.clone()),
            letter_id: link.map(|l| l.letter_id),
            position: link.map(|l| l.position),
        }
    }

    /// A late hit names the mailing and position only.
    fn late(template: &LinkTemplate) -> Named {
        Named {
            link_id: Some(LATE_LINK_ID),
            mailing_id: Some(template.mailing_id.clone()),
            letter_id: None,
            position: Some(template.position),
        }
    }
}

/// The network as `events.ip` stores it: an IPv4 one written octet by
/// octet (`Display` through `core::fmt` is a large share of an open's
/// cost for four small numbers); IPv6 by `Display`.
fn network_text(network: std::net::IpAddr) -> String {
    let std::net::IpAddr::V4(v4) = network else {
        return network.to_string();
    };
    let mut text = String::with_capacity(15);
    for (n, octet) in v4.octets().into_iter().enumerate() {
        if n > 0 {
            text.push('.');
        }
        text.push_str(itoa::Buffer::new().format(octet));
    }
    text
}

/// A new event's id: a version-7 UUID of `now` (the event's own time, so
/// the clock is read once per hit), ordered after every id this process
/// made before, as `Uuid::now_v7` orders its own (one counter under a
/// lock; its random part from the same generator).
fn event_id(now: chrono::DateTime<Utc>) -> [u8; 16] {
    static EVENT_IDS: EventIds = EventIds(std::sync::Mutex::new(uuid::ContextV7::new()));
    match u64::try_from(now.timestamp()) {
        Ok(seconds) => {
            let at = uuid::Timestamp::from_unix(&EVENT_IDS, seconds, now.timestamp_subsec_nanos());
            *uuid::Uuid::new_v7(at).as_bytes()
        }
        // Before 1970: no version-7 time; the clock's own reading.
        Err(_) => *uuid::Uuid::now_v7().as_bytes(),
    }
}

/// The counter of event ids, shared by the threads under a lock taken
/// once per id (`Mutex<ContextV7>` as a `ClockSequence` locks a second
/// time to say how many bits its counter has, which never changes).
struct EventIds(std::sync::Mutex<uuid::ContextV7>);

impl ClockSequence for EventIds {
    type Output = u64;

    fn generate_sequence(&self, seconds: u64, subsec_nanos: u32) -> u64 {
        self.0
            .lock_even_poisoned()
            .generate_sequence(seconds, subsec_nanos)
    }

    fn generate_timestamp_sequence(&self, seconds: u64, subsec_nanos: u32) -> (u64, u64, u32) {
        self.0
            .lock_even_poisoned()
            .generate_timestamp_sequence(seconds, subsec_nanos)
    }

    fn usable_bits(&self) -> usize {
        // A context's bit count is a constant of its type: a fresh one's.
        uuid::ContextV7::new().usable_bits()
    }
}

/// `events.link_id` of a late event: no `links` row has id 0.
pub(crate) const LATE_LINK_ID: u64 = 0;

#[cfg(test)]
mod tests {
    use super::network_text;
    use proptest::prelude::*;

    #[test]
    fn event_ids_are_version_7_of_their_time_and_ordered() {
        let now = chrono::Utc::now();
        let ids: Vec<[u8; 16]> = (0..1000).map(|_| super::event_id(now)).collect();
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "ids made in turn are ordered");
        }
        let id = uuid::Uuid::from_bytes(ids[0]);
        assert_eq!(id.get_version_num(), 7);
        let (seconds, _) = id.get_timestamp().unwrap().to_unix();
        assert_eq!(seconds, now.timestamp() as u64);
    }

    proptest! {
        #[test]
        fn a_network_is_written_as_display_writes_it(octets in any::<[u8; 4]>(), segments in any::<[u16; 8]>()) {
            let v4 = std::net::IpAddr::from(octets);
            prop_assert_eq!(network_text(v4), v4.to_string());
            let v6 = std::net::IpAddr::from(segments);
            prop_assert_eq!(network_text(v6), v6.to_string());
        }
    }
}
