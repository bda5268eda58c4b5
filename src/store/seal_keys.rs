//! The seal keys an installation has seen (`seal_keys`, docs/token.md
//! "Rotating the secret"): a builder or server opens its key ring here, and
//! is refused, naming the fix, when its `LINKTRACK_SECRET` gives a key the
//! database does not know, when a builder's key is not the current one, or
//! when a server's ring lacks a key whose tokens are still live.
//!
//! The decision is [`decide`], a plain function of the recorded keys and
//! the ring; [`open_ring`] reads, decides and records in one transaction
//! that holds `token_format`'s row, so two first runs cannot record two
//! first keys.

pub use super::key_refusal::KeyRefusal;

use super::error::StoreError;
use crate::kind::{LinkKind, TokenKind};
use crate::token::{Opened, SealRing, Token, TokenSeal};
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

/// Who opens the ring, which decides what it must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `build`: seals with the current key, which must be the database's
    /// current key.
    Build,
    /// `serve`: opens tokens; the ring must hold every key whose tokens
    /// live (sealed within `keep_days`) and the current key.
    Serve { keep_days: u32 },
    /// `secrets rotate`: the given key becomes the current one; the ring
    /// must hold the keys whose tokens live, as `serve` will need them.
    Rotate { keep_days: u32 },
}

/// One recorded key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub fingerprint: String,
    pub current_since: DateTime<Utc>,
    pub last_sealed_on: Option<NaiveDate>,
    pub how: String,
    pub retired_at: Option<DateTime<Utc>>,
}

/// What [`decide`] found to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The ring is fine as recorded.
    Known,
    /// Record the current key (`how`) as the current one: new, or made
    /// current again.
    MakeCurrent { how: &'static str },
    /// Nothing is recorded yet: check the key against the stored tokens
    /// (none: record it as the first).
    FirstSeen,
}

/// A ring's decision: what to do, and what to warn about (keys the
/// server lacks whose tokens are past retention; ring keys the database
/// has never seen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    pub warnings: Vec<String>,
}

/// Decide about a ring of fingerprints (`ring[0]` the current key's) for
/// `purpose`, against the `records` of the database, on `today`.
pub fn decide(
    records: &[KeyRecord],
    ring: &[String],
    unset: bool,
    new_secret: bool,
    purpose: Purpose,
    today: NaiveDate,
) -> Result<Verdict, KeyRefusal> {
    let mut warnings = Vec::new();
    let Some(newest) = records.iter().max_by_key(|r| r.current_since) else {
        let decision = if new_secret {
            Decision::MakeCurrent { how: "new-secret" }
        } else {
            Decision::FirstSeen
        };
        return Ok(Verdict { decision, warnings });
    };
    let ours = &ring[0];
    let known = records.iter().find(|r| &r.fingerprint == ours);
    let since = newest.current_since.date_naive();
    let decision = match (known, purpose) {
        (_, Purpose::Rotate { .. }) if &newest.fingerprint == ours => {
            return Err(KeyRefusal::AlreadyCurrent {
                fingerprint: ours.clone(),
            })
        }
        (_, Purpose::Rotate { .. }) => Decision::MakeCurrent { how: "rotate" },
        (None, _) if new_secret => Decision::MakeCurrent { how: "new-secret" },
        (None, _) => {
            return Err(KeyRefusal::Unknown {
                fingerprint: ours.clone(),
                unset,
                current: newest.fingerprint.clone(),
                since,
            })
        }
        (Some(record), Purpose::Build) if record.fingerprint != newest.fingerprint => {
            if !new_secret {
                return Err(KeyRefusal::NotCurrent {
                    fingerprint: ours.clone(),
                    unset,
                    current: newest.fingerprint.clone(),
                    since,
                });
            }
            Decision::MakeCurrent { how: "new-secret" }
        }
        (Some(record), Purpose::Build) if record.retired_at.is_some() => {
            if !new_secret {
                return Err(KeyRefusal::Retired {
                    fingerprint: ours.clone(),
                });
            }
            Decision::MakeCurrent { how: "new-secret" }
        }
        (Some(_), _) => Decision::Known,
    };
    if let Purpose::Serve { keep_days } | Purpose::Rotate { keep_days } = purpose {
        let becomes_current = matches!(decision, Decision::MakeCurrent { .. });
        for record in records.iter().filter(|r| r.retired_at.is_none()) {
            if ring.contains(&record.fingerprint) {
                continue;
            }
            let live_until = record
                .last_sealed_on
                .and_then(|day| day.checked_add_days(chrono::Days::new(u64::from(keep_days))));
            let is_current = record.fingerprint == newest.fingerprint && !becomes_current;
            let live = live_until.is_some_and(|until| until >= today);
            if is_current || live {
                let why = match (is_current, record.last_sealed_on, live_until) {
                    (true, None, _) => format!(
                        "the current key since {}, which new letters are sealed with",
                        record.current_since.date_naive()
                    ),
                    (true, Some(day), _) => format!(
                        "the current key since {}, which new letters are sealed with; \
                         last sealed on {day}",
                        record.current_since.date_naive()
                    ),
                    (false, Some(day), Some(until)) => {
                        format!("sealed links until {day}, live until {until}")
                    }
                    _ => "its links are live".to_owned(),
                };
                return Err(KeyRefusal::MissingFromRing {
                    fingerprint: record.fingerprint.clone(),
                    why,
                });
            }
            if record.last_sealed_on.is_some() {
                warnings.push(format!(
                    "the seal key {} is not in the ring: its links are past --keep-days \
                     ({keep_days}), and expired ones no longer lead to their link template \
                     (docs/token.md, \"What an expired link does\")",
                    record.fingerprint
                ));
            }
        }
        for fingerprint in ring.iter().skip(1) {
            if records.iter().all(|r| &r.fingerprint != fingerprint) {
                warnings.push(format!(
                    "a key of LINKTRACK_PREVIOUS_SECRETS ({fingerprint}) is not one this \
                     database has seen; it opens nothing sealed since seal keys are recorded"
                ));
            }
        }
    }
    Ok(Verdict { decision, warnings })
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
/// `token_format`, decide ([`decide`]) and record what the decision says
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
    let verdict = decide(
        &records,
        &fingerprints,
        unset,
        secrets.new_secret,
        purpose,
        today,
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> NaiveDate {
        text.parse().unwrap()
    }

    fn record(fingerprint: &str, since: &str, sealed: Option<&str>) -> KeyRecord {
        KeyRecord {
            fingerprint: fingerprint.into(),
            current_since: day(since).and_hms_opt(12, 0, 0).unwrap().and_utc(),
            last_sealed_on: sealed.map(day),
            how: "first".into(),
            retired_at: None,
        }
    }

    fn ring(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| (*k).to_owned()).collect()
    }

    const TODAY: &str = "2026-12-02";
    const SERVE: Purpose = Purpose::Serve { keep_days: 90 };

    fn run(
        records: &[KeyRecord],
        keys: &[&str],
        new_secret: bool,
        purpose: Purpose,
    ) -> Result<Verdict, KeyRefusal> {
        decide(records, &ring(keys), false, new_secret, purpose, day(TODAY))
    }

    #[test]
    fn a_first_key_is_checked_against_the_stored_tokens() {
        let verdict = run(&[], &["aa"], false, Purpose::Build).unwrap();
        assert_eq!(verdict.decision, Decision::FirstSeen);
        let verdict = run(&[], &["aa"], true, SERVE).unwrap();
        assert_eq!(
            verdict.decision,
            Decision::MakeCurrent { how: "new-secret" }
        );
    }

    #[test]
    fn an_unknown_key_is_refused_unless_it_is_new() {
        let records = [record("aa", "2026-11-01", Some("2026-12-01"))];
        for purpose in [Purpose::Build, SERVE] {
            let err = run(&records, &["bb"], false, purpose).unwrap_err();
            assert!(matches!(err, KeyRefusal::Unknown { .. }), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("bb") && text.contains("current key is aa"),
                "{text}"
            );
            assert!(text.contains("linktrack secrets rotate"), "{text}");
        }
        let verdict = run(&records, &["bb"], true, Purpose::Build).unwrap();
        assert_eq!(
            verdict.decision,
            Decision::MakeCurrent { how: "new-secret" }
        );
        assert_eq!(
            run(&records, &["aa"], false, Purpose::Build)
                .unwrap()
                .decision,
            Decision::Known
        );
    }

    #[test]
    fn a_builder_with_the_replaced_key_is_refused() {
        let records = [
            record("aa", "2026-11-01", Some("2026-12-01")),
            record("bb", "2026-12-01", None),
        ];
        let err = run(&records, &["aa"], false, Purpose::Build).unwrap_err();
        assert!(matches!(err, KeyRefusal::NotCurrent { .. }), "{err}");
        assert!(
            err.to_string().contains("key bb replaced on 2026-12-01"),
            "{err}"
        );
        // A server may run with it, as long as its ring holds the current key.
        assert_eq!(
            run(&records, &["aa", "bb"], false, SERVE).unwrap().decision,
            Decision::Known
        );
        let err = run(&records, &["aa"], false, SERVE).unwrap_err();
        assert!(
            err.to_string()
                .contains("bb (the current key since 2026-12-01"),
            "{err}"
        );
    }

    #[test]
    fn a_server_needs_every_key_whose_links_live() {
        let records = [
            record("old", "2026-01-01", Some("2026-08-01")),
            record("aa", "2026-08-01", Some("2026-12-01")),
            record("bb", "2026-12-01", Some("2026-12-02")),
        ];
        // aa sealed until 2026-12-01: live until 2027-03-01.
        let err = run(&records, &["bb"], false, SERVE).unwrap_err();
        assert_eq!(
            err,
            KeyRefusal::MissingFromRing {
                fingerprint: "aa".into(),
                why: "sealed links until 2026-12-01, live until 2027-03-01".into()
            }
        );
        assert!(
            err.to_string().contains("linktrack secrets retire aa"),
            "{err}"
        );
        // `old` is past retention: a warning, not a refusal.
        let verdict = run(&records, &["bb", "aa"], false, SERVE).unwrap();
        assert_eq!(verdict.decision, Decision::Known);
        assert_eq!(verdict.warnings.len(), 1, "{:?}", verdict.warnings);
        assert!(verdict.warnings[0].contains("old"));
        // A retired key is not needed.
        let mut retired = records.clone();
        retired[1].retired_at = Some(Utc::now());
        assert!(run(&retired, &["bb"], false, SERVE).is_ok());
    }

    #[test]
    fn rotate_needs_the_live_keys_and_a_new_one() {
        let records = [record("aa", "2026-11-01", Some("2026-12-01"))];
        let rotate = Purpose::Rotate { keep_days: 90 };
        let err = run(&records, &["aa"], false, rotate).unwrap_err();
        assert!(matches!(err, KeyRefusal::AlreadyCurrent { .. }), "{err}");
        let err = run(&records, &["bb"], false, rotate).unwrap_err();
        assert!(matches!(err, KeyRefusal::MissingFromRing { .. }), "{err}");
        let verdict = run(&records, &["bb", "aa"], false, rotate).unwrap();
        assert_eq!(verdict.decision, Decision::MakeCurrent { how: "rotate" });
        // A ring key the database never saw is said.
        let verdict = run(&records, &["bb", "aa", "cc"], false, rotate).unwrap();
        assert!(
            verdict.warnings.iter().any(|w| w.contains("(cc)")),
            "{:?}",
            verdict.warnings
        );
    }
}
