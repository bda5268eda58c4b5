//! One event (a click, an open, an image load, an unsubscribe) as the
//! server records it, the journal carries it, the replay stores it in
//! `events` and the payload sends it out. A plain value, below every layer
//! that moves it.

use crate::kind::EventKind;
use chrono::{DateTime, NaiveDate, Utc};

/// One event row as stored. `inserted` is the UTC day of `occurred_at`.
///
/// Not the journal's line format: that is
/// `journal::line::JournalLine`, versioned apart from this row.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub event_id: [u8; 16],
    pub occurred_at: DateTime<Utc>,
    pub kind: EventKind,
    /// The token that was hit, as stored in `events.uuid`.
    pub token: [u8; 16],
    pub link_id: Option<u64>,
    pub mailing_id: Option<String>,
    pub letter_id: Option<u64>,
    pub email: Option<String>,
    pub position: Option<u32>,
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    /// The client address's country (ISO 3166-1 alpha-2, upper case), when
    /// the server has a GeoIP database (`serve --geoip`) that knows it.
    pub country: Option<String>,
    pub bot: bool,
    pub bot_reason: Option<String>,
}

/// `events.uuid` of an event stored for nobody ([`EventRow::withhold`]):
/// the token would lead to the letter's row and its address.
pub const WITHHELD_TOKEN: [u8; 16] = [0; 16];

impl EventRow {
    /// The partition key.
    pub fn inserted(&self) -> NaiveDate {
        self.occurred_at.date_naive()
    }

    /// Keep only what an anonymous count needs (a hit of an address that
    /// withdrew from tracking, docs/privacy.md): kind, time, mailing,
    /// position and the request's bot verdict. No token, link, letter,
    /// address, network or user agent; letter 0, as the shared rows of an
    /// anonymous letter. Such an event is counted, never sent out.
    pub fn withhold(&mut self) {
        self.token = WITHHELD_TOKEN;
        self.link_id = None;
        self.letter_id = Some(0);
        self.email = None;
        self.forget_request();
    }

    /// Whether the event was stored for nobody ([`EventRow::withhold`]).
    pub fn is_withheld(&self) -> bool {
        self.token == WITHHELD_TOKEN
    }

    /// Drop the request's network, user agent and country: kept only with a
    /// letter whose reader has not withdrawn (an event of a shared row,
    /// a late hit or an erased letter names no one they could be kept for).
    pub fn forget_request(&mut self) {
        self.ip = None;
        self.user_agent = None;
        self.country = None;
    }

    /// Whether the event belongs to one reader's letter (letter id above 0).
    pub fn has_letter(&self) -> bool {
        self.letter_id.is_some_and(|id| id > 0)
    }
}
