//! `GET /api/mailings` (scope `stats:read`): the mailings in id order, a
//! page at a time after a cursor, each with its subject, build time, UTM
//! campaign and counts; `?utm_campaign=` keeps those of one campaign.

use super::address_lists::page_limit;
use super::caller::ApiCaller;
use super::error::{ApiError, ErrorBody};
use crate::api_keys::Scope;
use crate::server::stats::StatsState;
use crate::store::stats::{mailings_page, MailingPageRow};
use axum::extract::{Query, State};
use axum::Json;

/// The query: a page after a cursor, and a campaign to keep.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct MailingsParams {
    /// The `next` of the page before (a mailing id); absent: the first page.
    #[serde(default)]
    pub after: Option<String>,
    /// Mailings per page, 1 to 1000 (100 when absent).
    #[serde(default)]
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
    /// Only mailings whose `utm.campaign` (its `{{ mailing_id }}` filled
    /// in) is this.
    #[serde(default)]
    pub utm_campaign: Option<String>,
}

/// One mailing of the list.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct ListedMailing {
    pub mailing_id: String,
    pub subject: Option<String>,
    /// When its first letters were built (RFC 3339, UTC).
    pub built_at: Option<String>,
    pub utm_campaign: Option<String>,
    /// Letters the MTAs accepted.
    pub delivered: u64,
    /// People's opens and clicks (bots left out), as rolled up.
    pub opens: u64,
    pub clicks: u64,
}

impl From<MailingPageRow> for ListedMailing {
    fn from(row: MailingPageRow) -> ListedMailing {
        ListedMailing {
            mailing_id: row.mailing_id,
            subject: row.subject,
            built_at: row.built_at,
            utm_campaign: row.utm_campaign,
            delivered: row.delivered,
            opens: row.opens,
            clicks: row.clicks,
        }
    }
}

/// A page of mailings, by id.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct MailingsPage {
    pub mailings: Vec<ListedMailing>,
    /// Pass as `after` for the next page; `null` on the last one.
    pub next: Option<String>,
}

/// `GET /api/mailings?after=&limit=&utm_campaign=`.
#[utoipa::path(
    get,
    path = "/api/mailings",
    operation_id = "list_mailings",
    tag = "stats",
    params(MailingsParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of mailings with their counts (scope stats:read)", body = MailingsPage),
        (status = 400, description = "A bad limit", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn list(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Query(params): Query<MailingsParams>,
) -> Result<Json<MailingsPage>, ApiError> {
    caller.require(Scope::StatsRead)?;
    let limit = page_limit(params.limit.as_deref())?;
    let after = params.after.unwrap_or_default();
    let campaign = params.utm_campaign.as_deref().filter(|c| !c.is_empty());
    let rows = mailings_page(&state.pool, &after, limit, campaign).await?;
    let next = (rows.len() == limit as usize)
        .then(|| rows.last().map(|row| row.mailing_id.clone()))
        .flatten();
    Ok(Json(MailingsPage {
        mailings: rows.into_iter().map(ListedMailing::from).collect(),
        next,
    }))
}
