//! The operators' side of the server: the stats API (`/api/mailings/…`) and
//! the dashboard (`/mailings`, `/login`), as one axum router the main app
//! mounts with `.merge(stats::router(state))`.
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

pub(crate) mod api;
pub(crate) mod auth;
pub use auth::{LOGIN_WINDOW, MAX_FAILED_LOGINS, SESSION_TTL};
pub(crate) mod chart;
pub(crate) mod clickmap;
mod creative_images;
pub(crate) mod dashboard;
mod export;
mod headers;

use crate::live::Live;
use crate::store::StoreError;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use sqlx::MySqlPool;
use std::sync::Arc;

pub use auth::Auth;

/// What the stats handlers share.
#[derive(Clone)]
pub struct StatsState {
    pub pool: MySqlPool,
    pub auth: Auth,
    /// The Redis live layer, when `REDIS_URL` is set.
    pub live: Option<Live>,
    /// The server's image proxy: the click map shows the creative's images
    /// through it (`creative_images`); `None`: placeholders.
    pub images: Option<Arc<super::image::ImageProxy>>,
    templates: Arc<minijinja::Environment<'static>>,
}

impl StatsState {
    /// `api_token` unset (or blank) turns the API and dashboard off;
    /// `secret` unset turns the browser login off.
    pub fn new(
        pool: MySqlPool,
        api_token: Option<&str>,
        secret: Option<&str>,
        live: Option<Live>,
    ) -> Result<StatsState, StatsError> {
        Ok(StatsState {
            pool,
            auth: Auth::new(api_token, secret),
            live,
            images: None,
            templates: Arc::new(dashboard::templates()?),
        })
    }
}

/// The stats routes. Mount into the main app with `.merge(router(state))`.
pub fn router(state: StatsState) -> Router {
    let protected = Router::new()
        .route("/api/mailings/{id}/stats", get(api::stats))
        .route("/api/mailings/{id}/segment", get(api::segment))
        .route("/api/mailings/{id}/recipients", get(export::recipients))
        .route("/api/mailings/{id}/breakdowns", get(api::breakdowns))
        .route("/api/breakdowns", get(api::breakdowns_overall))
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

/// Every failure of a stats request, answered as JSON `{"error": "…"}`.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// The feature is off (no API token): looks like any unknown path.
    #[error("not found")]
    Off,
    #[error("mailing {0:?} not found")]
    UnknownMailing(String),
    #[error("authentication required")]
    Unauthorized,
    /// The client's network presented too many wrong secrets (answered
    /// with `Retry-After`).
    #[error("too many wrong secrets from this network; try again later")]
    TooMany,
    #[error("{0}")]
    BadRequest(String),
    #[error("live statistics are unavailable: {0}")]
    LiveUnavailable(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("template: {0}")]
    Template(#[from] minijinja::Error),
    #[error("click map: {0}")]
    ClickMap(#[from] crate::letter::RewriteError),
}

impl StatsError {
    fn status(&self) -> StatusCode {
        match self {
            StatsError::Off | StatsError::UnknownMailing(_) => StatusCode::NOT_FOUND,
            StatsError::Unauthorized => StatusCode::UNAUTHORIZED,
            StatsError::TooMany => StatusCode::TOO_MANY_REQUESTS,
            StatsError::BadRequest(_) => StatusCode::BAD_REQUEST,
            StatsError::LiveUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            StatsError::Store(e) if e.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
            StatsError::Store(_) | StatsError::Template(_) | StatsError::ClickMap(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }
}

impl IntoResponse for StatsError {
    fn into_response(self) -> Response {
        let status = self.status();
        // Internal details go to the log, not to the client.
        let message = if status.is_server_error() {
            tracing::error!(error = %self, "stats request failed");
            match status {
                StatusCode::SERVICE_UNAVAILABLE => self.to_string(),
                _ => "internal error".to_owned(),
            }
        } else {
            self.to_string()
        };
        let body = Json(serde_json::json!({ "error": message }));
        if matches!(self, StatsError::Unauthorized) {
            return (
                status,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"linktrack\"")],
                body,
            )
                .into_response();
        }
        (status, body).into_response()
    }
}
