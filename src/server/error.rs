//! The error type of the tracking routes (`/c`, `/o`, `/u`, `/i`, health).
//! Every variant renders as a short human page with the right status;
//! nothing on a request path panics. The stats API and dashboard answer
//! JSON errors of their own (`stats::StatsError`).

use super::image::ProxyError;
use super::pages;
use crate::error_report::chain;
use crate::store::StoreError;
use axum::http::header::InvalidHeaderValue;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
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
    /// A database call failed. It keeps the store's error whole (behind an
    /// `Arc`, because one failed lookup answers every request that shared
    /// it): 503 when the database could not be reached, 500 otherwise, and
    /// the log says which ([`StoreError::kind`]).
    #[error("database call failed: {0}")]
    Store(#[source] Arc<StoreError>),
    /// No answer in time, or the lookups have stopped: there is no error of
    /// the database's to keep, only what was waited for.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The image upstream failed or was refused (shared: one fetch answers
    /// every request that waited for it).
    #[error("image unavailable: {0}")]
    BadGateway(#[source] Arc<ProxyError>),
    /// A stored link's URL cannot be sent as a `Location` header.
    #[error("stored URL is no header value")]
    StoredUrl(#[source] Arc<InvalidHeaderValue>),
}

impl From<StoreError> for ServerError {
    fn from(err: StoreError) -> Self {
        ServerError::Store(Arc::new(err))
    }
}

impl ServerError {
    /// The error of a lookup shared by concurrent requests (the cache hands
    /// each of them the same `Arc`).
    pub fn from_shared(err: Arc<ServerError>) -> Self {
        match &*err {
            ServerError::NotFound => ServerError::NotFound,
            ServerError::Gone => ServerError::Gone,
            ServerError::Store(store) => ServerError::Store(Arc::clone(store)),
            ServerError::Unavailable(detail) => ServerError::Unavailable(detail.clone()),
            ServerError::BadGateway(proxy) => ServerError::BadGateway(Arc::clone(proxy)),
            ServerError::StoredUrl(invalid) => ServerError::StoredUrl(Arc::clone(invalid)),
        }
    }

    /// True when the database could not be reached or did not answer in
    /// time: the request may succeed later (503 with `Retry-After`).
    pub fn is_unavailable(&self) -> bool {
        match self {
            ServerError::Unavailable(_) => true,
            ServerError::Store(store) => store.is_unavailable(),
            _ => false,
        }
    }
}

/// The page of a request the database could not answer (503).
const UNAVAILABLE: (StatusCode, &str, &str) = (
    StatusCode::SERVICE_UNAVAILABLE,
    "Temporarily unavailable",
    "We cannot follow this link right now. Please try again in a moment.",
);

/// The page of a request that failed on our side (500).
const INTERNAL: (StatusCode, &str, &str) = (
    StatusCode::INTERNAL_SERVER_ERROR,
    "Something went wrong",
    "Something went wrong on our side. Please try again later.",
);

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
            ServerError::Store(store) if store.is_unavailable() => {
                // Per request, so quiet: the replayer and /readyz report the outage.
                tracing::debug!(
                    kind = store.kind(),
                    mysql_error = store.mysql_error(),
                    error = %store,
                    "database unavailable"
                );
                UNAVAILABLE
            }
            ServerError::Unavailable(detail) => {
                tracing::debug!(%detail, "database unavailable");
                UNAVAILABLE
            }
            ServerError::BadGateway(proxy) => {
                tracing::info!(error = %chain(&**proxy), "image proxy failed");
                (
                    StatusCode::BAD_GATEWAY,
                    "Image unavailable",
                    "The image could not be loaded from its origin.",
                )
            }
            ServerError::Store(store) => {
                tracing::error!(
                    kind = store.kind(),
                    mysql_error = store.mysql_error(),
                    error = %store,
                    "request failed"
                );
                INTERNAL
            }
            ServerError::StoredUrl(invalid) => {
                tracing::error!(kind = "stored_url", error = %invalid, "request failed");
                INTERNAL
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_store_error_is_kept_and_mapped_by_what_it_is() {
        let away: ServerError = StoreError::Sqlx(sqlx::Error::PoolTimedOut).into();
        assert!(away.is_unavailable());
        let source = away.source().map(ToString::to_string).unwrap_or_default();
        assert!(source.contains("pool timed out"), "{source}");
        assert!(away.to_string().contains("pool timed out"), "{away}");
        let answer = away.into_response();
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.headers()[header::RETRY_AFTER], "5");

        let wrong: ServerError = StoreError::Corrupt {
            table: "links",
            detail: "a URL that is no URL".into(),
        }
        .into();
        assert!(!wrong.is_unavailable());
        assert_eq!(
            wrong.into_response().status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn a_shared_failure_answers_every_request_that_shared_it_alike() {
        let shared = Arc::new(ServerError::from(StoreError::Sqlx(sqlx::Error::PoolClosed)));
        let (first, second) = (
            ServerError::from_shared(Arc::clone(&shared)),
            ServerError::from_shared(shared),
        );
        assert_eq!(first.to_string(), second.to_string());
        assert!(first.is_unavailable() && second.is_unavailable());
    }
}
