//! `GET /api/mailings/{id}/stats` and `GET /api/mailings/{id}/segment`.
//!
//! The stats come from the rollup tables (a handful of primary-key range
//! reads) plus the letters-built count, and a `live` section from Redis when
//! the live layer is configured and answering. The number of suppressed
//! recipients is not known per mailing (the builder reports it but does not
//! store it), so it is not part of the answer. `bounces` counts the
//! letters that bounced or were complained about (`bounces ingest`) and
//! their rates of the letters delivered.

use super::caller::ApiCaller;
use super::error::{named_mailing, unknown_mailing, ApiError, ErrorBody};
use super::schema::{field, nullable, open_object};
use crate::api_keys::Scope;
use crate::live::{LiveSnapshot, SegmentQuery};
use crate::server::stats::StatsState;
use crate::store::stats::{self, Classes, MailingSummary};
use axum::extract::{Path, Query, State};
use axum::Json;

/// The JSON answer of the stats endpoint.
#[derive(Debug, serde::Serialize)]
pub(crate) struct StatsResponse {
    #[serde(flatten)]
    pub summary: MailingSummary,
    /// Opens and clicks by class: real opens apart from machine and scanner
    /// opens, clicks without bots and the bots' share.
    pub classes: Classes,
    /// Counters from Redis; `null` when the live layer is off or down.
    pub live: Option<LiveSnapshot>,
    pub redis_up: Option<bool>,
}

/// `GET /api/mailings/{id}/stats`.
#[utoipa::path(
    get,
    path = "/api/mailings/{id}/stats",
    tag = "stats",
    params(("id" = String, Path, description = "The mailing's id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The mailing's figures (scope stats:read)", body = StatsResponse),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 404, description = "No such mailing", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn stats(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Path(id): Path<String>,
) -> Result<Json<StatsResponse>, ApiError> {
    caller.require(Scope::StatsRead)?;
    let id = named_mailing(id)?;
    let summary = stats::summary(&state.pool, &id)
        .await?
        .ok_or_else(|| unknown_mailing(id.as_str()))?;
    let live = match &state.live {
        Some(live) => match live.snapshot(id.as_str()).await {
            Ok(snapshot) => Some(snapshot),
            Err(err) => {
                tracing::warn!(%err, "live stats unavailable; answering without them");
                None
            }
        },
        None => None,
    };
    Ok(Json(StatsResponse {
        classes: summary.classes(),
        summary,
        live,
        redis_up: state.live.as_ref().map(|l| l.is_up()),
    }))
}

/// Query of the segment endpoint: each parameter holds one tag or several
/// separated by commas: `?tag=ruby&and=web&not=erlang`.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct SegmentParams {
    #[serde(default)]
    pub tag: String,
    #[serde(default)]
    pub and: String,
    #[serde(default)]
    pub or: String,
    #[serde(default)]
    pub not: String,
}

fn tags(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

impl SegmentParams {
    /// `tag` and `and` must all match, `or` may match instead, `not` must not.
    pub(crate) fn query(&self) -> Result<SegmentQuery, ApiError> {
        let mut all = tags(&self.tag);
        all.extend(tags(&self.and));
        let query = SegmentQuery {
            all,
            any: tags(&self.or),
            none: tags(&self.not),
        };
        if query.all.is_empty() && query.any.is_empty() {
            return Err(ApiError::BadRequest(
                "name at least one tag: ?tag=T (and optionally and=, or=, not=)".into(),
            ));
        }
        Ok(query)
    }
}

/// The addresses a segment selects.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct SegmentResponse {
    pub mailing_id: String,
    pub count: usize,
    pub addresses: Vec<String>,
}

/// `GET /api/mailings/{id}/segment?tag=…&and=…&or=…&not=…`.
#[utoipa::path(
    get,
    path = "/api/mailings/{id}/segment",
    tag = "stats",
    params(("id" = String, Path, description = "The mailing's id"), SegmentParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The addresses that clicked links with the tags (scope export:read)", body = SegmentResponse),
        (status = 400, description = "No tag named", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 404, description = "No such mailing", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The live layer (Redis) is off or down", body = ErrorBody),
    )
)]
pub(crate) async fn segment(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Path(id): Path<String>,
    Query(params): Query<SegmentParams>,
) -> Result<Json<SegmentResponse>, ApiError> {
    caller.require(Scope::ExportRead)?;
    let query = params.query()?;
    let id = named_mailing(id)?;
    if !crate::store::stats::named_exactly(&state.pool, &id).await? {
        return Err(unknown_mailing(id.as_str()));
    }
    let live = state
        .live
        .as_ref()
        .ok_or_else(|| ApiError::Unavailable("REDIS_URL is not set".into()))?;
    let letters = live
        .segment(id.as_str(), &query)
        .await
        .map_err(|source| ApiError::Failed {
            what: "live figures (Redis)",
            source: source.into(),
        })?;
    let addresses =
        crate::store::segments::addresses_of_letters(&state.pool, &id, &letters).await?;
    Ok(Json(SegmentResponse {
        mailing_id: id.into_string(),
        count: addresses.len(),
        addresses,
    }))
}

/// The answer of the breakdown endpoints.
#[derive(Debug, serde::Serialize)]
pub(crate) struct BreakdownsResponse {
    /// `null` for every mailing together.
    pub mailing_id: Option<String>,
    #[serde(flatten)]
    pub breakdowns: crate::store::breakdowns::Breakdowns,
}

/// `GET /api/mailings/{id}/breakdowns`: opens and clicks by mail client,
/// client type, OS, device and mailbox provider (humans' `n`, `bots` beside).
#[utoipa::path(
    get,
    path = "/api/mailings/{id}/breakdowns",
    tag = "stats",
    params(("id" = String, Path, description = "The mailing's id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Opens and clicks by client, OS, device, provider, country (scope stats:read)", body = BreakdownsResponse),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 404, description = "No such mailing", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn breakdowns(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Path(id): Path<String>,
) -> Result<Json<BreakdownsResponse>, ApiError> {
    caller.require(Scope::StatsRead)?;
    let id = named_mailing(id)?;
    if !crate::store::engagement::mailing_known(&state.pool, &id).await? {
        return Err(unknown_mailing(id.as_str()));
    }
    let breakdowns = crate::store::breakdowns::read(&state.pool, Some(id.as_str())).await?;
    Ok(Json(BreakdownsResponse {
        mailing_id: Some(id.into_string()),
        breakdowns,
    }))
}

/// `GET /api/breakdowns`: the same over every mailing.
#[utoipa::path(
    get,
    path = "/api/breakdowns",
    tag = "stats",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The breakdowns of every mailing together (scope stats:read)", body = BreakdownsResponse),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn breakdowns_overall(
    caller: ApiCaller,
    State(state): State<StatsState>,
) -> Result<Json<BreakdownsResponse>, ApiError> {
    caller.require(Scope::StatsRead)?;
    let breakdowns = crate::store::breakdowns::read(&state.pool, None).await?;
    Ok(Json(BreakdownsResponse {
        mailing_id: None,
        breakdowns,
    }))
}

impl utoipa::PartialSchema for StatsResponse {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::Type::{Array, Boolean, Integer, Object, String};
        open_object(
            "A mailing's figures: fields as in docs/operate.md, \"Statistics and the dashboard\"",
            &[
                field("mailing_id", String),
                nullable("subject", String),
                field("letters_built", Integer),
                field("opens", Object),
                field("clicks", Object),
                field("images", Object),
                field("unsubscribes", Object),
                field("late", Object),
                field("bot_reasons", Object),
                field("links", Array),
                field("hours", Array),
                field("minutes", Array),
                field("tracking", Object),
                field("bounces", Object),
                field("classes", Object),
                nullable("live", Object),
                nullable("redis_up", Boolean),
            ],
        )
    }
}

impl utoipa::ToSchema for StatsResponse {}

impl utoipa::PartialSchema for BreakdownsResponse {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::Type::{Object, String};
        open_object(
            "Opens and clicks per dimension, each value with humans' `n` and `bots`",
            &[
                nullable("mailing_id", String),
                field("opens", Object),
                field("clicks", Object),
            ],
        )
    }
}

impl utoipa::ToSchema for BreakdownsResponse {}
