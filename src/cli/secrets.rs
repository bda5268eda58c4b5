//! `linktrack secrets`: the seal keys the database knows, rotating to a
//! new LINKTRACK_SECRET, retiring a lost one (docs/token.md, "Rotating the
//! secret").

use super::args::secrets::{SecretsCommand, SecretsListArgs, SecretsRetireArgs, SecretsRotateArgs};
use crate::store::{self, seal_keys};
use crate::token::TokenSeal;

pub(super) async fn run(url: &str, command: SecretsCommand) -> anyhow::Result<()> {
    match command {
        SecretsCommand::List(args) => list(url, &args).await,
        SecretsCommand::Rotate(args) => rotate(url, &args).await,
        SecretsCommand::Retire(args) => retire(url, &args).await,
        SecretsCommand::New => {
            use rand::Rng;
            let mut bytes = [0u8; 32];
            rand::rng().fill_bytes(&mut bytes);
            say!("{}", hex::encode(bytes))
        }
    }
}

/// Why `secrets retire` refused: the key still matters, and what to do.
#[derive(Debug, thiserror::Error)]
enum RetireRefusal {
    #[error("no seal key {0} is recorded (`linktrack secrets list` names them)")]
    Unknown(String),
    #[error(
        "the seal key {fingerprint} is {what}: retiring it breaks {links} live link(s) (clicks, \
         unsubscribe links and bounce addresses answer 404). Keep its secret in \
         LINKTRACK_PREVIOUS_SECRETS instead{rotate}; if the secret is truly lost, retire it with \
         `linktrack secrets retire {fingerprint} --force --i-understand-links-break {links}`"
    )]
    BreaksLinks {
        fingerprint: String,
        what: &'static str,
        links: u64,
        rotate: &'static str,
    },
    #[error(
        "--i-understand-links-break {typed} does not match: retiring the seal key \
         {fingerprint} breaks {links} live link(s); type that number back to retire it"
    )]
    CountMismatch {
        fingerprint: String,
        typed: u64,
        links: u64,
    },
}

/// `secrets retire`: refused while the key is current or its links live,
/// unless forced with the count of links that break typed back.
async fn retire(url: &str, args: &SecretsRetireArgs) -> anyhow::Result<()> {
    let pool = super::connect::pool(url).await?;
    let fingerprint = args.fingerprint.trim().to_ascii_lowercase();
    let cost = seal_keys::retire_cost(&pool, &fingerprint, args.keep_days)
        .await?
        .ok_or_else(|| RetireRefusal::Unknown(fingerprint.clone()))?;
    let given_up = match (cost.breaks_links(), args.i_understand_links_break) {
        (false, _) => None,
        (true, None) => {
            return Err(RetireRefusal::BreaksLinks {
                fingerprint,
                what: if cost.current {
                    "the current key, which new letters are sealed with"
                } else {
                    "a key that sealed links within --keep-days"
                },
                links: cost.live_links,
                rotate: if cost.current {
                    " and rotate to a new key first (`linktrack secrets rotate`)"
                } else {
                    ""
                },
            }
            .into())
        }
        (true, Some(typed)) if typed != cost.live_links => {
            return Err(RetireRefusal::CountMismatch {
                fingerprint,
                typed,
                links: cost.live_links,
            }
            .into())
        }
        (true, Some(typed)) => Some(typed),
    };
    if let Some(links) = given_up {
        tracing::warn!(
            fingerprint,
            links,
            current = cost.current,
            "seal key retired by force: its live links now answer 404"
        );
    }
    seal_keys::retire(&pool, &fingerprint, given_up).await?;
    say!("retired the seal key {fingerprint}: servers no longer need it and builds no longer seal with it; its links answer 404 (410 past --keep-days)")
}

/// Every recorded key, and whether this environment's ring holds it.
async fn list(url: &str, args: &SecretsListArgs) -> anyhow::Result<()> {
    let pool = super::connect::pool(url).await?;
    let secrets = args.ring.secrets()?;
    let held = ring_fingerprints(&pool, &secrets).await?;
    let records = seal_keys::list(&pool).await?;
    if records.is_empty() {
        say!("no seal key recorded yet: the first `build` or `serve` records its key")?;
    }
    say!("fingerprint\tcurrent since\tlast sealed\tstate\there")?;
    for (n, record) in records.iter().enumerate() {
        let state = match (&record.retired_at, n) {
            (Some(at), _) => format!("retired {}", at.format("%Y-%m-%d")),
            (None, 0) => "current".to_owned(),
            (None, _) => "previous".to_owned(),
        };
        let here = match held.iter().position(|f| f == &record.fingerprint) {
            Some(0) => "LINKTRACK_SECRET",
            Some(_) => "LINKTRACK_PREVIOUS_SECRETS",
            None => "-",
        };
        say!(
            "{}\t{}\t{}\t{state}\t{here}",
            record.fingerprint,
            record.current_since.format("%Y-%m-%d %H:%M:%S"),
            record
                .last_sealed_on
                .map_or("never".to_owned(), |d| d.to_string()),
        )?;
    }
    Ok(())
}

/// The fingerprints of a ring's keys (current first), as `build` and
/// `serve` derive them.
async fn ring_fingerprints(
    pool: &sqlx::MySqlPool,
    secrets: &seal_keys::RingSecrets,
) -> anyhow::Result<Vec<String>> {
    let seal = store::link_templates::load_seal(pool, secrets.current.as_deref()).await?;
    let mut fingerprints = vec![seal.fingerprint()];
    for secret in &secrets.previous {
        let seal: TokenSeal = store::link_templates::load_seal(pool, Some(secret)).await?;
        fingerprints.push(seal.fingerprint());
    }
    Ok(fingerprints)
}

async fn rotate(url: &str, args: &SecretsRotateArgs) -> anyhow::Result<()> {
    super::args::secrets::check_secret("LINKTRACK_SECRET", args.ring.current.secret.as_deref())?;
    let pool = super::connect::pool(url).await?;
    let secrets = args.ring.secrets()?;
    let purpose = seal_keys::Purpose::Rotate {
        keep_days: args.keep_days,
    };
    let opened = seal_keys::open_ring(&pool, &secrets, purpose).await?;
    for warning in &opened.warnings {
        tracing::warn!("{warning}");
    }
    say!(
        "the seal key {} is now the current key: new letters are sealed with it. Restart every \
         server with this LINKTRACK_SECRET and the previous ones in LINKTRACK_PREVIOUS_SECRETS, \
         then the builders",
        opened.ring.current().fingerprint()
    )
}
