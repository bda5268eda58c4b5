//! `GET /api/mailings/{id}/stats` and `GET /api/mailings/{id}/segment`.
//!
//! The stats come from the rollup tables (a handful of primary-key range
//! reads) plus the letters-built count, and a `live` section from Redis when
//! the live layer is configured and answering. The number of suppressed
//! recipients is not known per mailing (the builder reports it but does not
//! store it), so it is not part of the answer. `bounces` counts the
//! letters that bounced or were complained about (`bounces ingest`) and
//! their rates of the letters delivered.

use super::error::{named_mailing, StatsError};
use super::state::StatsState;
use crate::live::{LiveSnapshot, SegmentQuery};
use crate::store::stats::{self, Classes, MailingSummary};
use axum::extract::{Path, Query, State};
use axum::Json;

/// The JSON answer of the stats endpoint.
#[derive(Debug, serde::Serialize)]
pub(crate) struct StatsResponse {
    #[serde(flatten)]
    pub summary: MailingSummary,
    /// Opens and clicks by class: real opens apart from machine and scanner
    /// opens, clicks without bots and the bots' share (issue 24).
    pub classes: Classes,
    /// Counters from Redis; `null` when the live layer is off or down.
    pub live: Option<LiveSnapshot>,
    pub redis_up: Option<bool>,
}

/// `GET /api/mailings/{id}/stats`.
pub(crate) async fn stats(
    State(state): State<StatsState>,
    Path(id): Path<String>,
) -> Result<Json<StatsResponse>, StatsError> {
    let id = named_mailing(id)?;
    let summary = stats::summary(&state.pool, &id)
        .await?
        .ok_or_else(|| StatsError::UnknownMailing(id.to_string()))?;
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
#[derive(Debug, Default, serde::Deserialize)]
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
    pub(crate) fn query(&self) -> Result<SegmentQuery, StatsError> {
        let mut all = tags(&self.tag);
        all.extend(tags(&self.and));
        let query = SegmentQuery {
            all,
            any: tags(&self.or),
            none: tags(&self.not),
        };
        if query.all.is_empty() && query.any.is_empty() {
            return Err(StatsError::BadRequest(
                "name at least one tag: ?tag=T (and optionally and=, or=, not=)".into(),
            ));
        }
        Ok(query)
    }
}

/// The addresses a segment selects.
#[derive(Debug, serde::Serialize)]
pub(crate) struct SegmentResponse {
    pub mailing_id: String,
    pub count: usize,
    pub addresses: Vec<String>,
}

/// `GET /api/mailings/{id}/segment?tag=…&and=…&or=…&not=…`.
pub(crate) async fn segment(
    State(state): State<StatsState>,
    Path(id): Path<String>,
    Query(params): Query<SegmentParams>,
) -> Result<Json<SegmentResponse>, StatsError> {
    let query = params.query()?;
    let id = named_mailing(id)?;
    if !crate::store::stats::named_exactly(&state.pool, &id).await? {
        return Err(StatsError::UnknownMailing(id.into_string()));
    }
    let live = state
        .live
        .as_ref()
        .ok_or_else(|| StatsError::LiveUnavailable("REDIS_URL is not set".into()))?;
    let letters = live
        .segment(id.as_str(), &query)
        .await
        .map_err(|e| StatsError::LiveUnavailable(e.to_string()))?;
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
pub(crate) async fn breakdowns(
    State(state): State<StatsState>,
    Path(id): Path<String>,
) -> Result<Json<BreakdownsResponse>, StatsError> {
    let id = named_mailing(id)?;
    if !crate::store::engagement::mailing_known(&state.pool, &id).await? {
        return Err(StatsError::UnknownMailing(id.into_string()));
    }
    let breakdowns = crate::store::breakdowns::read(&state.pool, Some(id.as_str())).await?;
    Ok(Json(BreakdownsResponse {
        mailing_id: Some(id.into_string()),
        breakdowns,
    }))
}

/// `GET /api/breakdowns`: the same over every mailing.
pub(crate) async fn breakdowns_overall(
    State(state): State<StatsState>,
) -> Result<Json<BreakdownsResponse>, StatsError> {
    let breakdowns = crate::store::breakdowns::read(&state.pool, None).await?;
    Ok(Json(BreakdownsResponse {
        mailing_id: None,
        breakdowns,
    }))
}
