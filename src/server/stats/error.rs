//! Every failure of a stats request ([`StatsError`]) and its answer: a
//! status and a JSON `{"error": "…"}` body.

use crate::mailing_id::MailingId;
use crate::store::StoreError;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

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
    LiveUnavailable(#[source] crate::live::LiveError),
    /// The session cookie we built is no header value.
    #[error("session cookie: {0}")]
    Cookie(#[source] axum::http::header::InvalidHeaderValue),
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
            StatsError::BadRequest(_) | StatsError::Cookie(_) => StatusCode::BAD_REQUEST,
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
            let (kind, mysql_error) = match &self {
                StatsError::Store(store) => (Some(store.kind()), store.mysql_error()),
                _ => (None, None),
            };
            tracing::error!(
                kind,
                mysql_error,
                error = %crate::error_report::chain(&self),
                "stats request failed"
            );
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

/// The mailing a stats URL names, as a [`MailingId`]: an id that breaks
/// the rules was never stored, so it is answered as any unknown mailing.
pub(crate) fn named_mailing(id: String) -> Result<MailingId, StatsError> {
    MailingId::parse(&id).map_err(|_| StatsError::UnknownMailing(id))
}
