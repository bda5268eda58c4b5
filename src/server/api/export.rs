//! `GET /api/mailings/{id}/recipients?format=csv|jsonl`: the recipients
//! export ([`crate::export`]) streamed as the answer's body, a page of
//! letters at a time, so a million-letter mailing costs the server one
//! page of memory. A database failure mid-stream ends the connection
//! without the body's end (chunked encoding), so a client never takes a cut
//! export for a whole one.

use super::caller::ApiCaller;
use super::error::{named_mailing, unknown_mailing, ApiError, ErrorBody};
use crate::api_keys::Scope;
use crate::export::{self, Format};
use crate::server::stats::StatsState;
use crate::store::engagement;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures_util::TryStreamExt;

/// The query: `format` is `csv` (the default) or `jsonl`.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ExportParams {
    /// `csv` (the default) or `jsonl`.
    #[serde(default)]
    #[param(pattern = "^(csv|jsonl)$")]
    pub format: Option<String>,
}

/// `GET /api/mailings/{id}/recipients`.
#[utoipa::path(
    get,
    path = "/api/mailings/{id}/recipients",
    tag = "stats",
    params(("id" = String, Path, description = "The mailing's id"), ExportParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "One row per letter with its engagement (scope export:read)",
         content((String = "text/csv"), (String = "application/x-ndjson"))),
        (status = 400, description = "An unknown format", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 404, description = "No such mailing", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn recipients(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Path(id): Path<String>,
    Query(params): Query<ExportParams>,
) -> Result<Response, ApiError> {
    caller.require(Scope::ExportRead)?;
    let format: Format = params
        .format
        .as_deref()
        .unwrap_or("csv")
        .parse()
        .map_err(|err: export::UnknownFormat| ApiError::BadValue(err.into()))?;
    let id = named_mailing(id)?;
    if !engagement::mailing_known(&state.pool, &id).await? {
        return Err(unknown_mailing(id.as_str()));
    }
    let disposition = format!(
        "attachment; filename=\"{}-recipients.{}\"",
        file_name_part(id.as_str()),
        format.extension()
    );
    let mailing = id.clone();
    let chunks = export::recipients(state.pool.clone(), id, format)
        .map_ok(|chunk| chunk.bytes)
        .inspect_err(move |err| {
            tracing::error!(%err, mailing = %mailing, "recipients export failed mid-stream");
        });
    let mut response = Body::from_stream(chunks).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// A mailing id as part of a file name: letters, digits, `.`, `_` and `-`
/// kept, anything else `_` (no quote, slash or control character reaches
/// the header).
fn file_name_part(id: &str) -> String {
    id.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn file_names_keep_only_safe_characters() {
        assert_eq!(super::file_name_part("m-2026.11_a"), "m-2026.11_a");
        assert_eq!(super::file_name_part("a\"b/c\r\nd é"), "a_b_c__d__");
    }
}
