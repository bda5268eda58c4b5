//! Token version 2's tables (docs/token.md): `token_format`, the one row
//! the seal key and the legacy cut-off come from, and `link_templates`,
//! what a mailing's links were, kept after their rows are dropped.

use super::error::StoreError;
use crate::kind::LinkKind;
use crate::mailing_id::MailingId;
use crate::token::TokenSeal;
use chrono::NaiveDate;
use sha2::{Digest, Sha256};
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::HashMap;

/// The installation's seal: `token_format`'s row with `secret`
/// (`LINKTRACK_SECRET`, if set) mixed in.
pub async fn load_seal(pool: &MySqlPool, secret: Option<&str>) -> Result<TokenSeal, StoreError> {
    let row: Option<(u64, Vec<u8>)> =
        sqlx::query_as("SELECT sealed_since_ms, install_key FROM token_format WHERE id = 1")
            .fetch_optional(pool)
            .await?;
    let (sealed_since_ms, install_key) = row.ok_or_else(|| StoreError::Corrupt {
        table: "token_format",
        detail: "its one row is missing (run `linktrack db migrate`)".into(),
    })?;
    Ok(TokenSeal::derive(secret, &install_key, sealed_since_ms))
}

/// What identifies a template within its mailing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TemplateKey {
    pub kind: LinkKind,
    pub position: u32,
    pub url: String,
}

/// A stored template, as the fall-back reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkTemplate {
    pub id: u32,
    pub mailing_id: String,
    pub kind: LinkKind,
    pub position: u32,
    pub url: String,
    /// The UTC day its first token was made.
    pub first_day: NaiveDate,
}

/// Rows per INSERT: 6 placeholders each, well under the 65,535 limit.
const ROWS_PER_INSERT: usize = 1_000;

/// The ids of `keys`' templates in `mailing_id`, storing the ones not yet
/// stored (first made on `day`). Idempotent: a resumed build, or two
/// builders at once, get the same ids for the same keys.
pub async fn intern(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    keys: &[TemplateKey],
    day: NaiveDate,
) -> Result<HashMap<TemplateKey, u32>, StoreError> {
    for chunk in keys.chunks(ROWS_PER_INSERT) {
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT IGNORE INTO link_templates (mailing_id, kind, position, url_hash, url, first_day) ",
        );
        query.push_values(chunk, |mut row, key| {
            row.push_bind(mailing_id.as_str())
                .push_bind(key.kind)
                .push_bind(key.position)
                .push_bind(url_hash(&key.url).to_vec())
                .push_bind(&key.url)
                .push_bind(day);
        });
        query.build().execute(pool).await?;
    }
    let stored = of_mailing(pool, mailing_id).await?;
    Ok(keys
        .iter()
        .filter_map(|key| stored.get(key).map(|id| (key.clone(), *id)))
        .collect())
}

/// Every template of a mailing, by key.
pub async fn of_mailing(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<HashMap<TemplateKey, u32>, StoreError> {
    let rows: Vec<(u32, String, u32, String)> = sqlx::query_as(
        "SELECT id, CAST(kind AS CHAR), position, url FROM link_templates WHERE mailing_id = ?",
    )
    .bind(mailing_id.as_str())
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(id, kind, position, url)| {
            Ok((
                TemplateKey {
                    kind: parse_kind(&kind)?,
                    position,
                    url,
                },
                id,
            ))
        })
        .collect()
}

/// The template `id` names, if any.
pub async fn find(pool: &MySqlPool, id: u32) -> Result<Option<LinkTemplate>, StoreError> {
    let row: Option<(String, String, u32, String, NaiveDate)> = sqlx::query_as(
        "SELECT mailing_id, CAST(kind AS CHAR), position, url, first_day \
         FROM link_templates WHERE id = ?",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    row.map(|(mailing_id, kind, position, url, first_day)| {
        Ok(LinkTemplate {
            id,
            mailing_id,
            kind: parse_kind(&kind)?,
            position,
            url,
            first_day,
        })
    })
    .transpose()
}

fn url_hash(url: &str) -> [u8; 32] {
    Sha256::digest(url.as_bytes()).into()
}

fn parse_kind(kind: &str) -> Result<LinkKind, StoreError> {
    kind.parse()
        .map_err(|err: crate::kind::UnknownKind| StoreError::Corrupt {
            table: "link_templates",
            detail: err.to_string(),
        })
}

/// Up to `limit` templates with an id above `after_id` whose first token
/// was made on or after `first_day` (their links may still live), by id:
/// what a server keeps in memory to redirect while the database is away.
pub async fn live_after(
    pool: &MySqlPool,
    after_id: u32,
    first_day: NaiveDate,
    limit: u32,
) -> Result<Vec<LinkTemplate>, StoreError> {
    let rows: Vec<(u32, String, String, u32, String, NaiveDate)> = sqlx::query_as(
        "SELECT id, mailing_id, CAST(kind AS CHAR), position, url, first_day \
         FROM link_templates WHERE id > ? AND first_day >= ? ORDER BY id LIMIT ?",
    )
    .bind(after_id)
    .bind(first_day)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(id, mailing_id, kind, position, url, first_day)| {
            Ok(LinkTemplate {
                id,
                mailing_id,
                kind: parse_kind(&kind)?,
                position,
                url,
                first_day,
            })
        })
        .collect()
}
