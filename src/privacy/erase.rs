//! `linktrack erase`: an address out of every copy (docs/privacy.md).
//!
//! 1. The erasure is recorded (`erasures`, as the address's keyed hash)
//!    and logged for the servers.
//! 2. Every server seen in the last minute ([`ALIVE_WITHIN`]) is
//!    waited for, up to `wait`, until it acknowledges the erasure: from
//!    then on it stores every event, journaled before or after, without
//!    the address, and its link cache holds none of the address's links.
//! 3. Redis (when configured) loses the address's letters: out of every
//!    segment set and the latest clicks, and with them the letters earlier
//!    erases without Redis left pending. Redis unavailable stops here,
//!    before the database is changed, so the command can be run again.
//!    Without Redis configured the letters are kept as pending work
//!    (`erase_live_pending`: which letters, no address), since once the
//!    tables are scrubbed nothing else could find them again; the next
//!    erase that reaches Redis finishes it.
//! 4. The database is scrubbed ([`crate::store::erase::scrub`]).
//!
//! Every step changes only what still names the person: a second run
//! changes nothing and says so.

use super::settings::ALIVE_WITHIN;
use crate::address;
use crate::live::{Forgotten, Live, LiveError};
use crate::store::erase::{
    keep_for_live, letters_of, pending_for_live, scrub, taken_out_of_live, EraseReport, Letters,
};
use crate::store::privacy::{self as store, ServerAck};
use crate::store::StoreError;
use sqlx::MySqlPool;
use std::time::{Duration, Instant};

/// Why an erase stopped.
#[derive(Debug, thiserror::Error)]
pub enum EraseError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "Redis did not answer ({0}): nothing was changed in the database; \
         run erase again once Redis is back (or without REDIS_URL to leave Redis as it is)"
    )]
    Redis(#[source] LiveError),
}

/// What an erase did to the Redis live layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveOutcome {
    /// Taken out, with `earlier` letters that earlier erases left pending.
    Forgotten {
        forgotten: Forgotten,
        earlier: usize,
    },
    /// No live layer configured: `pending` letters (this address's and
    /// those earlier erases left) wait for an erase with Redis.
    Pending { pending: usize },
}

/// What `erase` did, everywhere.
#[derive(Debug)]
pub struct ErasureReport {
    /// The address was erased before (this run repeats it).
    pub repeated: bool,
    /// Servers that took the erasure in before the tables were scrubbed.
    pub confirmed: Vec<String>,
    /// Servers seen in the last minute that did not within the wait.
    pub unconfirmed: Vec<String>,
    /// What Redis lost, or what waits for it.
    pub redis: LiveOutcome,
    pub tables: EraseReport,
}

impl std::fmt::Display for ErasureReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "erase: erasures: {}",
            if self.repeated {
                "erased before; every copy checked again"
            } else {
                "recorded as the address's keyed hash"
            }
        )?;
        write!(f, "erase: servers: {} confirmed", self.confirmed.len())?;
        if !self.confirmed.is_empty() {
            write!(f, " ({})", self.confirmed.join(", "))?;
        }
        writeln!(f)?;
        for server in &self.unconfirmed {
            writeln!(
                f,
                "erase: servers: {server} did not confirm: it drops the address from what it \
                 stores as soon as it reads the change log; run erase again once it has, to \
                 scrub what it may have stored meanwhile"
            )?;
        }
        match self.redis {
            LiveOutcome::Forgotten { forgotten, earlier } => {
                write!(
                    f,
                    "erase: redis: {} letter ids removed from segment sets, {} latest-click entries removed",
                    forgotten.segment_members, forgotten.recent_clicks
                )?;
                if earlier > 0 {
                    write!(
                        f,
                        " (with {} pending from earlier erases without Redis)",
                        letters(earlier)
                    )?;
                }
                writeln!(f)?;
            }
            LiveOutcome::Pending { pending: 0 } => writeln!(
                f,
                "erase: redis: no live layer configured (REDIS_URL); nothing pending"
            )?,
            LiveOutcome::Pending { pending } => writeln!(
                f,
                "erase: redis: no live layer configured (REDIS_URL): {} kept as pending \
                 work; if the servers use Redis, run erase again with their REDIS_URL and \
                 LINKTRACK_REDIS_PREFIX to take them out of it",
                letters(pending)
            )?,
        }
        write!(f, "{}", self.tables)
    }
}

/// "1 letter", "2 letters".
fn letters(n: usize) -> String {
    match n {
        1 => "1 letter".to_owned(),
        n => format!("{n} letters"),
    }
}

/// Erase `email` (normalised here: both spellings of an IDN domain are
/// the same address) from every copy; see the module docs.
pub async fn erase(
    pool: &MySqlPool,
    live: Option<&Live>,
    email: &str,
    wait: Duration,
) -> Result<ErasureReport, EraseError> {
    let key = store::load_key(pool).await?;
    let email = address::normalize(email);
    let erasure = store::record_erasure(pool, &key.digest(&email)).await?;
    let (confirmed, unconfirmed) = wait_for_servers(pool, erasure.change_id, wait).await?;
    let letters = letters_of(pool, &email).await?;
    let redis = match live {
        Some(live) => forget_in_live(pool, live, &letters).await?,
        None => {
            keep_for_live(pool, &letters).await?;
            LiveOutcome::Pending {
                pending: pending_for_live(pool).await?.len(),
            }
        }
    };
    let tables = scrub(pool, &key, &email, &letters).await?;
    Ok(ErasureReport {
        repeated: erasure.repeated,
        confirmed,
        unconfirmed,
        redis,
        tables,
    })
}

/// Take `letters`, and those earlier erases left pending, out of `live`;
/// the pending ones are done once Redis has answered.
async fn forget_in_live(
    pool: &MySqlPool,
    live: &Live,
    letters: &Letters,
) -> Result<LiveOutcome, EraseError> {
    let earlier = pending_for_live(pool).await?;
    let mut all: Letters = letters.iter().chain(&earlier).cloned().collect();
    all.sort();
    all.dedup();
    let forgotten = live.forget_letters(&all).await.map_err(EraseError::Redis)?;
    taken_out_of_live(pool, &earlier).await?;
    Ok(LiveOutcome::Forgotten {
        forgotten,
        earlier: earlier.len(),
    })
}

/// How often the acknowledgements are read while waiting.
const POLL: Duration = Duration::from_millis(200);

/// Wait until every live server has acknowledged `change_id`, or `wait`
/// passed: (confirmed, unconfirmed) server names.
async fn wait_for_servers(
    pool: &MySqlPool,
    change_id: u64,
    wait: Duration,
) -> Result<(Vec<String>, Vec<String>), StoreError> {
    let deadline = Instant::now() + wait;
    loop {
        let servers = store::live_servers(pool, ALIVE_WITHIN).await?;
        let (confirmed, unconfirmed): (Vec<ServerAck>, Vec<ServerAck>) = servers
            .into_iter()
            .partition(|server| server.applied_id >= change_id);
        if unconfirmed.is_empty() || Instant::now() >= deadline {
            let names = |acks: Vec<ServerAck>| acks.into_iter().map(|a| a.server).collect();
            return Ok((names(confirmed), names(unconfirmed)));
        }
        tokio::time::sleep(POLL).await;
    }
}
