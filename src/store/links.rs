//! The `links` table: one denormalised row per tracked link, so the redirect
//! needs exactly one read (seed 001: "everything needed for statistics in one
//! request").

pub use super::link_lookups::{
    lookup, lookup_many, lookup_many_concurrently, lookup_many_slots, lookup_many_sql, StoredLink,
    LOOKUP_SQL, MOST_SLOTS, SLOTS,
};

use super::cluster;
use super::error::StoreError;
use super::link_lookups::{stored_link, token_from_column, LinkRow, MAX_PLACEHOLDERS};
use super::mysql_errors::is_no_partition;
use crate::mailing_id::MailingId;
use crate::token::Token;
use chrono::NaiveDate;
use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder};
use std::collections::HashMap;

pub use crate::kind::LinkKind;

/// The `url` of the pixel row of a `track: "last_open_day"` letter (a
/// pixel row's URL is otherwise empty): its opens keep only the UTC day of
/// the address's last open (`last_open_days`), never an event. Read by the
/// journal replay with the rest of the row, so it costs no extra read.
pub const LAST_OPEN_DAY_PIXEL: &str = "last_open_day";

/// A row to insert. `inserted` is always the token's date.
#[derive(Debug, Clone, PartialEq)]
pub struct NewLink {
    pub token: Token,
    pub kind: LinkKind,
    pub mailing_id: String,
    pub letter_id: u64,
    pub email: String,
    pub position: u32,
    pub url: String,
    pub meta: Option<serde_json::Value>,
}

/// Columns bound per inserted row, at most: 9, and on a Spider head the id
/// and the shard linktrack gives each row.
const COLUMNS_PER_ROW: usize = 11;
/// The most rows one INSERT carries.
pub const MAX_ROWS_PER_INSERT: usize = MAX_PLACEHOLDERS / COLUMNS_PER_ROW;
const _: () = assert!(MAX_ROWS_PER_INSERT * COLUMNS_PER_ROW <= MAX_PLACEHOLDERS);
/// Keep each statement well under the default 16 MB `max_allowed_packet`,
/// since URLs have no length limit.
const MAX_BYTES_PER_INSERT: usize = 4 << 20;

/// Insert `rows` on a connection from the pool; see [`insert_on`]. On a
/// Spider head the rows get their ids (and shards) from linktrack.
pub async fn insert(pool: &MySqlPool, rows: &[NewLink]) -> Result<u64, StoreError> {
    let head = HeadRows::for_rows(pool, rows.len()).await?;
    let mut conn = pool.acquire().await?;
    insert_with(&mut conn, rows, head.as_ref()).await
}

/// What a Spider head's rows carry besides the link: an id each (never the
/// column default, see `cluster::ids`) and, in the shard layout, the shard.
pub struct HeadRows {
    writes: std::sync::Arc<cluster::HeadWrites>,
    ids: Vec<u64>,
}

impl HeadRows {
    /// `Some` with `count` fresh ids when `pool` is a Spider head. Take them
    /// before opening the insert's transaction: the reservation is a
    /// statement of its own on the head, never inside the batch's.
    pub async fn for_rows(pool: &MySqlPool, count: usize) -> Result<Option<HeadRows>, StoreError> {
        let Some(writes) = cluster::head_writes(pool).await? else {
            return Ok(None);
        };
        let ids = writes.link_ids(pool, count).await?;
        Ok(Some(HeadRows { writes, ids }))
    }
}

/// Insert `rows` in as few multi-row statements as the placeholder and
/// packet limits allow, on one connection (pass `&mut *transaction` to make
/// them all-or-nothing). Returns the number of rows inserted. One server
/// only: a Spider head's rows need [`insert_with`] and their [`HeadRows`].
pub async fn insert_on(conn: &mut MySqlConnection, rows: &[NewLink]) -> Result<u64, StoreError> {
    insert_with(conn, rows, None).await
}

/// [`insert_on`], with the ids and shards `head` gives (one id per row).
pub async fn insert_with(
    conn: &mut MySqlConnection,
    rows: &[NewLink],
    head: Option<&HeadRows>,
) -> Result<u64, StoreError> {
    if let Some(head) = head {
        if head.ids.len() != rows.len() {
            return Err(StoreError::Refused(format!(
                "{} link ids reserved for {} rows",
                head.ids.len(),
                rows.len()
            )));
        }
    }
    let mut inserted = 0;
    let mut offset = 0;
    for chunk in chunks(rows) {
        let ids = head.map(|h| &h.ids[offset..offset + chunk.len()]);
        offset += chunk.len();
        let mut query = QueryBuilder::<MySql>::new(insert_columns(head));
        query.push_values(chunk.iter().enumerate(), |mut b, (n, row)| {
            if let (Some(head), Some(ids)) = (head, ids) {
                b.push_bind(ids[n]);
                if let Some(shard) = head.writes.shard_of(row.token.as_bytes()) {
                    b.push_bind(shard);
                }
            }
            b.push_bind(&row.token.as_bytes()[..])
                .push_bind(row.token.date())
                .push_bind(row.kind)
                .push_bind(&row.mailing_id)
                .push_bind(row.letter_id)
                .push_bind(&row.email)
                .push_bind(row.position)
                .push_bind(&row.url)
                .push_bind(row.meta.as_ref().map(sqlx::types::Json));
        });
        match query.build().execute(&mut *conn).await {
            Ok(done) => inserted += done.rows_affected(),
            Err(err) if is_no_partition(&err) => {
                return Err(StoreError::NoPartition {
                    table: "links",
                    date: latest_date(chunk),
                })
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(inserted)
}

/// The insert's column list: the id and shard first when linktrack gives them.
fn insert_columns(head: Option<&HeadRows>) -> &'static str {
    match head.map(|h| h.writes.layout) {
        None => {
            "INSERT INTO links (uuid, inserted, kind, mailing_id, letter_id, email, position, url, meta) "
        }
        Some(cluster::LinkLayout::ByKey) => {
            "INSERT INTO links (id, uuid, inserted, kind, mailing_id, letter_id, email, position, url, meta) "
        }
        Some(cluster::LinkLayout::ByShard { .. }) => {
            "INSERT INTO links (id, shard, uuid, inserted, kind, mailing_id, letter_id, email, position, url, meta) "
        }
    }
}

/// The letters of a mailing already stored, by address: every letter with
/// any row stored, not only those with their pixel row. On one server a
/// batch commits whole, but a Spider cluster commits node by node: a failed
/// commit can keep some of a letter's rows (on one node) and lose the rest,
/// pixel included. Resuming such a letter under its id stores only its
/// missing rows; a new id would leave the kept ones behind, orphaned. Used
/// to resume an interrupted build without storing anything twice.
pub async fn letters_of_mailing(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<HashMap<String, u64>, StoreError> {
    let rows: Vec<(String, u64)> = sqlx::query_as(
        "SELECT email, MIN(letter_id) FROM links WHERE mailing_id = ? AND letter_id > 0 \
         GROUP BY email",
    )
    .bind(mailing_id.as_str())
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Every row of the given letters of a mailing (uses the mailing_letter index).
pub async fn of_letters(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    letter_ids: &[u64],
) -> Result<Vec<StoredLink>, StoreError> {
    let mut found = Vec::new();
    for chunk in letter_ids.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT id, uuid, CAST(kind AS CHAR), mailing_id, letter_id, email, position, url \
             FROM links WHERE mailing_id = ",
        );
        query
            .push_bind(mailing_id.as_str())
            .push(" AND letter_id IN ");
        super::in_list::push_in_list(&mut query, chunk.iter().copied());
        let rows: Vec<LinkRow> = query.build_query_as().fetch_all(pool).await?;
        for row in rows {
            found.push(stored_link(row)?);
        }
    }
    Ok(found)
}

/// The image rows of a mailing: one token per distinct image URL.
pub async fn images_of_mailing(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<HashMap<String, Token>, StoreError> {
    let rows: Vec<(String, Vec<u8>)> = sqlx::query_as(
        "SELECT url, uuid FROM links WHERE mailing_id = ? AND letter_id = 0 AND kind = 'image'",
    )
    .bind(mailing_id.as_str())
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(url, uuid)| Ok((url, token_from_column(&uuid)?)))
        .collect()
}

/// The rows every letter of a mailing shares (letter 0): proxied images,
/// and the click and pixel rows of anonymous letters, by (kind, position, URL).
pub async fn shared_of_mailing(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<HashMap<(LinkKind, u32, String), Token>, StoreError> {
    let rows: Vec<(String, u32, String, Vec<u8>)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), position, url, uuid FROM links \
         WHERE mailing_id = ? AND letter_id = 0",
    )
    .bind(mailing_id.as_str())
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(kind, position, url, uuid)| {
            let kind =
                kind.parse()
                    .map_err(|err: crate::kind::UnknownKind| StoreError::Corrupt {
                        table: "links",
                        detail: err.to_string(),
                    })?;
            Ok(((kind, position, url), token_from_column(&uuid)?))
        })
        .collect()
}

/// The newest day in a batch: the one most likely to lack a partition.
fn latest_date(rows: &[NewLink]) -> NaiveDate {
    rows.iter()
        .map(|r| r.token.date())
        .max()
        .unwrap_or_default()
}

/// Split rows so each statement respects both the placeholder and size limits.
fn chunks(rows: &[NewLink]) -> Vec<&[NewLink]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, row) in rows.iter().enumerate() {
        let size = 64 + row.url.len() + row.email.len() + row.mailing_id.len();
        let full =
            i - start >= MAX_ROWS_PER_INSERT || (i > start && bytes + size > MAX_BYTES_PER_INSERT);
        if full {
            out.push(&rows[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

/// The URL and tags (`meta.tags`) of link rows, by link id. Each link is
/// named by its id and its token (whose date is the row's partition), so
/// every statement reads one partition; used by the rollup (tags of clicks)
/// and by events out (the payload's `url` and `tags`).
pub async fn urls_and_tags<'a>(
    pool: &MySqlPool,
    links: impl IntoIterator<Item = (u64, &'a [u8])>,
) -> Result<std::collections::BTreeMap<u64, (String, Vec<String>)>, StoreError> {
    let mut by_day: std::collections::BTreeMap<NaiveDate, Vec<u64>> = Default::default();
    for (id, token) in links {
        if let Ok(token) = Token::from_bytes(token) {
            by_day.entry(token.date()).or_default().push(id);
        }
    }
    let mut out = std::collections::BTreeMap::new();
    for (day, ids) in &by_day {
        for chunk in ids.chunks(super::in_list::IN_LIST_CHUNK) {
            let mut query = QueryBuilder::<MySql>::new(
                "SELECT id, url, CAST(meta AS CHAR) FROM links WHERE inserted = ",
            );
            query.push_bind(*day).push(" AND id IN ");
            super::in_list::push_in_list(&mut query, chunk.iter().copied());
            let rows: Vec<(u64, String, Option<String>)> =
                query.build_query_as().fetch_all(pool).await?;
            for (id, url, meta) in rows {
                out.insert(id, (url, tags_of(meta.as_deref())));
            }
        }
    }
    Ok(out)
}

/// The `tags` array of a link's meta JSON; anything else is no tags.
pub(crate) fn tags_of(meta: Option<&str>) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(default)]
        tags: Vec<String>,
    }
    meta.and_then(|m| serde_json::from_str::<Meta>(m).ok())
        .map(|m| m.tags)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(url_len: usize) -> NewLink {
        NewLink {
            token: Token::new(),
            kind: LinkKind::Click,
            mailing_id: "m".into(),
            letter_id: 1,
            email: "a@example.com".into(),
            position: 1,
            url: "x".repeat(url_len),
            meta: None,
        }
    }

    #[test]
    fn chunks_respect_the_placeholder_limit() {
        let rows: Vec<NewLink> = (0..MAX_ROWS_PER_INSERT * 2 + 5).map(|_| row(10)).collect();
        let sizes: Vec<usize> = chunks(&rows).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [MAX_ROWS_PER_INSERT, MAX_ROWS_PER_INSERT, 5]);
    }

    #[test]
    fn chunks_respect_the_packet_budget_and_keep_huge_rows() {
        let rows: Vec<NewLink> = (0..5).map(|_| row(3 << 20)).collect();
        let parts = chunks(&rows);
        assert_eq!(parts.len(), 5, "each 3 MB row gets its own statement");
        assert_eq!(parts.iter().map(|c| c.len()).sum::<usize>(), 5);
        assert!(chunks(&[]).is_empty());
    }

    #[test]
    fn tags_come_from_meta_or_are_empty() {
        assert_eq!(tags_of(Some(r#"{"tags":["ruby","web"]}"#)), ["ruby", "web"]);
        assert!(tags_of(Some(r#"{"other":1}"#)).is_empty());
        assert!(tags_of(Some("not json")).is_empty());
        assert!(tags_of(None).is_empty());
    }
}
