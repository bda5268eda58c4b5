//! [`ApiState`]: what the API's handlers share: the stats handlers' state
//! (pool, live layer, the guess limiter), the key verifier, the key
//! secret new keys are hashed with, the event feed and the letter tracker.

use super::event_feed::EventFeed;
use super::letter_tracker::LetterTracking;
use crate::api_keys::{KeySecret, KeyVerifier};
use crate::server::stats::StatsState;
use axum::extract::FromRef;

/// What the API's handlers share. Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    pub stats: StatsState,
    pub keys: KeyVerifier,
    /// The key of new keys' hashes (`POST /api/keys`); `None`: keys off.
    pub key_secret: Option<KeySecret>,
    /// What feeds `GET /api/events/stream`.
    pub events: EventFeed,
    /// What `POST /api/letters` tracks with.
    pub(crate) letters: LetterTracking,
}

impl FromRef<ApiState> for StatsState {
    fn from_ref(state: &ApiState) -> StatsState {
        state.stats.clone()
    }
}
