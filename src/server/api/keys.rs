//! `POST /api/keys`, `GET /api/keys`, `DELETE /api/keys/{key}` (scope
//! `keys:admin`): the same as `linktrack keys create|list|revoke`.

use super::caller::ApiCaller;
use super::error::{ApiError, ErrorBody};
use super::json_body::JsonBody;
use super::state::ApiState;
use crate::api_keys::{self, CreateError, KeyRequest, Scope, Scopes};
use crate::store::api_keys::{self as stored, KeyRow};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::NaiveDateTime;

/// A new key's name, scopes and lifetime.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateKey {
    /// Unique, e.g. the integration's name.
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
    /// Scope names, e.g. `["stats:read", "export:read"]`.
    #[schema(min_items = 1)]
    pub scopes: Vec<String>,
    /// Days until the key expires; absent or null: never.
    #[schema(minimum = 1, maximum = 36500)]
    pub expires_days: Option<u32>,
}

/// A key as listed: never the key itself.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct KeyInfo {
    pub name: String,
    /// The public part: the key starts `lt_{prefix}_`.
    pub prefix: String,
    pub scopes: Vec<String>,
    /// UTC, `YYYY-MM-DDTHH:MM:SS`.
    pub created: NaiveDateTime,
    pub expires: Option<NaiveDateTime>,
    pub revoked: Option<NaiveDateTime>,
    pub last_used: Option<NaiveDateTime>,
}

/// A key just made: `key` is shown this once.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct CreatedKey {
    pub key: String,
    #[serde(flatten)]
    pub info: KeyInfo,
}

/// Every key.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct KeyList {
    pub keys: Vec<KeyInfo>,
}

impl From<KeyRow> for KeyInfo {
    fn from(row: KeyRow) -> KeyInfo {
        KeyInfo {
            scopes: row
                .scopes
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            name: row.name,
            prefix: row.prefix,
            created: row.created,
            expires: row.expires,
            revoked: row.revoked,
            last_used: row.last_used,
        }
    }
}

/// Makes a key; its text is in the answer only.
#[utoipa::path(
    post,
    path = "/api/keys",
    tag = "keys",
    request_body = CreateKey,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "The key, shown this once", body = CreatedKey),
        (status = 400, description = "A bad name, scope or expiry", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks keys:admin", body = ErrorBody),
        (status = 409, description = "A key has that name", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
    )
)]
pub(crate) async fn create(
    caller: ApiCaller,
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateKey>,
) -> Result<(StatusCode, Json<CreatedKey>), ApiError> {
    caller.require(Scope::KeysAdmin)?;
    let scopes: Scopes = body
        .scopes
        .iter()
        .map(|s| s.parse::<Scope>())
        .collect::<Result<_, _>>()
        .map_err(|source| ApiError::BadPart {
            what: "scopes",
            source: source.into(),
        })?;
    let request = KeyRequest {
        name: &body.name,
        scopes,
        expires_days: body.expires_days,
    };
    match api_keys::create(&state.stats.pool, state.key_secret.as_ref(), &request).await {
        Ok(created) => Ok((
            StatusCode::CREATED,
            Json(CreatedKey {
                key: created.key,
                info: created.row.into(),
            }),
        )),
        Err(CreateError::NameTaken(name)) => {
            Err(ApiError::Conflict(CreateError::NameTaken(name).to_string()))
        }
        Err(CreateError::Store(err)) => Err(ApiError::Store(err)),
        Err(err) if err.is_bad_request() => Err(ApiError::BadValue(err.into())),
        Err(err) => Err(ApiError::Failed {
            what: "creating the key",
            source: err.into(),
        }),
    }
}

/// Every key, oldest first.
#[utoipa::path(
    get,
    path = "/api/keys",
    tag = "keys",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every key (never the key itself)", body = KeyList),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks keys:admin", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
    )
)]
pub(crate) async fn list(
    caller: ApiCaller,
    State(state): State<ApiState>,
) -> Result<Json<KeyList>, ApiError> {
    caller.require(Scope::KeysAdmin)?;
    let keys = stored::list(&state.stats.pool).await?;
    Ok(Json(KeyList {
        keys: keys.into_iter().map(KeyInfo::from).collect(),
    }))
}

/// Revokes a key: every server refuses it within seconds.
#[utoipa::path(
    delete,
    path = "/api/keys/{key}",
    tag = "keys",
    params(("key" = String, Path, description = "The key's name or prefix")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The key, revoked", body = KeyInfo),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks keys:admin", body = ErrorBody),
        (status = 404, description = "No key has that name or prefix", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
    )
)]
pub(crate) async fn revoke(
    caller: ApiCaller,
    State(state): State<ApiState>,
    Path(key): Path<String>,
) -> Result<Json<KeyInfo>, ApiError> {
    caller.require(Scope::KeysAdmin)?;
    match stored::revoke(&state.stats.pool, key.trim()).await? {
        Some(row) => Ok(Json(row.into())),
        None => Err(ApiError::NotFound(format!(
            "no API key is named {key:?} or has that prefix"
        ))),
    }
}
