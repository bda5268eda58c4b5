//! Reading `links`: the lookups of a click (one token, a batch, a batch
//! spread over a data node's tables) and the row as the redirect reads it.
//! Below the cluster's code, which routes lookups here on each node;
//! `links.rs` re-exports what its callers name.

use super::error::StoreError;
use crate::token::Token;
use sqlx::MySqlPool;
use std::collections::HashMap;

use crate::kind::LinkKind;

/// MySQL's limit on placeholders in one prepared statement.
pub(super) const MAX_PLACEHOLDERS: usize = 65_535;

/// A row as the redirect reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredLink {
    pub id: u64,
    pub token: Token,
    pub kind: LinkKind,
    pub mailing_id: String,
    pub letter_id: u64,
    pub email: String,
    pub position: u32,
    pub url: String,
}

/// The lookup. Both key columns are bound, so the optimizer prunes to the
/// one partition named by the token's date; `tests/` runs `EXPLAIN` on this
/// exact text to prove it.
pub const LOOKUP_SQL: &str =
    "SELECT id, CAST(kind AS CHAR), mailing_id, letter_id, email, position, url \
     FROM links WHERE uuid = ? AND inserted = ?";

/// Fetch the link a token names, reading one partition.
pub async fn lookup(pool: &MySqlPool, token: &Token) -> Result<Option<StoredLink>, StoreError> {
    lookup_with(pool, LOOKUP_SQL, token).await
}

/// [`lookup`] on one data table of a Spider data node (`links_07`): the
/// routed lookup of a single token, the same point select as on one server.
pub(crate) async fn lookup_in(
    pool: &MySqlPool,
    table: &str,
    token: &Token,
) -> Result<Option<StoredLink>, StoreError> {
    let sql = LOOKUP_SQL.replace("FROM links ", &format!("FROM `{table}` "));
    lookup_with(pool, &sql, token).await
}

async fn lookup_with(
    pool: &MySqlPool,
    sql: &str,
    token: &Token,
) -> Result<Option<StoredLink>, StoreError> {
    type Row = (u64, String, String, u64, String, u32, String);
    let row: Option<Row> = sqlx::query_as(sql)
        .bind(&token.as_bytes()[..])
        .bind(token.date())
        .fetch_optional(pool)
        .await?;
    row.map(|(id, kind, mailing_id, letter_id, email, position, url)| {
        let kind = kind
            .parse()
            .map_err(|err: crate::kind::UnknownKind| StoreError::Corrupt {
                table: "links",
                detail: err.to_string(),
            })?;
        Ok(StoredLink {
            id,
            token: *token,
            kind,
            mailing_id,
            letter_id,
            email,
            position,
            url,
        })
    })
    .transpose()
}

/// Fetch the links many tokens name: one prepared statement per
/// [`MOST_SLOTS`] tokens, `WHERE (uuid, inserted) IN ((?, ?), …)`, which
/// reads the token index of one partition per day named (`tests/` checks
/// the plan). Tokens naming no link are simply absent.
///
/// Why this shape: measured with sysbench on the same table (database CPU
/// per token, docs/benchmarks.md), a prepared row constructor costs the
/// database least per token, less than a point select per token and less
/// than an `OR` of one `inserted = day AND uuid IN (…)` per day sent as
/// text (whose range analysis is its cost). A batch is padded up to the next slot count
/// (its last token repeated, which the database reads once), so a
/// connection prepares at most [`SLOTS`]`.len()` shapes, once each.
pub async fn lookup_many(
    pool: &MySqlPool,
    tokens: &[Token],
) -> Result<HashMap<Token, StoredLink>, StoreError> {
    lookup_many_from(pool, None, tokens).await
}

/// The batched lookup on `links`, or on `table` when given.
async fn lookup_many_from(
    pool: &MySqlPool,
    table: Option<&str>,
    tokens: &[Token],
) -> Result<HashMap<Token, StoredLink>, StoreError> {
    let mut found = HashMap::with_capacity(tokens.len());
    for chunk in tokens.chunks(MOST_SLOTS) {
        let Some(last) = chunk.last() else {
            continue;
        };
        let slots = lookup_many_slots(chunk.len());
        let sql: std::borrow::Cow<'static, str> = match table {
            None => lookup_many_sql(slots).into(),
            Some(table) => lookup_many_sql(slots)
                .replace("FROM links ", &format!("FROM `{table}` "))
                .into(),
        };
        let mut query = sqlx::query_as::<_, LinkRow>(&sql);
        for token in chunk.iter().chain(std::iter::repeat(last)).take(slots) {
            query = query.bind(&token.as_bytes()[..]).bind(token.date());
        }
        for row in query.fetch_all(pool).await? {
            let link = stored_link(row)?;
            found.insert(link.token, link);
        }
    }
    Ok(found)
}

/// The batched lookup on one Spider data node, past the head: `tables`
/// names every data table of the node (`links_07`, …), in the topology's
/// order, each with the tokens whose links it holds (none for most, in a
/// small batch). Tokens of one table: [`lookup_many`]'s statement on
/// that table. Tokens of several: one statement for the whole node, a
/// `UNION ALL` of [`lookup_many_sql`]'s select on each of its data tables,
/// so a batch costs a node one round trip and one statement whatever
/// number of virtual shards it spans, as on one server. Every table of the
/// node is named, each with the slot count of the largest part (one of
/// [`SLOTS`]), so the statement's text depends only on the node's tables
/// and that slot count: a connection prepares at most [`SLOTS`]`.len()`
/// of them per set of tables, never one per combination of tables a
/// batch happens to touch. A part is padded with its own last token, a
/// table without tokens with another table's (a token lies in one table
/// only: there, one index probe that finds nothing). A table with more
/// than [`MOST_SLOTS`] tokens takes one more statement per
/// [`MOST_SLOTS`] (per fewer on a node of so many data tables that the
/// statement would pass MySQL's placeholder limit).
pub(crate) async fn lookup_many_on_node(
    pool: &MySqlPool,
    tables: &[(String, Vec<Token>)],
) -> Result<HashMap<Token, StoredLink>, StoreError> {
    let mut filled = tables.iter().filter(|(_, tokens)| !tokens.is_empty());
    match (filled.next(), filled.next()) {
        (None, _) => return Ok(HashMap::new()),
        (Some((table, tokens)), None) => return lookup_many_from(pool, Some(table), tokens).await,
        _ => {}
    }
    let mut found = HashMap::with_capacity(tables.iter().map(|(_, t)| t.len()).sum());
    // Two placeholders a slot, on every table of the node.
    let fits = |slots: &&usize| tables.len() * *slots * 2 <= MAX_PLACEHOLDERS;
    let Some(&per_round) = SLOTS.iter().rev().find(fits) else {
        // More data tables than one statement can name: each its own.
        for (table, tokens) in tables.iter().filter(|(_, tokens)| !tokens.is_empty()) {
            found.extend(lookup_many_from(pool, Some(table), tokens).await?);
        }
        return Ok(found);
    };
    let most = tables
        .iter()
        .map(|(_, tokens)| tokens.len())
        .max()
        .unwrap_or(0);
    for round in 0..most.div_ceil(per_round) {
        let start = round * per_round;
        let parts: Vec<&[Token]> = tables
            .iter()
            .map(|(_, tokens)| {
                let rest = tokens.get(start..).unwrap_or_default();
                &rest[..rest.len().min(per_round)]
            })
            .collect();
        let Some(filler) = parts.iter().find_map(|part| part.last()) else {
            continue;
        };
        let slots = lookup_many_slots(parts.iter().map(|part| part.len()).max().unwrap_or(1));
        let sql = node_lookup_sql(tables.iter().map(|(table, _)| table.as_str()), slots);
        let mut query = sqlx::query_as::<_, LinkRow>(&sql);
        for part in &parts {
            let last = part.last().unwrap_or(filler);
            for token in part.iter().chain(std::iter::repeat(last)).take(slots) {
                query = query.bind(&token.as_bytes()[..]).bind(token.date());
            }
        }
        for row in query.fetch_all(pool).await? {
            let link = stored_link(row)?;
            found.insert(link.token, link);
        }
    }
    Ok(found)
}

/// The statement of [`lookup_many_on_node`]: [`lookup_many_sql`] with
/// `slots` pairs on each of `tables`, in order, joined by `UNION ALL`.
fn node_lookup_sql<'t>(tables: impl IntoIterator<Item = &'t str>, slots: usize) -> String {
    let select = lookup_many_sql(slots);
    tables
        .into_iter()
        .map(|table| select.replace("FROM links ", &format!("FROM `{table}` ")))
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// [`lookup_many`] with the tokens split into up to `statements` parts
/// whose statements run at once, each on a connection of its own. For large
/// lists (the replay resolves thousands of opens at a time): when the
/// buffer pool is cold, a statement waits for one page read after another,
/// so the reads of one statement alone are bound by the disk's latency.
pub async fn lookup_many_concurrently(
    pool: &MySqlPool,
    tokens: &[Token],
    statements: usize,
) -> Result<HashMap<Token, StoredLink>, StoreError> {
    let per_part = tokens
        .len()
        .div_ceil(statements.max(1))
        .next_multiple_of(MOST_SLOTS);
    if tokens.len() <= per_part {
        return lookup_many(pool, tokens).await;
    }
    let mut parts = tokio::task::JoinSet::new();
    for part in tokens.chunks(per_part) {
        let (pool, part) = (pool.clone(), part.to_vec());
        parts.spawn(async move { lookup_many(&pool, &part).await });
    }
    let mut found = HashMap::with_capacity(tokens.len());
    while let Some(part) = parts.join_next().await {
        // A task fails only by panicking (a bug): say so, as an error.
        let part = part.map_err(|source| StoreError::Task {
            what: "a link lookup task",
            source,
        })??;
        found.extend(part);
    }
    Ok(found)
}

/// The statement sizes of [`lookup_many`], in tokens.
pub const SLOTS: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
/// The most tokens in one [`lookup_many`] statement.
pub const MOST_SLOTS: usize = SLOTS[SLOTS.len() - 1];

/// The slots of the statement `tokens` tokens are looked up with: the
/// smallest of [`SLOTS`] that holds them (at most [`MOST_SLOTS`]).
pub fn lookup_many_slots(tokens: usize) -> usize {
    SLOTS[slot_index(tokens)]
}

/// The index in [`SLOTS`] of the smallest slot count that holds `tokens`.
fn slot_index(tokens: usize) -> usize {
    SLOTS
        .iter()
        .position(|&slots| slots >= tokens)
        .unwrap_or(SLOTS.len() - 1)
}

/// The statement of [`lookup_many`] with `slots` (one of [`SLOTS`]) token
/// and day placeholder pairs, bound in that order.
pub fn lookup_many_sql(slots: usize) -> &'static str {
    static STATEMENTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let statements = STATEMENTS.get_or_init(|| {
        SLOTS
            .iter()
            .map(|&n| {
                format!(
                    "SELECT id, uuid, CAST(kind AS CHAR), mailing_id, letter_id, email, position, url \
                     FROM links WHERE (uuid, inserted) IN ({})",
                    vec!["(?, ?)"; n].join(", ")
                )
            })
            .collect()
    });
    &statements[slot_index(slots)]
}

pub(super) type LinkRow = (u64, Vec<u8>, String, String, u64, String, u32, String);

pub(super) fn stored_link(
    (id, uuid, kind, mailing_id, letter_id, email, position, url): LinkRow,
) -> Result<StoredLink, StoreError> {
    Ok(StoredLink {
        id,
        token: token_from_column(&uuid)?,
        kind: kind
            .parse()
            .map_err(|err: crate::kind::UnknownKind| StoreError::Corrupt {
                table: "links",
                detail: err.to_string(),
            })?,
        mailing_id,
        letter_id,
        email,
        position,
        url,
    })
}

pub(super) fn token_from_column(bytes: &[u8]) -> Result<Token, StoreError> {
    Token::from_bytes(bytes).map_err(|e| StoreError::Corrupt {
        table: "links",
        detail: format!("uuid column: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_statement_names_each_table_with_the_same_slots_within_the_placeholder_limit() {
        let tables = ["links_00", "links_03", "links_14"];
        let sql = node_lookup_sql(tables, 4);
        assert_eq!(sql.matches(" UNION ALL ").count(), 2);
        for table in tables {
            assert_eq!(
                sql.matches(&format!("FROM `{table}` WHERE")).count(),
                1,
                "{sql}"
            );
        }
        assert_eq!(sql.matches('?').count(), 3 * 4 * 2);
        // Fifteen data tables (the most a node holds by default) at the
        // largest slot count stay a prepared statement's worth.
        let all: Vec<String> = (0..15).map(|n| format!("links_{n:02}")).collect();
        let sql = node_lookup_sql(all.iter().map(String::as_str), MOST_SLOTS);
        assert!(sql.matches('?').count() <= MAX_PLACEHOLDERS);
    }
}
