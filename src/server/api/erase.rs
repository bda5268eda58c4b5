//! `POST /api/erase` (scope `erase`): what `linktrack erase` does, for
//! each address of the body (docs/privacy.md): every server told, every
//! table scrubbed, the Redis live layer too when this server has one (else
//! the letters wait for an erase that has it). The answer names each
//! address by its place in the body, never by the address.

use super::caller::ApiCaller;
use super::error::{ApiError, ErrorBody};
use super::json_body::JsonBody;
use crate::api_keys::Scope;
use crate::privacy::erase::EraseError;
use crate::privacy::LiveOutcome;
use crate::server::stats::StatsState;
use axum::extract::State;
use axum::Json;
use std::time::Duration;

/// Addresses one call may erase.
const MAX_ADDRESSES: usize = 100;
/// How long a call waits for the servers to take each erasure in, unless
/// it says, and the longest it may say.
const DEFAULT_WAIT_SECS: u64 = 5;
const MAX_WAIT_SECS: u64 = 30;

/// The addresses to erase.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EraseBody {
    /// 1 to 100 addresses.
    #[schema(min_items = 1, max_items = 100)]
    pub addresses: Vec<String>,
    /// Seconds to wait for every server to take each erasure in (0 to 30,
    /// 5 when absent); servers that did not are named in the answer.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 30)]
    pub wait_secs: Option<u64>,
}

/// What the erase did for one address.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct Erased {
    /// `addresses[N]` (from 0).
    pub at: String,
    /// The address was erased before.
    pub repeated: bool,
    pub letters: u64,
    pub links: u64,
    pub events: u64,
    /// Servers that took the erasure in before the tables were scrubbed.
    pub confirmed_servers: Vec<String>,
    /// Servers seen in the last minute that did not within the wait.
    pub unconfirmed_servers: Vec<String>,
    /// Letters (this address's and earlier ones') waiting for an erase
    /// with the live layer; 0 when Redis was scrubbed too.
    pub redis_pending: usize,
}

/// The answer: one entry per address, in the body's order.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct EraseAnswer {
    pub erased: Vec<Erased>,
}

/// `POST /api/erase` with `{"addresses": [...], "wait_secs"?: N}`.
#[utoipa::path(
    post,
    path = "/api/erase",
    operation_id = "erase",
    tag = "privacy",
    request_body = EraseBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Each address erased everywhere (scope erase)", body = EraseAnswer),
        (status = 400, description = "A body that is not the JSON expected", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 422, description = "No address, too many, one that is not an address, or a wait over 30 s", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database or Redis is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn erase(
    caller: ApiCaller,
    State(state): State<StatsState>,
    JsonBody(body): JsonBody<EraseBody>,
) -> Result<Json<EraseAnswer>, ApiError> {
    caller.require(Scope::Erase)?;
    check(&body)?;
    let wait = Duration::from_secs(body.wait_secs.unwrap_or(DEFAULT_WAIT_SECS));
    let mut erased = Vec::with_capacity(body.addresses.len());
    for (n, address) in body.addresses.iter().enumerate() {
        let report = crate::privacy::erase(&state.pool, state.live.as_ref(), address, wait)
            .await
            .map_err(|err| match err {
                EraseError::Store(err) => ApiError::Store(err),
                redis @ EraseError::Redis(_) => ApiError::Failed {
                    what: "erasing",
                    source: redis.into(),
                },
            })?;
        erased.push(Erased {
            at: format!("addresses[{n}]"),
            repeated: report.repeated,
            letters: report.tables.letters,
            links: report.tables.links,
            events: report.tables.events,
            confirmed_servers: report.confirmed,
            unconfirmed_servers: report.unconfirmed,
            redis_pending: match report.redis {
                LiveOutcome::Forgotten { .. } => 0,
                LiveOutcome::Pending { pending } => pending,
            },
        });
    }
    Ok(Json(EraseAnswer { erased }))
}

/// 422 naming what is wrong: no address, too many, one that is not an
/// address, a wait over the limit.
fn check(body: &EraseBody) -> Result<(), ApiError> {
    let refuse = |message: String| ApiError::Unprocessable {
        code: "bad_request",
        message,
    };
    if body.addresses.is_empty() || body.addresses.len() > MAX_ADDRESSES {
        return Err(refuse(format!(
            "addresses: 1 to {MAX_ADDRESSES} addresses, not {}",
            body.addresses.len()
        )));
    }
    for (n, address) in body.addresses.iter().enumerate() {
        if crate::address::Email::parse(address).is_err() {
            return Err(refuse(format!("addresses[{n}]: not an email address")));
        }
    }
    if body.wait_secs.is_some_and(|secs| secs > MAX_WAIT_SECS) {
        return Err(refuse(format!("wait_secs: at most {MAX_WAIT_SECS}")));
    }
    Ok(())
}
