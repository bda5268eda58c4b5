//! A sent mailing's links: `GET /api/mailings/{id}/links` (each click
//! position's name, current target and repoints; scope `stats:read`) and
//! `PATCH /api/mailings/{id}/links/{position or name}` (repoint it; scope
//! `links:write`), recorded under the caller's key name.

use super::caller::ApiCaller;
use super::error::{ApiError, ErrorBody};
use super::json_body::JsonBody;
use super::schema::{field, open_object};
use crate::api_keys::Scope;
use crate::mailing_id::MailingId;
use crate::server::stats::StatsState;
use crate::store::link_rules::Repoint;
use crate::store::repoint::{self, LinkSelector, ListedLink, RepointError, RepointRequest};
use axum::extract::{Path, State};
use axum::Json;

/// The answer of `GET /api/mailings/{id}/links`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct LinksResponse {
    pub mailing_id: String,
    pub links: Vec<ListedLink>,
}

/// `GET /api/mailings/{id}/links`.
#[utoipa::path(
    get,
    path = "/api/mailings/{id}/links",
    operation_id = "list_links",
    tag = "links",
    params(("id" = String, Path, description = "The mailing's id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Each click position's name, current target and repoints (scope stats:read)", body = LinksResponse),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 404, description = "No such mailing", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn list(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Path(id): Path<String>,
) -> Result<Json<LinksResponse>, ApiError> {
    caller.require(Scope::StatsRead)?;
    let id = mailing(id)?;
    let links = repoint::list(&state.pool, &id)
        .await
        .map_err(repoint_error)?;
    Ok(Json(LinksResponse {
        mailing_id: id.into_string(),
        links,
    }))
}

/// The body of a PATCH: the new target, and optionally one recipient.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RepointBody {
    /// The new target: an absolute http(s) URL.
    pub to: String,
    /// Repoint only this recipient's letter.
    #[serde(default)]
    pub recipient: Option<String>,
}

/// The answer of a PATCH: the repoints recorded.
#[derive(Debug, serde::Serialize)]
pub(crate) struct RepointResponse {
    pub mailing_id: String,
    pub repointed: Vec<Repoint>,
}

/// `PATCH /api/mailings/{id}/links/{link}` with
/// `{"to": URL, "recipient"?: ADDRESS}`.
#[utoipa::path(
    patch,
    path = "/api/mailings/{id}/links/{link}",
    operation_id = "repoint_link",
    tag = "links",
    params(
        ("id" = String, Path, description = "The mailing's id"),
        ("link" = String, Path, description = "The link's position (the first is 1) or its name"),
    ),
    request_body = RepointBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The repoints recorded (scope links:write)", body = RepointResponse),
        (status = 400, description = "The body is not the JSON expected", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 404, description = "No such mailing, position, name or recipient", body = ErrorBody),
        (status = 422, description = "The target is not an http(s) URL", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn repoint_link(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Path((id, link)): Path<(String, String)>,
    JsonBody(body): JsonBody<RepointBody>,
) -> Result<Json<RepointResponse>, ApiError> {
    caller.require(Scope::LinksWrite)?;
    let id = mailing(id)?;
    let request = RepointRequest {
        links: LinkSelector::from_segment(&link),
        recipient: body.recipient,
        to: body.to,
        who: caller.caller.name.clone(),
    };
    let repointed = repoint::repoint(&state.pool, &id, &request)
        .await
        .map_err(repoint_error)?;
    Ok(Json(RepointResponse {
        mailing_id: id.into_string(),
        repointed,
    }))
}

/// The mailing a URL names: an id that breaks the rules was never stored.
fn mailing(id: String) -> Result<MailingId, ApiError> {
    MailingId::parse(&id).map_err(|_| repoint_error(RepointError::UnknownMailing(id)))
}

/// A refused repoint in the API's one error shape, with its own code.
fn repoint_error(err: RepointError) -> ApiError {
    match err {
        RepointError::Store(store) => ApiError::Store(store),
        RepointError::TargetRefused { .. } | RepointError::FieldsRefused { .. } => {
            ApiError::Unprocessable {
                code: err.code(),
                message: err.to_string(),
            }
        }
        other => ApiError::Coded {
            code: other.code(),
            message: other.to_string(),
        },
    }
}

impl utoipa::PartialSchema for LinksResponse {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::Type::{Array, String};
        open_object(
            "A mailing's click positions: name, utm, built, current, version, history",
            &[field("mailing_id", String), field("links", Array)],
        )
    }
}

impl utoipa::ToSchema for LinksResponse {}

impl utoipa::PartialSchema for RepointResponse {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::Type::{Array, String};
        open_object(
            "The repoints recorded: position, letter_id, version, from, to, who, at",
            &[field("mailing_id", String), field("repointed", Array)],
        )
    }
}

impl utoipa::ToSchema for RepointResponse {}
