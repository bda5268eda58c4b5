//! The Redis live layer: per-mailing counters, the latest clicks, top links
//! and per-tag sets of letters, kept by the rollup worker as it rolls events,
//! and the segments built from those sets.
//!
//! MySQL's rollup tables are the truth; Redis is a fast, best-effort view.
//! It is updated after each rollup transaction commits, so a crash between
//! the COMMIT and the Redis update loses that batch's live increments (the
//! MySQL counts stay exact). If Redis is down everything else keeps working:
//! errors are logged, [`Live::is_up`] turns false (shown by `/readyz` detail
//! and the `linktrack_redis_up` gauge) and the connection manager reconnects.
//!
//! # Keys (seed 004: one prefix, `:` separated, the mailing id inside)
//!
//! With the default prefix `lt:`:
//! * `lt:m:{id}:opens`, `…:clicks`, `…:images`, `…:unsubscribes` (humans) and
//!   `…:bot_opens` etc.: counters (`INCRBY`).
//! * `lt:m:{id}:recent`: the latest clicks as JSON (`LPUSH` + `LTRIM`).
//! * `lt:m:{id}:top`: human clicks by link position (`ZINCRBY`, read with
//!   `ZREVRANGE`).
//! * `lt:m:{id}:tag:{tag}`: letter ids whose recipient clicked a link with
//!   that tag (`SADD`), humans only so link scanners do not join segments.
//!
//! Sets hold letter ids, not addresses: a segment resolves them through
//! `links`, so `linktrack erase` (which blanks the address there) also
//! removes the address from every segment.

use crate::kind::EventKind;
use crate::store::rollup::{BatchClick, KindCount};
use crate::store::StoreError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "lt:";
/// How many recent clicks each mailing keeps.
pub const RECENT_CLICKS: isize = 50;

/// Errors of the live layer.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A handle on Redis; cheap to clone.
#[derive(Clone)]
pub struct Live {
    conn: ConnectionManager,
    prefix: Arc<str>,
    up: Arc<AtomicBool>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("prefix", &self.prefix)
            .field("up", &self.is_up())
            .finish()
    }
}

/// The live section of the stats API.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LiveSnapshot {
    pub counters: BTreeMap<String, u64>,
    /// Newest first.
    pub recent_clicks: Vec<serde_json::Value>,
    /// `(position, human clicks)`, most clicked first.
    pub top_links: Vec<(u32, u64)>,
}

/// Which letters a segment selects: those that clicked every tag in `all`,
/// or any tag in `any`, and none in `none`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentQuery {
    pub all: Vec<String>,
    pub any: Vec<String>,
    pub none: Vec<String>,
}

impl Live {
    /// A lazy connection: nothing is contacted until the first command, so a
    /// Redis that is down at start-up does not stop the service.
    pub fn new(url: &str, prefix: &str) -> Result<Live, LiveError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(1);
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Live {
            conn,
            prefix: prefix.into(),
            up: Arc::new(AtomicBool::new(true)),
        })
    }

    /// False after the last command failed, until one succeeds again.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Ask Redis whether it answers (for `/readyz`); updates [`Live::is_up`].
    pub async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        let result: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
        self.note(result).is_ok()
    }

    /// Record the outcome of a command for `/readyz` and the metric.
    fn note<T>(&self, result: Result<T, redis::RedisError>) -> Result<T, LiveError> {
        let ok = result.is_ok();
        self.up.store(ok, Ordering::Relaxed);
        metrics::gauge!("linktrack_redis_up").set(if ok { 1.0 } else { 0.0 });
        Ok(result?)
    }

    fn key(&self, mailing_id: &str, suffix: &str) -> String {
        format!("{}m:{mailing_id}:{suffix}", self.prefix)
    }

    /// Add one rolled batch: its counts by kind and its clicks.
    pub async fn apply(
        &self,
        counts: &[KindCount],
        clicks: &[BatchClick],
    ) -> Result<(), LiveError> {
        let mut pipe = redis::pipe();
        for count in counts {
            let name = counter_name(count.kind, count.bot);
            pipe.incr(self.key(&count.mailing_id, &name), count.n)
                .ignore();
        }
        // Only the newest RECENT_CLICKS of each mailing can survive the LTRIM.
        let mut kept: HashMap<&str, isize> = HashMap::new();
        let mut recent: Vec<&BatchClick> = clicks
            .iter()
            .rev()
            .filter(|c| {
                let n = kept.entry(c.mailing_id.as_str()).or_insert(0);
                *n += 1;
                *n <= RECENT_CLICKS
            })
            .collect();
        recent.reverse();
        for click in recent {
            let entry = serde_json::json!({
                "at": click.occurred_at.and_utc().to_rfc3339(),
                "position": click.position,
                "letter_id": click.letter_id,
                "bot": click.bot,
            });
            pipe.lpush(self.key(&click.mailing_id, "recent"), entry.to_string())
                .ignore();
        }
        for mailing_id in kept.keys() {
            pipe.ltrim(self.key(mailing_id, "recent"), 0, RECENT_CLICKS - 1)
                .ignore();
        }
        for click in clicks.iter().filter(|c| !c.bot) {
            pipe.zincr(self.key(&click.mailing_id, "top"), click.position, 1)
                .ignore();
            for tag in &click.tags {
                let key = self.key(&click.mailing_id, &format!("tag:{tag}"));
                pipe.sadd(key, click.letter_id).ignore();
            }
        }
        let mut conn = self.conn.clone();
        let result: Result<(), _> = pipe.atomic().query_async(&mut conn).await;
        self.note(result)
    }

    /// The live counters, latest clicks and top links of a mailing.
    pub async fn snapshot(&self, mailing_id: &str) -> Result<LiveSnapshot, LiveError> {
        let mut pipe = redis::pipe();
        let names: Vec<String> = EventKind::ALL
            .into_iter()
            .flat_map(|kind| [counter_name(kind, false), counter_name(kind, true)])
            .collect();
        for name in &names {
            pipe.get(self.key(mailing_id, name));
        }
        pipe.lrange(self.key(mailing_id, "recent"), 0, RECENT_CLICKS - 1);
        pipe.zrevrange_withscores(self.key(mailing_id, "top"), 0, 9);
        let mut conn = self.conn.clone();
        let result: Result<Vec<redis::Value>, _> = pipe.query_async(&mut conn).await;
        let values = self.note(result)?;
        Ok(snapshot_from(&names, values))
    }

    /// Letter ids selected by `query` (sorted). Runs as one MULTI so the
    /// temporary key never outlives the call (it also expires in a minute).
    pub async fn segment(
        &self,
        mailing_id: &str,
        query: &SegmentQuery,
    ) -> Result<Vec<u64>, LiveError> {
        let tag_keys = |tags: &[String]| -> Vec<String> {
            tags.iter()
                .map(|t| self.key(mailing_id, &format!("tag:{t}")))
                .collect()
        };
        let tmp = format!("{}tmp:{:016x}", self.prefix, rand::random::<u64>());
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.del(&tmp).ignore();
        if !query.all.is_empty() {
            pipe.sinterstore(&tmp, tag_keys(&query.all)).ignore();
        }
        if !query.any.is_empty() {
            let mut keys = vec![tmp.clone()];
            keys.extend(tag_keys(&query.any));
            pipe.sunionstore(&tmp, keys).ignore();
        }
        pipe.expire(&tmp, 60).ignore();
        let mut diff = vec![tmp.clone()];
        diff.extend(tag_keys(&query.none));
        pipe.sdiff(diff);
        pipe.del(&tmp).ignore();
        let mut conn = self.conn.clone();
        let result: Result<(Vec<String>,), _> = pipe.query_async(&mut conn).await;
        let (members,) = self.note(result)?;
        let mut ids: Vec<u64> = members.iter().filter_map(|m| m.parse().ok()).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// Take `letters` (mailing, letter id: an erased address's) out of the
    /// live layer: out of every tag set of their mailings (segments) and
    /// out of the latest clicks. Counters, which count nobody, stay.
    pub async fn forget_letters(&self, letters: &[(String, u64)]) -> Result<Forgotten, LiveError> {
        let mut by_mailing: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for (mailing, letter) in letters {
            by_mailing.entry(mailing).or_default().push(*letter);
        }
        let mut forgotten = Forgotten::default();
        let mut conn = self.conn.clone();
        for (mailing, ids) in by_mailing {
            let pattern = format!("{}tag:*", glob_escape(&self.key(mailing, "")));
            let tag_keys: Vec<String> = {
                let mut iter = self.note(conn.scan_match::<_, String>(&pattern).await)?;
                let mut keys = Vec::new();
                while let Some(key) = next_key(&mut iter).await {
                    keys.push(key);
                }
                keys
            };
            for key in tag_keys {
                let removed: u64 = self.note(conn.srem(&key, &ids).await)?;
                forgotten.segment_members += removed;
            }
            let recent = self.key(mailing, "recent");
            let entries: Vec<String> = self.note(conn.lrange(&recent, 0, -1).await)?;
            for entry in entries {
                let letter = serde_json::from_str::<serde_json::Value>(&entry)
                    .ok()
                    .and_then(|v| v.get("letter_id").and_then(serde_json::Value::as_u64));
                if letter.is_some_and(|id| ids.contains(&id)) {
                    let removed: u64 = self.note(conn.lrem(&recent, 0, &entry).await)?;
                    forgotten.recent_clicks += removed;
                }
            }
        }
        Ok(forgotten)
    }

    /// Delete every key under this prefix (tests, and resetting a prefix).
    /// The prefix is used as a SCAN pattern, so it must not contain `*?[`.
    pub async fn clear(&self) -> Result<u64, LiveError> {
        let mut conn = self.conn.clone();
        let pattern = format!("{}*", self.prefix);
        let keys: Vec<String> = {
            let mut iter = conn.scan_match::<_, String>(&pattern).await?;
            let mut keys = Vec::new();
            while let Some(item) = next_key(&mut iter).await {
                keys.push(item);
            }
            keys
        };
        if keys.is_empty() {
            return Ok(0);
        }
        let n: u64 = conn.del(&keys).await?;
        Ok(n)
    }
}

/// What [`Live::forget_letters`] took out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Forgotten {
    /// Letter ids removed from tag sets (segments).
    pub segment_members: u64,
    /// Entries removed from the latest clicks.
    pub recent_clicks: u64,
}

/// `text` with the glob characters of a `SCAN MATCH` pattern escaped.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The counter of a kind, human or bot: `opens`, `bot_opens` (key suffix
/// and stats API field).
fn counter_name(kind: EventKind, bot: bool) -> String {
    let prefix = if bot { "bot_" } else { "" };
    format!("{prefix}{}", kind.plural())
}

/// The next key of a SCAN; an error ends the scan (logged) rather than
/// retrying a broken connection forever.
async fn next_key(iter: &mut redis::AsyncIter<'_, String>) -> Option<String> {
    match iter.next_item().await? {
        Ok(item) => Some(item),
        Err(err) => {
            tracing::warn!(%err, "redis SCAN stopped");
            None
        }
    }
}

fn snapshot_from(names: &[String], values: Vec<redis::Value>) -> LiveSnapshot {
    let mut snapshot = LiveSnapshot::default();
    let mut values = values.into_iter();
    for name in names {
        let n: Option<u64> = values.next().and_then(|v| redis::from_redis_value(v).ok());
        if let Some(n) = n {
            snapshot.counters.insert(name.clone(), n);
        }
    }
    let recent: Vec<String> = values
        .next()
        .and_then(|v| redis::from_redis_value(v).ok())
        .unwrap_or_default();
    snapshot.recent_clicks = recent
        .iter()
        .filter_map(|s| serde_json::from_str(s).ok())
        .collect();
    let top: Vec<(u32, f64)> = values
        .next()
        .and_then(|v| redis::from_redis_value(v).ok())
        .unwrap_or_default();
    snapshot.top_links = top.into_iter().map(|(p, n)| (p, n as u64)).collect();
    snapshot
}
