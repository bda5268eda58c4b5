//! The operators' dashboard (`/mailings`, `/login`), as one axum router
//! the main app mounts with `.merge(stats::router(state))`; its state and
//! credentials are shared with the API (`server/api/`), which has its own
//! routes, keys and scopes (docs/api.md).
//!
//! # Access
//!
//! Everything here is behind `LINKTRACK_API_TOKEN`. Without a token these
//! routes answer 404, as if absent: off, never open. A request is let in by
//! `Authorization: Bearer <token>` (compared in constant time) or, for
//! browsers, by the `lt_session` cookie that `POST /login` sets: a random
//! 256-bit session id (HttpOnly, SameSite=Strict, `Secure` under an https
//! base URL) whose SHA-256 and expiry (12 h) the database keeps in
//! `dashboard_sessions`; every login gets a new id, `POST /logout` deletes
//! it. Wrong secrets (bearer tokens, unknown cookies, posted tokens) are
//! limited per client network (10 in 5 minutes, then 429 with
//! `Retry-After`; `server/guesses.rs`). `LINKTRACK_SECRET` turns the login form on;
//! without it only the header works.
//!
//! Handlers stay thin: SQL is in [`crate::store::stats`], Redis in
//! [`crate::live`].

pub(crate) mod auth;
pub(crate) mod chart;
pub(crate) mod clickmap;
mod creative_images;
pub(crate) mod credentials;
pub(crate) mod dashboard;
mod error;
mod headers;
mod page_templates;
mod state;

use axum::routing::{get, post};
use axum::{middleware, Router};

pub use credentials::{Auth, LOGIN_WINDOW, MAX_FAILED_LOGINS, SESSION_TTL};
pub use error::StatsError;
pub(crate) use headers::security_headers;
pub use state::StatsState;

/// The stats routes. Mount into the main app with `.merge(router(state))`.
pub fn router(state: StatsState) -> Router {
    let protected = Router::new()
        .route("/mailings", get(dashboard::index))
        .route("/mailings/{id}", get(dashboard::mailing))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require));
    Router::new()
        .route("/", get(auth::home))
        .route("/login", get(auth::login_form).post(auth::login))
        .route("/logout", post(auth::logout))
        .merge(protected)
        .route_layer(middleware::from_fn(headers::security_headers))
        .with_state(state)
}
