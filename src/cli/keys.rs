//! `linktrack keys`: create, list and revoke API keys (docs/api.md).

use super::args::keys::{KeysCommand, KeysCreateArgs};
use crate::api_keys::{self, KeyRequest};
use crate::store::api_keys::{self as stored, KeyRow};
use chrono::NaiveDateTime;

pub(super) async fn run(url: &str, command: KeysCommand) -> anyhow::Result<()> {
    let pool = super::connect::pool(url).await?;
    match command {
        KeysCommand::Create(args) => create(&pool, &args).await,
        KeysCommand::List => {
            say!("name\tprefix\tscopes\tcreated\texpires\trevoked\tlast used")?;
            for key in stored::list(&pool).await? {
                say!("{}", list_line(&key))?;
            }
            Ok(())
        }
        KeysCommand::Revoke(args) => match stored::revoke(&pool, args.key.trim()).await? {
            Some(key) => say!(
                "revoked the key {} (lt_{}_…): every server refuses it within {} s",
                key.name,
                key.prefix,
                api_keys::CACHE_TTL.as_secs()
            ),
            None => anyhow::bail!(
                "no API key is named {:?} or has that prefix (`linktrack keys list` names them)",
                args.key
            ),
        },
    }
}

async fn create(pool: &sqlx::MySqlPool, args: &KeysCreateArgs) -> anyhow::Result<()> {
    let secret = args.secret.key_secret();
    let request = KeyRequest {
        name: &args.name,
        scopes: args.scope.iter().copied().collect(),
        expires_days: args.expires,
    };
    let created = api_keys::create(pool, secret.as_ref(), &request).await?;
    eprintln!(
        "created the key {} with {}; it is shown this once, keep it now:",
        created.row.name, created.row.scopes
    );
    say!("{}", created.key)
}

fn list_line(key: &KeyRow) -> String {
    format!(
        "{}\tlt_{}\t{}\t{}\t{}\t{}\t{}",
        key.name,
        key.prefix,
        key.scopes,
        time(key.created),
        key.expires.map_or("never".to_owned(), time),
        key.revoked.map_or("-".to_owned(), time),
        key.last_used.map_or("never".to_owned(), time),
    )
}

fn time(at: NaiveDateTime) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}
