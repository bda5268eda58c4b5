//! The seal key's flags (`build`, `serve`, `secrets`), `linktrack
//! secrets` (docs/token.md, "Rotating the secret"), and the checks of
//! secret settings (`build`, `serve`, `secrets rotate`).

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// `LINKTRACK_SECRET`, and whether it is a new key.
#[derive(Debug, Clone, Args)]
pub struct SecretArgs {
    /// The secret of the key that seals tokens (with the database's own
    /// random key; docs/token.md), and, for `serve`, signs dashboard
    /// logins. The database records each key's fingerprint: a key it does
    /// not know is refused, naming the fix, unless --new-secret says it is
    /// new. Unset is a key too (the database's random key alone).
    #[arg(
        long,
        env = "LINKTRACK_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub secret: Option<String>,

    /// LINKTRACK_SECRET is a new key: record it as the current one (as
    /// `linktrack secrets rotate` does) instead of refusing it. Keep the
    /// old secret in LINKTRACK_PREVIOUS_SECRETS of every server.
    #[arg(long)]
    pub new_secret: bool,
}

/// The key ring of a server: the current secret and the previous ones.
#[derive(Debug, Clone, Args)]
pub struct RingArgs {
    #[command(flatten)]
    pub current: SecretArgs,

    /// Secrets of earlier keys, separated by commas or new lines: tokens
    /// sealed with any of them still open (their letters keep working).
    /// A server refuses to start without a key whose links are still live.
    #[arg(
        long,
        env = "LINKTRACK_PREVIOUS_SECRETS",
        hide_env_values = true,
        value_name = "SECRET,SECRET,…"
    )]
    pub previous_secrets: Option<String>,

    /// A file of earlier keys' secrets, one per line (blank lines and
    /// `#` comments skipped); read with LINKTRACK_PREVIOUS_SECRETS.
    #[arg(long, env = "LINKTRACK_PREVIOUS_SECRETS_FILE", value_name = "FILE")]
    pub previous_secrets_file: Option<PathBuf>,
}

/// Why the previous secrets could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot read the previous secrets: {source}")]
pub struct PreviousSecretsError {
    path: String,
    source: std::io::Error,
}

impl RingArgs {
    /// The ring's secrets as the store takes them.
    pub fn secrets(&self) -> Result<crate::store::seal_keys::RingSecrets, PreviousSecretsError> {
        let mut previous = split_secrets(self.previous_secrets.as_deref().unwrap_or_default());
        if let Some(path) = &self.previous_secrets_file {
            let text = std::fs::read_to_string(path).map_err(|source| PreviousSecretsError {
                path: path.display().to_string(),
                source,
            })?;
            let lines = text
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty() && !line.starts_with('#'));
            previous.extend(lines.map(str::to_owned));
        }
        Ok(crate::store::seal_keys::RingSecrets {
            current: self.current.secret.clone(),
            previous,
            new_secret: self.current.new_secret,
        })
    }
}

/// `a,b` or one per line; blanks around each are not part of it.
fn split_secrets(text: &str) -> Vec<String> {
    text.split([',', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Every seal key the database has seen: fingerprint, since when it was
    /// current, the last day it sealed, retired or not, and whether this
    /// environment's ring holds it.
    List(SecretsListArgs),
    /// Make LINKTRACK_SECRET the current key: new letters are sealed with
    /// it. The keys whose links are still live must be in
    /// LINKTRACK_PREVIOUS_SECRETS (checked): servers need them. Then
    /// restart the servers with the new ring, then the builders.
    Rotate(SecretsRotateArgs),
    /// Give up the links of a key whose secret is lost: servers no longer
    /// need it (its links answer 404, or 410 past --keep-days). Refused for
    /// the current key and for a key that sealed links within --keep-days,
    /// unless --force with the count of links that break.
    Retire(SecretsRetireArgs),
    /// Print a new random secret (256 bits, hex).
    New,
}

#[derive(Debug, Clone, Args)]
pub struct SecretsListArgs {
    #[command(flatten)]
    pub ring: RingArgs,
}

#[derive(Debug, Clone, Args)]
pub struct SecretsRotateArgs {
    #[command(flatten)]
    pub ring: RingArgs,

    /// Days of links kept (as `serve --keep-days`): a key that sealed
    /// within them must be in the ring.
    #[arg(long, env = "LINKTRACK_KEEP_DAYS", value_name = "DAYS",
          default_value_t = crate::store::partitions::DEFAULT_KEEP_DAYS)]
    pub keep_days: u32,
}

#[derive(Debug, Clone, Args)]
pub struct SecretsRetireArgs {
    /// The key's fingerprint (16 hex digits, as `secrets list` and the
    /// refusals name it).
    #[arg(value_name = "FINGERPRINT")]
    pub fingerprint: String,

    /// Days of links kept (as `serve --keep-days`): a key that sealed a
    /// link within them is refused unless --force.
    #[arg(long, env = "LINKTRACK_KEEP_DAYS", value_name = "DAYS",
          default_value_t = crate::store::partitions::DEFAULT_KEEP_DAYS)]
    pub keep_days: u32,

    /// Retire the key although it is the current key or its links are
    /// live (its secret is truly lost): those links then answer 404.
    /// Needs --i-understand-links-break with the count the refusal names.
    #[arg(long, requires = "i_understand_links_break")]
    pub force: bool,

    /// With --force: the number of live links the refusal named, typed
    /// back; a different number is refused.
    #[arg(long, value_name = "N", requires = "force")]
    pub i_understand_links_break: Option<u64>,
}

/// Shortest `LINKTRACK_SECRET` / `LINKTRACK_API_TOKEN` the server accepts:
/// `openssl rand -hex 32` (the documented one-liner) gives 64 characters.
pub const MIN_SECRET_LEN: usize = 16;

/// Values people leave in a config file meaning "fill this in".
const PLACEHOLDERS: &[&str] = &[
    "change-me",
    "changeme",
    "change_me",
    "changeit",
    "replace-me",
    "replaceme",
    "secret",
    "password",
    "token",
    "example",
    "xxx",
    "todo",
    "test",
];

/// A secret setting the server refuses to start with.
#[derive(Debug, thiserror::Error)]
pub enum WeakSecret {
    #[error("{name} is a placeholder ({value:?}): generate one with `openssl rand -hex 32` (docs/deploy.md, \"Secrets\")")]
    Placeholder { name: &'static str, value: String },
    #[error("{name} has {len} characters, fewer than {MIN_SECRET_LEN}: generate one with `openssl rand -hex 32` (docs/deploy.md, \"Secrets\")")]
    TooShort { name: &'static str, len: usize },
    #[error("{name} is only white space: set a real one (`openssl rand -hex 32`) or leave it unset to turn its feature off")]
    Blank { name: &'static str },
    #[error("{name} has white space at its start or end: remove it (nobody could send it back: HTTP headers and forms drop it, so nothing would ever authenticate)")]
    Padded { name: &'static str },
}

/// Check one secret setting (`name` is its environment variable, for the
/// message). Unset is fine (the feature it enables is off); a placeholder
/// such as `change-me`, or anything shorter than [`MIN_SECRET_LEN`], is not:
/// a server started with one would sign cookies anybody can forge. White
/// space around it, or nothing but white space, is refused too: accepted,
/// such a token could never be presented.
pub fn check_secret(name: &'static str, value: Option<&str>) -> Result<(), WeakSecret> {
    let Some(value) = value else {
        return Ok(());
    };
    check_unpadded(name, Some(value))?;
    let lowered = value.trim().to_ascii_lowercase();
    let is_placeholder = PLACEHOLDERS.contains(&lowered.as_str())
        || (lowered.starts_with('<') && lowered.ends_with('>'))
        || lowered.contains("change-me")
        || lowered.contains("changeme");
    if is_placeholder {
        return Err(WeakSecret::Placeholder {
            name,
            value: value.to_owned(),
        });
    }
    if value.chars().count() < MIN_SECRET_LEN {
        return Err(WeakSecret::TooShort {
            name,
            len: value.chars().count(),
        });
    }
    Ok(())
}

/// Refuse a secret that is only white space or has white space around it
/// (a `KEY='  value  '` line in an environment file): the builder checks its
/// `LINKTRACK_SECRET` with this too, so it never seals with a key the
/// server refuses.
pub fn check_unpadded(name: &'static str, value: Option<&str>) -> Result<(), WeakSecret> {
    let Some(value) = value else {
        return Ok(());
    };
    if !value.is_empty() && value.trim().is_empty() {
        return Err(WeakSecret::Blank { name });
    }
    if value.trim() != value {
        return Err(WeakSecret::Padded { name });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previous_secrets_come_from_the_list_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("previous");
        std::fs::write(
            &file,
            "# rotated 2026-11\nfile-secret-one\n\n  file-secret-two  \n",
        )
        .unwrap();
        let args = RingArgs {
            current: SecretArgs {
                secret: Some("now".into()),
                new_secret: false,
            },
            previous_secrets: Some(" a-secret , b-secret\nc-secret,".into()),
            previous_secrets_file: Some(file),
        };
        let secrets = args.secrets().unwrap();
        assert_eq!(
            secrets.previous,
            [
                "a-secret",
                "b-secret",
                "c-secret",
                "file-secret-one",
                "file-secret-two"
            ]
        );
        assert_eq!(secrets.current.as_deref(), Some("now"));
    }
}
