//! `linktrack keys`: the HTTP API's keys and their scopes (docs/api.md,
//! "Keys and scopes").

use crate::api_keys::Scope;
use clap::{Args, Subcommand};

/// The key of the stored hashes: the servers' must be the same.
#[derive(Debug, Clone, Args)]
pub struct KeySecretArgs {
    /// The secret API keys' stored hashes are keyed with (HMAC-SHA256),
    /// the same on every server and here. Unset: LINKTRACK_SECRET (then
    /// rotating it makes every key unusable: set this one to keep them).
    #[arg(
        long,
        env = "LINKTRACK_API_KEY_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub api_key_secret: Option<String>,

    /// The servers' LINKTRACK_SECRET, the key secret's stand-in.
    #[arg(
        long,
        env = "LINKTRACK_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub secret: Option<String>,
}

impl KeySecretArgs {
    /// The key secret in force: the dedicated one, else LINKTRACK_SECRET.
    pub fn key_secret(&self) -> Option<crate::api_keys::KeySecret> {
        crate::api_keys::KeySecret::in_force(self.api_key_secret.as_deref(), self.secret.as_deref())
    }
}

/// Who may call the API and authenticate to the relay: the all-scope
/// token, and the secret the keys' stored hashes are keyed with.
#[derive(Debug, Clone, Args)]
pub struct ApiAccessArgs {
    /// A bearer token with every scope: the API's and dashboard's, and an
    /// AUTH password of `relay`. API keys (`linktrack keys create`) work
    /// beside it. With neither this nor a key secret, the API answers 404
    /// and the relay offers no AUTH.
    #[arg(
        long,
        env = "LINKTRACK_API_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub api_token: Option<String>,

    /// The secret API keys' stored hashes are keyed with (HMAC-SHA256),
    /// the same as `linktrack keys create`'s. Unset: LINKTRACK_SECRET
    /// (docs/api.md, "Keys and scopes").
    #[arg(
        long,
        env = "LINKTRACK_API_KEY_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub api_key_secret: Option<String>,
}

impl ApiAccessArgs {
    /// Both are secrets: refused when they look like a placeholder.
    pub fn check(&self) -> Result<(), super::secrets::WeakSecret> {
        super::secrets::check_secret("LINKTRACK_API_TOKEN", self.api_token.as_deref())?;
        super::secrets::check_secret("LINKTRACK_API_KEY_SECRET", self.api_key_secret.as_deref())
    }
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make a key for an integration and print it, once: only its keyed
    /// hash is stored. Its prefix (`lt_XXXXXXXX_…`) names it in logs and
    /// `keys list`.
    Create(KeysCreateArgs),
    /// Every key: name, prefix, scopes, created, expires, revoked, last
    /// used (never the key).
    List,
    /// Refuse a key from now on (every server within seconds).
    Revoke(KeysRevokeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct KeysCreateArgs {
    /// The key's name (unique, e.g. the integration's).
    #[arg(long, value_name = "NAME")]
    pub name: String,

    /// What the key may do, comma-separated or repeated: stats:read,
    /// export:read, events:read, suppressions:read, suppressions:write,
    /// links:write, letters:write, relay:send, erase, keys:admin.
    #[arg(
        long,
        value_name = "SCOPE[,SCOPE…]",
        value_delimiter = ',',
        required = true
    )]
    pub scope: Vec<Scope>,

    /// Days until the key expires. Unset: it does not.
    #[arg(long, value_name = "DAYS")]
    pub expires: Option<u32>,

    #[command(flatten)]
    pub secret: KeySecretArgs,
}

#[derive(Debug, Clone, Args)]
pub struct KeysRevokeArgs {
    /// The key's name or its prefix (the 8 hex digits after `lt_`).
    #[arg(value_name = "NAME|PREFIX")]
    pub key: String,
}
