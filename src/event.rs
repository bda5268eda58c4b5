//! One event (a click, an open, an image load, an unsubscribe) as the
//! server records it, the journal carries it, the replay stores it in
//! `events` and the payload sends it out. A plain value, below every layer
//! that moves it.

use crate::kind::EventKind;
use chrono::{DateTime, NaiveDate, Utc};

/// One event row as stored. `inserted` is the UTC day of `occurred_at`.
///
/// Not the journal's line format: that is
/// `events::journal_line::JournalLine`, versioned apart from this row.
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
    pub bot: bool,
    pub bot_reason: Option<String>,
}

impl EventRow {
    /// The partition key.
    pub fn inserted(&self) -> NaiveDate {
        self.occurred_at.date_naive()
    }
}
