//! The stats routes' credentials ([`Auth`]: the API token, whether the
//! browser login is on, the session cookie's settings) and how a request's
//! are read and checked ([`Auth::access`]); the handlers that use them are
//! in `auth.rs`.

use super::error::StatsError;
use crate::server::guesses::{self, GuessLimiter};
use crate::store::dashboard_sessions;
use axum::http::{header, HeaderMap};
use sha2::{Digest, Sha256};
use sqlx::MySqlPool;
use std::sync::Arc;
use std::time::Duration;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "lt_session";

/// How long a login lasts unless the browser logs out first.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Wrong secrets (tokens posted or sent as bearer, unknown session
/// cookies) one client network may present within [`LOGIN_WINDOW`] before
/// every further attempt answers 429 until a window has passed (the
/// server's one limiter, `server/guesses.rs`).
pub const MAX_FAILED_LOGINS: u32 = guesses::MAX_WRONG_GUESSES;
pub const LOGIN_WINDOW: Duration = guesses::GUESS_WINDOW;

/// The configured credentials. Cheap to clone.
#[derive(Clone, Default)]
pub struct Auth {
    pub(super) token: Option<Arc<str>>,
    /// The browser login is on (a secret is configured).
    pub(super) login: bool,
    /// The cookie is sent over https only: the base URL is https, so a
    /// browser that reached the dashboard over plain http must not carry it.
    pub secure_cookie: bool,
    /// Take the client address of the login rate limit from our own
    /// proxy's `X-Forwarded-For` (the server's `--trust-forwarded-for`).
    pub trust_forwarded_for: bool,
    /// How long a new session lasts.
    pub session_ttl: Option<Duration>,
    /// The server's one limiter of wrong secrets (shared with the admin
    /// listener's token check).
    pub guesses: GuessLimiter,
    /// Longest wait for the login form's body.
    pub body_deadline: Option<Duration>,
}

/// What a request's credentials come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Allowed,
    /// No credentials at all (nothing guessed).
    Missing,
    /// A wrong bearer token or an unknown session cookie: a guess.
    Wrong(&'static str),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secrets.
        f.debug_struct("Auth")
            .field("enabled", &self.token.is_some())
            .field("login", &self.login)
            .finish()
    }
}

impl Auth {
    pub fn new(api_token: Option<&str>, secret: Option<&str>) -> Auth {
        let token = api_token.map(str::trim).filter(|t| !t.is_empty());
        let login = token.is_some() && secret.is_some_and(|s| !s.is_empty());
        Auth {
            token: token.map(Arc::from),
            login,
            ..Auth::default()
        }
    }

    /// False when no API token is configured: everything answers 404.
    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    /// Whether the request carries the token or a live session cookie, or
    /// guessed wrong, or brought nothing.
    pub(crate) async fn access(
        &self,
        pool: &MySqlPool,
        headers: &HeaderMap,
    ) -> Result<Access, StatsError> {
        let Some(token) = self.token.as_deref() else {
            return Ok(Access::Missing);
        };
        let mut access = Access::Missing;
        if let Some(given) = bearer(headers) {
            if constant_time_eq(given.as_bytes(), token.as_bytes()) {
                return Ok(Access::Allowed);
            }
            access = Access::Wrong("api_token");
        }
        match cookie(headers, COOKIE) {
            Some(id) if self.login => {
                if dashboard_sessions::is_live(pool, &session_hash(id)).await? {
                    return Ok(Access::Allowed);
                }
                Ok(Access::Wrong("session_cookie"))
            }
            _ => Ok(access),
        }
    }

    pub(super) fn token_matches(&self, given: &str) -> bool {
        self.token
            .as_deref()
            .is_some_and(|t| constant_time_eq(given.trim().as_bytes(), t.as_bytes()))
    }

    pub(super) fn cookie_attributes(&self) -> &'static str {
        if self.secure_cookie {
            "; Path=/; HttpOnly; SameSite=Strict; Secure"
        } else {
            "; Path=/; HttpOnly; SameSite=Strict"
        }
    }
}

/// The session id as the database keeps it: its SHA-256, so a copy of the
/// table logs nobody in.
pub(super) fn session_hash(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// A new session id: 256 bits from the operating system's CSPRNG, hex.
pub(super) fn new_session_id() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Compares without an early exit (the `subtle` crate), so the time taken
/// does not tell how many leading bytes matched. (The length is not secret.)
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

pub(super) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}
