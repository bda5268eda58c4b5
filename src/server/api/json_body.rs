//! [`JsonBody`]: a request's JSON body, read within the API's size limit,
//! whose refusals are the API's JSON errors (axum's `Json` answers text).

use super::error::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};

/// Largest JSON body the API reads.
pub(crate) const MAX_JSON_BYTES: usize = 1 << 20;

/// A JSON body of type `T`, of at most `LIMIT` bytes (a route that takes
/// more names its own limit, documented with it).
pub(crate) struct JsonBody<T, const LIMIT: usize = MAX_JSON_BYTES>(pub T);

impl<S, T, const LIMIT: usize> FromRequest<S> for JsonBody<T, LIMIT>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = axum::body::to_bytes(request.into_body(), LIMIT)
            .await
            .map_err(|source| ApiError::BodyUnreadable {
                limit: LIMIT,
                source,
            })?;
        let _ = state;
        read_json(&bytes).map(JsonBody)
    }
}

fn read_json<T: serde::de::DeserializeOwned>(bytes: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|source| ApiError::BadPart {
        what: "request body is not the JSON expected",
        source: source.into(),
    })
}
