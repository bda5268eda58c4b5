//! The seal keys an installation has seen (`seal_keys`, docs/token.md
//! "Rotating the secret"): a builder or server opens its key ring here, and
//! is refused, naming the fix, when its `LINKTRACK_SECRET` gives a key the
//! database does not know, when a builder's key is not the current one, or
//! when a server's ring lacks a key whose tokens are still live.
//!
//! The decision is the ring's policy ([`RingPolicy`], in `token/`), a
//! plain function of the recorded keys and the ring; [`open_ring`] reads,
//! decides and records in one transaction
//! that holds `token_format`'s row, so two first runs cannot record two
//! first keys.

pub use crate::token::{Decision, KeyRecord, KeyRefusal, Purpose, Verdict};

use super::error::StoreError;
use crate::kind::{LinkKind, TokenKind};
use crate::token::{
    CurrentSecret, NewKey, Opened, RingKeys, RingPolicy, SealRing, Token, TokenSeal,
};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use sqlx::{MySqlConnection, MySqlPool};

/// The secrets of a key ring, as the command line gives them.
#[derive(Clone, Default)]
pub struct RingSecrets {
    /// `LINKTRACK_SECRET`: the current key's secret (unset: the key of the
    /// installation's random part alone).
    pub current: Option<String>,
    /// `LINKTRACK_PREVIOUS_SECRETS` and its file: keys of earlier rotations.
    pub previous: Vec<String>,
    /// `--new-secret`: `current` is a new key; record it as the current one.
    pub new_secret: bool,
}

impl std::fmt::Debug for RingSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets.
        f.debug_struct("RingSecrets")
            .field("current", &self.current.as_ref().map(|_| "…"))
            .field("previous", &self.previous.len())
            .field("new_secret", &self.new_secret)
            .finish()
    }
}

/// A ring opened for a purpose: the keys, and what to warn about.
#[derive(Debug, Clone)]
pub struct OpenedRing {
    pub ring: SealRing,
    pub warnings: Vec<String>,
}

/// Tokens a first-seen key is checked against: the newest sealed ones
/// made before keys were recorded.
const SAMPLE: usize = 16;

/// Open `secrets`' ring for `purpose`: derive its keys from
/// `token_format`, decide ([`RingPolicy::decide`]) and record what the decision says
/// (a first or new current key; the day a build seals on). Nothing is
/// recorded when the ring is refused.
pub async fn open_ring(
    pool: &MySqlPool,
    secrets: &RingSecrets,
    purpose: Purpose,
) -> Result<OpenedRing, StoreError> {
    let mut tx = pool.begin().await?;
    match decide_and_record(&mut tx, secrets, purpose).await {
        Ok(opened) => {
            tx.commit().await?;
            Ok(opened)
        }
        Err(err) => {
            // Now, not when the connection is next used: the transaction
            // holds token_format's row, which every other ring check waits for.
            let _ = tx.rollback().await;
            Err(err)
        }
    }
}

async fn decide_and_record(
    tx: &mut MySqlConnection,
    secrets: &RingSecrets,
    purpose: Purpose,
) -> Result<OpenedRing, StoreError> {
    // Holding token_format's one row: ring checks and records take turns.
    let row: Option<(u64, Vec<u8>, u64)> = sqlx::query_as(
        "SELECT sealed_since_ms, install_key, keys_recorded_since_ms FROM token_format \
         WHERE id = 1 FOR UPDATE",
    )
    .fetch_optional(&mut *tx)
    .await?;
    let (sealed_since_ms, install_key, recorded_since_ms) =
        row.ok_or_else(|| StoreError::Corrupt {
            table: "token_format",
            detail: "its one row is missing (run `linktrack migrate`)".into(),
        })?;
    let derive = |secret: Option<&str>| TokenSeal::derive(secret, &install_key, sealed_since_ms);
    let current = derive(secrets.current.as_deref());
    let previous = secrets.previous.iter().map(|s| derive(Some(s))).collect();
    let ring = SealRing::new(current, previous);
    let fingerprints: Vec<String> = ring.keys().iter().map(TokenSeal::fingerprint).collect();
    let records = list_in(&mut *tx).await?;
    let today = Utc::now().date_naive();
    let unset = secrets.current.is_none();
    let policy = RingPolicy {
        purpose,
        secret: if unset {
            CurrentSecret::Unset
        } else {
            CurrentSecret::Given
        },
        new_key: if secrets.new_secret {
            NewKey::Allowed
        } else {
            NewKey::Refused
        },
        today,
    };
    let (current, previous) = fingerprints
        .split_first()
        .ok_or_else(|| StoreError::Refused("a seal key ring without keys".into()))?;
    let verdict = policy
        .decide(&records, RingKeys { current, previous })
        .map_err(StoreError::SealKey)?;
    match verdict.decision {
        Decision::Known => {}
        Decision::MakeCurrent { how } => make_current(&mut *tx, &fingerprints[0], how).await?,
        Decision::FirstSeen => {
            let (opened, sampled) =
                opens_stored_tokens(&mut *tx, ring.current(), recorded_since_ms).await?;
            if opened < sampled {
                return Err(StoreError::SealKey(KeyRefusal::OpensNoStoredToken {
                    unset,
                    opened,
                    sampled,
                }));
            }
            let how = if sampled == 0 { "first" } else { "adopted" };
            make_current(&mut *tx, &fingerprints[0], how).await?;
        }
    }
    if purpose == Purpose::Build {
        mark_sealed_on(&mut *tx, &fingerprints[0], today).await?;
    }
    Ok(OpenedRing {
        ring,
        warnings: verdict.warnings,
    })
}

/// Every recorded key, the current one first.
pub async fn list(pool: &MySqlPool) -> Result<Vec<KeyRecord>, StoreError> {
    let mut conn = pool.acquire().await?;
    list_in(&mut conn).await
}

type KeyRow = (
    String,
    NaiveDateTime,
    Option<NaiveDate>,
    String,
    Option<NaiveDateTime>,
);

async fn list_in(conn: &mut MySqlConnection) -> Result<Vec<KeyRecord>, StoreError> {
    let rows: Vec<KeyRow> = sqlx::query_as(
        "SELECT fingerprint, current_since, last_sealed_on, how, retired_at FROM seal_keys \
         ORDER BY current_since DESC",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(fingerprint, current_since, last_sealed_on, how, retired_at)| KeyRecord {
                fingerprint,
                current_since: current_since.and_utc(),
                last_sealed_on,
                how,
                retired_at: retired_at.map(|at| at.and_utc()),
            },
        )
        .collect())
}

/// Record `fingerprint` as the current key (new, or made current again;
/// a retired key made current is no longer retired).
async fn make_current(
    conn: &mut MySqlConnection,
    fingerprint: &str,
    how: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO seal_keys (fingerprint, current_since, how) VALUES (?, UTC_TIMESTAMP(3), ?) \
         ON DUPLICATE KEY UPDATE current_since = UTC_TIMESTAMP(3), retired_at = NULL",
    )
    .bind(fingerprint)
    .bind(how)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn mark_sealed_on(
    conn: &mut MySqlConnection,
    fingerprint: &str,
    day: NaiveDate,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE seal_keys SET last_sealed_on = GREATEST(COALESCE(last_sealed_on, ?), ?) \
         WHERE fingerprint = ?",
    )
    .bind(day)
    .bind(day)
    .bind(fingerprint)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A build that ran past midnight sealed tokens on `day` too.
pub async fn sealed_on(
    pool: &MySqlPool,
    seal: &TokenSeal,
    day: NaiveDate,
) -> Result<(), StoreError> {
    let mut conn = pool.acquire().await?;
    mark_sealed_on(&mut conn, &seal.fingerprint(), day).await
}

/// Of the newest sealed tokens stored before keys were recorded (at most
/// [`SAMPLE`]; none on an install that had no links then), how many `seal`
/// opens to their row's kind, and how many there were. A wrong key opens a
/// token to a random 3-bit kind: all of 16 match by chance once in 2^48.
async fn opens_stored_tokens(
    conn: &mut MySqlConnection,
    seal: &TokenSeal,
    recorded_since_ms: u64,
) -> Result<(usize, usize), StoreError> {
    if recorded_since_ms == 0 {
        return Ok((0, 0));
    }
    let rows: Vec<(Vec<u8>, LinkKind)> =
        sqlx::query_as("SELECT uuid, kind FROM links ORDER BY id DESC LIMIT 256")
            .fetch_all(&mut *conn)
            .await?;
    let mut sampled = 0;
    let mut opened = 0;
    for (bytes, kind) in rows {
        let Ok(token) = Token::from_bytes(&bytes) else {
            continue;
        };
        if token.unix_millis() >= recorded_since_ms {
            continue;
        }
        let Opened::Sealed(plain) = seal.open(&token) else {
            continue; // legacy: plain random bits, no key opens them
        };
        sampled += 1;
        if plain.token_kind() == Some(TokenKind::from(kind)) {
            opened += 1;
        }
        if sampled == SAMPLE {
            break;
        }
    }
    Ok((opened, sampled))
}

/// What retiring a key would give up: whether it is the current key
/// (new letters are sealed with it) and how many of its links are live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetireCost {
    pub current: bool,
    pub live_links: u64,
}

impl RetireCost {
    /// Retiring this key breaks something: it needs `--force`.
    pub fn breaks_links(&self) -> bool {
        self.current || self.live_links > 0
    }
}

/// What retiring `fingerprint` would cost with `keep_days` of links kept;
/// `None` when no such key is recorded. A key's links are the tokens
/// stamped while it was current (from its `current_since` to the next
/// key's), counted back to `keep_days` ago.
pub async fn retire_cost(
    pool: &MySqlPool,
    fingerprint: &str,
    keep_days: u32,
) -> Result<Option<RetireCost>, StoreError> {
    let records = list(pool).await?;
    let Some(at) = records.iter().position(|r| r.fingerprint == fingerprint) else {
        return Ok(None);
    };
    // Newest first: the key made current after this one ends its period;
    // the oldest key also sealed whatever came before keys were recorded.
    let from = (at + 1 < records.len()).then_some(records[at].current_since);
    let until = at.checked_sub(1).map(|newer| records[newer].current_since);
    let kept_from = Utc::now().date_naive() - chrono::Days::new(u64::from(keep_days));
    let live_links = count_links_stamped(pool, from, until, kept_from).await?;
    Ok(Some(RetireCost {
        current: at == 0,
        live_links,
    }))
}

/// Links whose token was stamped in `[from, until)` (no lower bound when
/// `from` is `None`) and inserted on or
/// after `kept_from` (the token's first 48 bits are its Unix milliseconds).
async fn count_links_stamped(
    pool: &MySqlPool,
    from: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
    kept_from: NaiveDate,
) -> Result<u64, StoreError> {
    let millis = |at: DateTime<Utc>| u64::try_from(at.timestamp_millis()).unwrap_or(0);
    let from_ms = from.map_or(0, millis);
    let until_ms = until.map_or(u64::MAX, millis);
    let first_day = from.map_or(kept_from, |f| f.date_naive().max(kept_from));
    let (count,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM links WHERE inserted >= ? \
         AND CAST(CONV(HEX(SUBSTRING(uuid, 1, 6)), 16, 10) AS UNSIGNED) >= ? \
         AND CAST(CONV(HEX(SUBSTRING(uuid, 1, 6)), 16, 10) AS UNSIGNED) < ?",
    )
    .bind(first_day)
    .bind(from_ms)
    .bind(until_ms)
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// `linktrack secrets retire`: the key's tokens are given up; servers no
/// longer need it, and builds no longer seal with it. `given_up` is the
/// count of live links the operator confirmed breaking (`--force`),
/// recorded with the key. `false` when no such key is recorded.
pub async fn retire(
    pool: &MySqlPool,
    fingerprint: &str,
    given_up: Option<u64>,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE seal_keys SET retired_at = COALESCE(retired_at, UTC_TIMESTAMP(3)), \
         retired_live_links = COALESCE(?, retired_live_links) WHERE fingerprint = ?",
    )
    .bind(given_up)
    .bind(fingerprint)
    .execute(pool)
    .await?;
    if done.rows_affected() > 0 {
        return Ok(true);
    }
    // Already retired with the same count: nothing changed, yet it exists.
    Ok(list(pool)
        .await?
        .iter()
        .any(|r| r.fingerprint == fingerprint))
}
