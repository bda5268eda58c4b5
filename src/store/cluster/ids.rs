//! Ids and shards of the rows linktrack writes through a Spider head.
//!
//! The id of a `links` or `events` row on a cluster comes from linktrack,
//! never from the head's column default: MariaDB 10.11 crashed evaluating
//! `DEFAULT NEXT VALUE FOR links_ids` under large prepared inserts through a
//! Spider table (docs/scaling.md, "The old head crash"). The ids are reserved
//! in the head's `sequences` table (one `UPDATE … LAST_INSERT_ID(id + n)`,
//! see [`crate::store::sequences`]), which is a plain InnoDB table there:
//!
//! * `links` ids in blocks: the next block is reserved in the background as
//!   soon as the current one could not hold another batch of the last size,
//!   so a build never waits on a reservation after its first batch;
//! * `events` ids are made by the server itself (`event_ids`), so events can
//!   be written without the head; the `events.id` row only marks, for heads
//!   of older linktracks, where the ids stood.
//!
//! Blocks reserved later are higher, so link ids increase in insertion
//! order in each process and are unique across every data table and every
//! process.
//!
//! What a database is (one server, or a head and which layout) is read once
//! per database and kept for the process.

use super::super::sequences;
use crate::locks::LockEvenPoisoned;
use crate::store::error::StoreError;
use sqlx::MySqlPool;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, LazyLock, Mutex};

/// The `sequences` row `links` ids are reserved from.
pub const LINK_IDS: &str = "links.id";
/// The `sequences` row `events` ids were reserved from (before the
/// servers made them, `event_ids`); `migrate` still seeds it.
pub const EVENT_IDS: &str = "events.id";

/// Link ids reserved per block unless a batch needs more.
const LINK_BLOCK: u64 = 10_000;

/// How the head spreads `links` over its data tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayout {
    /// `PARTITION BY KEY (uuid)`: made by `migrate` before the shard column;
    /// only the head knows where a token is (no routing).
    ByKey,
    /// `PARTITION BY LIST (shard)` over this many virtual shards: linktrack
    /// writes each row's `shard` ([`super::shard_of`]) and can route lookups.
    ByShard { shards: u32 },
}

/// What writing to a head needs: its layout and its link id blocks.
#[derive(Debug)]
pub struct HeadWrites {
    pub layout: LinkLayout,
    link_ids: IdBlocks,
}

impl HeadWrites {
    /// The shard column's value of a token, when the layout has one.
    pub fn shard_of(&self, token: &[u8; 16]) -> Option<u32> {
        match self.layout {
            LinkLayout::ByShard { shards } => Some(super::shard::shard_of(token, shards)),
            LinkLayout::ByKey => None,
        }
    }

    /// `count` new link ids, increasing.
    pub async fn link_ids(&self, pool: &MySqlPool, count: usize) -> Result<Vec<u64>, StoreError> {
        self.link_ids.take(pool, count as u64).await
    }
}

type Known = HashMap<String, Option<Arc<HeadWrites>>>;
static KNOWN: LazyLock<Mutex<Known>> = LazyLock::new(Default::default);

/// The database `pool` names, for [`KNOWN`].
fn database_key(pool: &MySqlPool) -> String {
    let options = pool.connect_options();
    format!(
        "{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or_default()
    )
}

/// `Some` when `pool` is a Spider head (its `links` a Spider table): its
/// rows then need ids (and shards) from linktrack. Read once per database.
pub async fn head_writes(pool: &MySqlPool) -> Result<Option<Arc<HeadWrites>>, StoreError> {
    let key = database_key(pool);
    if let Some(known) = lock(&KNOWN).get(&key) {
        return Ok(known.clone());
    }
    let mut conn = pool.acquire().await?;
    let found = if super::topology::is_head(&mut conn).await? {
        Some(Arc::new(HeadWrites {
            layout: link_layout(&mut conn).await?,
            link_ids: IdBlocks::new(LINK_IDS, LINK_BLOCK),
        }))
    } else {
        None
    };
    drop(conn);
    Ok(lock(&KNOWN).entry(key).or_insert(found).clone())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding these locks; a poisoned one is still sound.
    mutex.lock_even_poisoned()
}

/// The head's `links` layout, from its partitioning.
pub(super) async fn link_layout(
    conn: &mut sqlx::MySqlConnection,
) -> Result<LinkLayout, StoreError> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(PARTITION_METHOD AS CHAR), CAST(COALESCE(PARTITION_EXPRESSION, '') AS CHAR) \
         FROM information_schema.PARTITIONS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'links' AND PARTITION_NAME IS NOT NULL",
    )
    .fetch_all(&mut *conn)
    .await?;
    let by_shard = rows
        .first()
        .is_some_and(|(method, expr)| method == "LIST" && expr.trim_matches('`') == "shard");
    Ok(if by_shard {
        LinkLayout::ByShard {
            shards: rows.len() as u32,
        }
    } else {
        LinkLayout::ByKey
    })
}

/// Ids handed out from blocks of a `sequences` row, the next block reserved
/// ahead in the background.
#[derive(Debug)]
pub struct IdBlocks {
    name: &'static str,
    block: u64,
    state: tokio::sync::Mutex<BlockState>,
}

#[derive(Debug, Default)]
struct BlockState {
    /// Ids not yet handed out, in reservation order (each range increasing,
    /// each later range above the earlier ones).
    ready: Vec<Range<u64>>,
    /// The block being reserved ahead.
    ahead: Option<tokio::task::JoinHandle<Result<Range<u64>, StoreError>>>,
}

impl BlockState {
    fn left(&self) -> u64 {
        self.ready.iter().map(|r| r.end - r.start).sum()
    }
}

impl IdBlocks {
    /// Blocks of `block` ids (or of a batch's size, when larger) from the
    /// `sequences` row `name`.
    pub fn new(name: &'static str, block: u64) -> IdBlocks {
        IdBlocks {
            name,
            block: block.max(1),
            state: Default::default(),
        }
    }

    /// `count` ids, increasing. Waits for a reservation only when neither
    /// the ids left nor the block reserved ahead hold them.
    pub async fn take(&self, pool: &MySqlPool, count: u64) -> Result<Vec<u64>, StoreError> {
        let mut state = self.state.lock().await;
        while state.left() < count {
            let reserved = match state.ahead.take() {
                // A task of a runtime that has ended cannot finish: reserve anew.
                Some(ahead) => match ahead.await {
                    Ok(reserved) => reserved?,
                    Err(_) => sequences::reserve(pool, self.name, self.block.max(count)).await?,
                },
                None => sequences::reserve(pool, self.name, self.block.max(count)).await?,
            };
            state.ready.push(reserved);
        }
        let mut ids = Vec::with_capacity(count as usize);
        while (ids.len() as u64) < count {
            let Some(first) = state.ready.first_mut() else {
                break;
            };
            let want = count - ids.len() as u64;
            let end = first.end.min(first.start + want);
            ids.extend(first.start..end);
            first.start = end;
            if first.is_empty() {
                state.ready.remove(0);
            }
        }
        if state.left() < count && state.ahead.is_none() {
            let (pool, name, size) = (pool.clone(), self.name, self.block.max(count));
            state.ahead = Some(tokio::spawn(async move {
                sequences::reserve(&pool, name, size).await
            }));
        }
        Ok(ids)
    }
}
