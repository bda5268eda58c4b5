//! Universal links through a tracking domain (docs/domains.md, "App
//! links"): `/.well-known/apple-app-site-association` and
//! `/.well-known/assetlinks.json` served from the operator's files, per
//! host (`{dir}/{host}/{file}`, else `{dir}/{file}`), as JSON and never a
//! redirect (iOS and Android refuse redirected ones), so an app link
//! clicked in a letter still opens the app.

use super::error::ServerError;
use super::hosts::host_without_port;
use super::state::AppState;
use crate::store::tls_certificates;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use std::path::PathBuf;

pub(crate) async fn apple_app_site_association(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Response {
    operator_file(&state, &headers, "apple-app-site-association").await
}

pub(crate) async fn assetlinks(State(state): State<AppState>, headers: HeaderMap) -> Response {
    operator_file(&state, &headers, "assetlinks.json").await
}

/// The host's own file, else the shared one; a file that is not JSON is
/// not served (and said in the log).
async fn operator_file(state: &AppState, headers: &HeaderMap, name: &str) -> Response {
    let Some(dir) = &state.settings.well_known_dir else {
        return ServerError::NotFound.into_response();
    };
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .map(host_without_port)
        .and_then(|host| crate::domains::host_name(host).ok());
    let candidates: Vec<PathBuf> = host
        .map(|host| dir.join(host).join(name))
        .into_iter()
        .chain([dir.join(name)])
        .collect();
    for path in candidates {
        match tokio::fs::read(&path).await {
            Ok(bytes) if serde_json::from_slice::<serde_json::Value>(&bytes).is_ok() => {
                return (
                    [
                        (
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/json"),
                        ),
                        (
                            header::CACHE_CONTROL,
                            HeaderValue::from_static("max-age=3600"),
                        ),
                    ],
                    bytes,
                )
                    .into_response();
            }
            Ok(_) => {
                tracing::warn!(file = %path.display(), "not JSON: not served");
                return ServerError::NotFound.into_response();
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(file = %path.display(), %err, "cannot read");
                return ServerError::NotFound.into_response();
            }
        }
    }
    ServerError::NotFound.into_response()
}

/// An HTTP-01 challenge of the ACME CA (docs/domains.md, "Certificates"):
/// the answer stored by whichever server placed the order, for the host
/// asked about; as plain text, never a redirect.
pub(crate) async fn acme_challenge(
    State(state): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ServerError> {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .map(host_without_port)
        .and_then(|host| crate::domains::host_name(host).ok())
        .ok_or(ServerError::NotFound)?;
    let answer = tls_certificates::challenge(&state.pool, &token, &host)
        .await?
        .ok_or(ServerError::NotFound)?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        )],
        answer,
    )
        .into_response())
}
