//! Tracking domains per sender (`tracking_domains`, docs/domains.md): a
//! host such as `click.brand.example` that stands for the letters of
//! `brand.example`, its verification state, and the hosts the server
//! answers on.

use super::error::StoreError;
use chrono::{NaiveDateTime, Utc};
use sqlx::MySqlPool;

/// Where a domain's verification stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainState {
    /// Added, not yet found pointing at this service.
    Pending,
    /// Its CNAME or address points at this service: letters use it.
    Verified,
    /// The last check found it pointing elsewhere (see its detail).
    Failed,
}

impl DomainState {
    pub fn as_str(self) -> &'static str {
        match self {
            DomainState::Pending => "pending",
            DomainState::Verified => "verified",
            DomainState::Failed => "failed",
        }
    }

    fn parse(text: &str) -> DomainState {
        match text {
            "verified" => DomainState::Verified,
            "failed" => DomainState::Failed,
            _ => DomainState::Pending,
        }
    }
}

/// One tracking domain as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackingDomain {
    pub host: String,
    pub sender_domain: String,
    pub state: DomainState,
    pub added: NaiveDateTime,
    pub checked: Option<NaiveDateTime>,
    /// What the last check found.
    pub detail: Option<String>,
}

/// Adds `host` for the letters of `sender_domain` (both lowercase), pending
/// verification; adding it again for another sender moves it (and it must
/// be verified again). Returns whether anything changed.
pub async fn add(pool: &MySqlPool, host: &str, sender_domain: &str) -> Result<bool, StoreError> {
    let now = Utc::now().naive_utc();
    let done = sqlx::query(
        "INSERT INTO tracking_domains (host, sender_domain, state, added) \
         VALUES (?, ?, 'pending', ?) \
         ON DUPLICATE KEY UPDATE \
           state = IF(sender_domain = VALUES(sender_domain), state, 'pending'), \
           sender_domain = VALUES(sender_domain)",
    )
    .bind(host)
    .bind(sender_domain)
    .bind(now)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Removes `host`; returns whether it was there.
pub async fn remove(pool: &MySqlPool, host: &str) -> Result<bool, StoreError> {
    let done = sqlx::query("DELETE FROM tracking_domains WHERE host = ?")
        .bind(host)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// A row as read: host, sender, state, added, checked, detail.
type DomainRow = (
    String,
    String,
    String,
    NaiveDateTime,
    Option<NaiveDateTime>,
    Option<String>,
);

/// Every tracking domain, by sender then host.
pub async fn list(pool: &MySqlPool) -> Result<Vec<TrackingDomain>, StoreError> {
    let rows: Vec<DomainRow> = sqlx::query_as(
        "SELECT host, sender_domain, CAST(state AS CHAR), added, checked, detail \
             FROM tracking_domains ORDER BY sender_domain, host",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(host, sender_domain, state, added, checked, detail)| TrackingDomain {
                host,
                sender_domain,
                state: DomainState::parse(&state),
                added,
                checked,
                detail,
            },
        )
        .collect())
}

/// Records a check's outcome.
pub async fn set_state(
    pool: &MySqlPool,
    host: &str,
    state: DomainState,
    detail: &str,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE tracking_domains SET state = ?, checked = ?, detail = ? WHERE host = ?")
        .bind(state.as_str())
        .bind(Utc::now().naive_utc())
        .bind(detail.chars().take(500).collect::<String>())
        .bind(host)
        .execute(pool)
        .await?;
    Ok(())
}

/// The verified tracking host of a sender's domain (the first by name when
/// it has several), or `None`.
pub async fn host_for_sender(
    pool: &MySqlPool,
    sender_domain: &str,
) -> Result<Option<String>, StoreError> {
    let host: Option<(String,)> = sqlx::query_as(
        "SELECT host FROM tracking_domains WHERE sender_domain = ? AND state = 'verified' \
         ORDER BY host LIMIT 1",
    )
    .bind(sender_domain)
    .fetch_optional(pool)
    .await?;
    Ok(host.map(|(host,)| host))
}

/// Every host added, whatever its state (a pending one must answer its
/// checks), with the sender it stands for: the hosts the server answers on
/// besides the base URL's.
pub async fn hosts(pool: &MySqlPool) -> Result<Vec<(String, String)>, StoreError> {
    let hosts: Vec<(String, String)> =
        sqlx::query_as("SELECT host, sender_domain FROM tracking_domains")
            .fetch_all(pool)
            .await?;
    Ok(hosts)
}
