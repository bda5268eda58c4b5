//! [`ApiError`]: every failure of an `/api/` request, answered with one
//! JSON shape, `{"error": {"code": "…", "message": "…"}}` (docs/api.md,
//! "Errors"). The codes are a contract; the messages are for people.

use crate::api_keys::Scope;
use crate::error_report::chain;
use crate::mailing_id::MailingId;
use crate::server::stats::StatsError;
use crate::store::StoreError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

/// Any error kept whole as a cause.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An API failure: its status, code and message.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The API is off (no token, no key secret): like any unknown path.
    #[error("not found")]
    Off,
    #[error("{0}")]
    NotFound(String),
    /// A 404 with a code of its own (`unknown_position`, `unknown_name`, …).
    #[error("{message}")]
    Coded { code: &'static str, message: String },
    /// A request understood but refused by a rule (422), with its code.
    #[error("{message}")]
    Unprocessable { code: &'static str, message: String },
    #[error("a valid API key is required (Authorization: Bearer lt_…)")]
    Unauthorized,
    #[error("this key lacks a scope: {} needs scope {scope}", what)]
    MissingScope { scope: Scope, what: String },
    #[error("too many wrong keys from this network; try again later")]
    TooMany { retry_after_secs: u64 },
    #[error("{0}")]
    BadRequest(String),
    /// A part of the request a parser refused (400): which part, then the
    /// parser's error, kept as the cause.
    #[error("{what}: {source}")]
    BadPart {
        what: &'static str,
        #[source]
        source: BoxError,
    },
    /// A request value refused by an error that says it all (400).
    #[error(transparent)]
    BadValue(BoxError),
    /// The request body could not be read within its limit (400).
    #[error("request body: {source} (at most {limit} bytes)")]
    BodyUnreadable {
        limit: usize,
        #[source]
        source: axum::Error,
    },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    TooManyStreams(String),
    #[error("the service is unavailable: {0}")]
    Unavailable(String),
    /// A service the request needs failed (503): the cause goes to the
    /// log, the client is told to try again.
    #[error("the service is unavailable: {what}: {source}")]
    Failed {
        what: &'static str,
        #[source]
        source: BoxError,
    },
    /// The server's seal key may not seal new tokens (503): the message
    /// says why and what to do, and holds no secret.
    #[error("{0}")]
    CannotSeal(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Stats(#[source] StatsError),
}

/// The body every API error has.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: a stable `code` and a message for people.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// One of `not_found`, `unauthorized`, `missing_scope`,
    /// `too_many_requests`, `bad_request`, `conflict`, `unavailable`,
    /// `internal`; a mailing's links add `unknown_mailing`,
    /// `unknown_position`, `unknown_name`, `no_link_with_url`,
    /// `unknown_recipient` (404) and `target_refused` (422).
    pub code: String,
    pub message: String,
}

impl From<StatsError> for ApiError {
    fn from(err: StatsError) -> ApiError {
        match err {
            StatsError::Off => ApiError::Off,
            StatsError::UnknownMailing(_) => ApiError::NotFound(err.to_string()),
            StatsError::Unauthorized => ApiError::Unauthorized,
            StatsError::TooMany => ApiError::TooMany {
                retry_after_secs: crate::server::guesses::GUESS_WINDOW.as_secs(),
            },
            StatsError::BadRequest(message) => ApiError::BadRequest(message),
            StatsError::Store(store) => ApiError::Store(store),
            other => ApiError::Stats(other),
        }
    }
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Off | ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Coded { code, .. } => (StatusCode::NOT_FOUND, code),
            ApiError::Unprocessable { code, .. } => (StatusCode::UNPROCESSABLE_ENTITY, code),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::MissingScope { .. } => (StatusCode::FORBIDDEN, "missing_scope"),
            ApiError::TooMany { .. } | ApiError::TooManyStreams(_) => {
                (StatusCode::TOO_MANY_REQUESTS, "too_many_requests")
            }
            ApiError::BadRequest(_)
            | ApiError::BadPart { .. }
            | ApiError::BadValue(_)
            | ApiError::BodyUnreadable { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::Unavailable(_) | ApiError::CannotSeal(_) | ApiError::Failed { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            ApiError::Stats(StatsError::LiveUnavailable(_)) => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            ApiError::Store(e) if e.is_unavailable() => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            ApiError::Store(_) | ApiError::Stats(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            }
        }
    }

    /// The body's message: internal details go to the log, not the client.
    fn public_message(&self, status: StatusCode) -> String {
        if !status.is_server_error() {
            return self.to_string();
        }
        if let ApiError::CannotSeal(message) = self {
            tracing::error!("{message}");
            return message.clone();
        }
        let (kind, mysql_error) = match self {
            ApiError::Store(store) => (Some(store.kind()), store.mysql_error()),
            _ => (None, None),
        };
        tracing::error!(kind, mysql_error, error = %chain(self), "API request failed");
        match status {
            StatusCode::SERVICE_UNAVAILABLE => "the service is unavailable; try again".to_owned(),
            _ => "internal error".to_owned(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message: self.public_message(status),
            },
        };
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        match self {
            ApiError::Unauthorized => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"linktrack\""),
                );
            }
            ApiError::TooMany { retry_after_secs } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            }
            _ => {}
        }
        response
    }
}

/// The 404 of a mailing no letter was built for.
pub(crate) fn unknown_mailing(id: &str) -> ApiError {
    ApiError::NotFound(format!("mailing {id:?} not found"))
}

/// The mailing an API URL names, as a [`MailingId`]: an id that breaks
/// the rules was never stored, so it is answered as any unknown mailing.
pub(crate) fn named_mailing(id: String) -> Result<MailingId, ApiError> {
    MailingId::parse(&id).map_err(|_| unknown_mailing(&id))
}
