//! The error type of the tracking routes (`/c`, `/o`, `/u`, `/i`, health).
//! Every variant renders as a short human page with the right status;
//! nothing on a request path panics. The stats API and dashboard answer
//! JSON errors of their own (`stats::StatsError`).

use super::pages;
use crate::store::StoreError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// Seconds a client should wait before retrying while the database is away.
pub(crate) const RETRY_AFTER_SECS: u64 = 5;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Malformed or unknown token, or a token of the wrong kind for the route.
    #[error("not found")]
    NotFound,
    /// The token's day is past the retention window.
    #[error("link expired")]
    Gone,
    /// The database could not answer in time (the detail is for the log).
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The image upstream failed or was refused.
    #[error("image unavailable: {0}")]
    BadGateway(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for ServerError {
    fn from(err: StoreError) -> Self {
        if err.is_unavailable() {
            ServerError::Unavailable(err.to_string())
        } else {
            ServerError::Internal(err.to_string())
        }
    }
}

impl ServerError {
    /// The error of a lookup shared by concurrent requests (the cache hands
    /// each of them the same `Arc`).
    pub fn from_shared(err: std::sync::Arc<ServerError>) -> Self {
        match &*err {
            ServerError::NotFound => ServerError::NotFound,
            ServerError::Gone => ServerError::Gone,
            ServerError::Unavailable(detail) => ServerError::Unavailable(detail.clone()),
            ServerError::BadGateway(detail) => ServerError::BadGateway(detail.clone()),
            ServerError::Internal(detail) => ServerError::Internal(detail.clone()),
        }
    }
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let (status, title, text) = match &self {
            ServerError::NotFound => (
                StatusCode::NOT_FOUND,
                "Link not found",
                "This link is not valid. Please check that you copied it completely.",
            ),
            ServerError::Gone => (
                StatusCode::GONE,
                "Link expired",
                "This link has expired and no longer leads anywhere.",
            ),
            ServerError::Unavailable(err) => {
                // Per request, so quiet: the replayer and /readyz report the outage.
                tracing::debug!(%err, "database unavailable");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Temporarily unavailable",
                    "We cannot follow this link right now. Please try again in a moment.",
                )
            }
            ServerError::BadGateway(reason) => {
                tracing::info!(%reason, "image proxy failed");
                (
                    StatusCode::BAD_GATEWAY,
                    "Image unavailable",
                    "The image could not be loaded from its origin.",
                )
            }
            ServerError::Internal(err) => {
                tracing::error!(%err, "request failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    "Something went wrong on our side. Please try again later.",
                )
            }
        };
        let mut response = (status, pages::page(title, text)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        response
    }
}

/// Run one database call within `limit`; running out of time is the same
/// as the database being unavailable.
pub(crate) async fn within<T>(
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, ServerError> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result.map_err(ServerError::from),
        Err(_) => Err(ServerError::Unavailable(format!(
            "no answer within {limit:?}"
        ))),
    }
}
