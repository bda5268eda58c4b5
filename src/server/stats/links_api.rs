//! `GET /api/mailings/{id}/links` (each click position's name, current
//! target and repoints) and `PATCH /api/mailings/{id}/links/{position or
//! name}` (repoint it), behind the stats API's access check, each route
//! through [`require_scope`] with the scope it will need. Errors are JSON
//! `{"error": {"code", "message"}}`.

use super::auth;
use super::credentials::bearer;
use super::state::StatsState;
use crate::mailing_id::MailingId;
use crate::store::link_rules::Repoint;
use crate::store::repoint::{self, LinkSelector, ListedLink, RepointError, RepointRequest};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

/// What a credential may do on these routes. Today every credential that
/// passes the stats API's check may do both; scoped keys will tell them
/// apart here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `stats:read`: read the links and their history.
    StatsRead,
    /// `links:write`: repoint a link.
    LinksWrite,
}

impl Scope {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scope::StatsRead => "stats:read",
            Scope::LinksWrite => "links:write",
        }
    }
}

/// The one access check of these routes: the stats API's bearer token or
/// session (`auth::require`), for `scope`.
async fn require_scope(state: StatsState, scope: Scope, request: Request, next: Next) -> Response {
    tracing::trace!(scope = scope.name(), "links API access");
    auth::require(State(state), request, next).await
}

/// The routes, each behind [`require_scope`] with its scope.
pub(crate) fn router(state: StatsState) -> Router<StatsState> {
    let read = state.clone();
    let write = state;
    Router::new()
        .route(
            "/api/mailings/{id}/links",
            get(list).route_layer(middleware::from_fn(move |request: Request, next: Next| {
                require_scope(read.clone(), Scope::StatsRead, request, next)
            })),
        )
        .route(
            "/api/mailings/{id}/links/{link}",
            axum::routing::patch(repoint_link).route_layer(middleware::from_fn(
                move |request: Request, next: Next| {
                    require_scope(write.clone(), Scope::LinksWrite, request, next)
                },
            )),
        )
}

/// The answer of `GET /api/mailings/{id}/links`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct LinksResponse {
    pub mailing_id: String,
    pub links: Vec<ListedLink>,
}

/// `GET /api/mailings/{id}/links`.
pub(crate) async fn list(
    State(state): State<StatsState>,
    Path(id): Path<String>,
) -> Result<Json<LinksResponse>, LinksError> {
    let id = mailing(id)?;
    let links = repoint::list(&state.pool, &id).await?;
    Ok(Json(LinksResponse {
        mailing_id: id.into_string(),
        links,
    }))
}

/// The body of a PATCH: the new target, and optionally one recipient.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RepointBody {
    pub to: String,
    #[serde(default)]
    pub recipient: Option<String>,
}

/// The answer of a PATCH: the repoints recorded.
#[derive(Debug, serde::Serialize)]
pub(crate) struct RepointResponse {
    pub mailing_id: String,
    pub repointed: Vec<Repoint>,
}

/// `PATCH /api/mailings/{id}/links/{position or name}` with
/// `{"to": URL, "recipient"?: ADDRESS}`.
pub(crate) async fn repoint_link(
    State(state): State<StatsState>,
    Path((id, link)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Json<RepointBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<RepointResponse>, LinksError> {
    let Json(body) = body.map_err(|rejection| LinksError::BadBody(rejection.body_text()))?;
    let id = mailing(id)?;
    let request = RepointRequest {
        links: LinkSelector::from_segment(&link),
        recipient: body.recipient,
        to: body.to,
        who: caller(&state, &headers).to_owned(),
    };
    let repointed = repoint::repoint(&state.pool, &id, &request).await?;
    Ok(Json(RepointResponse {
        mailing_id: id.into_string(),
        repointed,
    }))
}

/// Who a repoint through the API is recorded as: the credential's name.
fn caller(state: &StatsState, headers: &HeaderMap) -> &'static str {
    match bearer(headers) {
        Some(given) if state.auth.token_matches(given) => "api_token",
        _ => "dashboard_session",
    }
}

/// The mailing a URL names: an id that breaks the rules was never stored.
fn mailing(id: String) -> Result<MailingId, LinksError> {
    MailingId::parse(&id).map_err(|_| LinksError::Repoint(RepointError::UnknownMailing(id)))
}

/// A failed links request, answered as `{"error": {"code", "message"}}`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinksError {
    #[error(transparent)]
    Repoint(#[from] RepointError),
    #[error("the body must be JSON {{\"to\": URL, \"recipient\"?: ADDRESS}}: {0}")]
    BadBody(String),
}

impl LinksError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            LinksError::BadBody(_) => (StatusCode::BAD_REQUEST, "bad_body"),
            LinksError::Repoint(err) => {
                let status = match err {
                    RepointError::TargetRefused { .. } => StatusCode::UNPROCESSABLE_ENTITY,
                    RepointError::Store(store) if store.is_unavailable() => {
                        StatusCode::SERVICE_UNAVAILABLE
                    }
                    RepointError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
                    _ => StatusCode::NOT_FOUND,
                };
                (status, err.code())
            }
        }
    }
}

impl IntoResponse for LinksError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self, "links request failed");
            "internal error".to_owned()
        } else {
            self.to_string()
        };
        let body = serde_json::json!({ "error": { "code": code, "message": message } });
        (status, Json(body)).into_response()
    }
}
