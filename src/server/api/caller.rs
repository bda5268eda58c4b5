//! [`ApiCaller`]: the extractor every `/api/` handler takes first. It reads
//! the bearer key (or a dashboard login's cookie), verifies it with the
//! server's [`KeyVerifier`](crate::api_keys::KeyVerifier), counts a wrong
//! one toward the guess limiter (`server/guesses.rs`), and answers 401 or
//! 429 itself. A handler then says what it needs with
//! [`ApiCaller::require`], the one way a scope is checked:
//!
//! ```text
//! async fn handler(caller: ApiCaller, …) -> Result<…, ApiError> {
//!     caller.require(Scope::LettersWrite)?;
//! ```

use super::error::ApiError;
use super::state::ApiState;
use crate::api_keys::{Caller, Scope};
use crate::server::guesses;
use crate::server::stats::credentials::{bearer, Access};
use axum::extract::{FromRequestParts, MatchedPath};
use axum::http::request::Parts;

/// A verified caller of the API and the route it called.
#[derive(Debug, Clone)]
pub struct ApiCaller {
    pub caller: Caller,
    /// `METHOD /route/{pattern}`, for the 403's message.
    route: String,
}

impl ApiCaller {
    /// `Ok` when the caller's key has `scope`; else the 403 naming it.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.caller.scopes.contains(scope) {
            return Ok(());
        }
        Err(ApiError::MissingScope {
            scope,
            what: self.route.clone(),
        })
    }
}

impl FromRequestParts<ApiState> for ApiCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        if !state.keys.enabled() {
            return Err(ApiError::Off);
        }
        let auth = &state.stats.auth;
        let client =
            guesses::client_address(auth.trust_forwarded_for, &parts.extensions, &parts.headers);
        // A blocked network is refused before its key is looked at.
        auth.guesses.check(client).await.map_err(too_many)?;
        let route = format!(
            "{} {}",
            parts.method,
            parts
                .extensions
                .get::<MatchedPath>()
                .map_or(parts.uri.path(), MatchedPath::as_str)
        );
        let wrong = match bearer(&parts.headers) {
            Some(key) => match state.keys.verify(key).await? {
                Some(caller) => return Ok(ApiCaller { caller, route }),
                None => "api_key",
            },
            None => match auth.access(&state.stats.pool, &parts.headers).await? {
                Access::Allowed => {
                    let caller = Caller::all_scopes("dashboard login");
                    return Ok(ApiCaller { caller, route });
                }
                Access::Missing => return Err(ApiError::Unauthorized),
                Access::Wrong(what) => what,
            },
        };
        auth.guesses.wrong(client, wrong).await.map_err(too_many)?;
        Err(ApiError::Unauthorized)
    }
}

fn too_many(blocked: guesses::Blocked) -> ApiError {
    ApiError::TooMany {
        retry_after_secs: blocked.retry_after_secs,
    }
}
