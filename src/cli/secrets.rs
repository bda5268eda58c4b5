//! `linktrack secrets`: the seal keys the database knows, rotating to a
//! new LINKTRACK_SECRET, retiring a lost one (docs/token.md, "Rotating the
//! secret").

use super::args::secrets::{SecretsCommand, SecretsListArgs, SecretsRotateArgs};
use crate::store::{self, seal_keys};
use crate::token::TokenSeal;

pub(super) async fn run(url: &str, command: SecretsCommand) -> anyhow::Result<()> {
    match command {
        SecretsCommand::List(args) => list(url, &args).await,
        SecretsCommand::Rotate(args) => rotate(url, &args).await,
        SecretsCommand::Retire(args) => {
            let pool = super::connect::pool(url).await?;
            let fingerprint = args.fingerprint.trim().to_ascii_lowercase();
            if !seal_keys::retire(&pool, &fingerprint).await? {
                anyhow::bail!(
                    "no seal key {fingerprint} is recorded (`linktrack secrets list` names them)"
                );
            }
            say!("retired the seal key {fingerprint}: servers no longer need it; its links answer 404 (410 past --keep-days)")
        }
        SecretsCommand::New => {
            use rand::Rng;
            let mut bytes = [0u8; 32];
            rand::rng().fill_bytes(&mut bytes);
            say!("{}", hex::encode(bytes))
        }
    }
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
