//! [`KeyVerifier`]: an API key or `LINKTRACK_API_TOKEN` in, the caller and
//! its scopes out. The one check every door uses (the HTTP API's extractor,
//! the SMTP relay's AUTH). Lookups are cached for [`CACHE_TTL`] per
//! server, so a revoked key is refused everywhere within that time, and
//! a key's expiry is checked on every use.

use super::scope::Scopes;
use super::secret::{prefix_of, KeySecret};
use crate::store::{api_keys, StoreError};
use chrono::{NaiveDateTime, Utc};
use sqlx::MySqlPool;
use std::sync::Arc;
use std::time::Duration;

/// How long a server trusts what it read of a key: a revocation reaches
/// every server within this time.
pub const CACHE_TTL: Duration = Duration::from_secs(5);

/// Keys held in each server's cache (found and unknown ones alike).
const CACHE_ENTRIES: u64 = 10_000;

/// Who is calling, as a verified credential says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The key's name; `LINKTRACK_API_TOKEN` for the shared token.
    pub name: String,
    /// The key's public prefix; `None` for the shared token.
    pub prefix: Option<String>,
    pub scopes: Scopes,
}

impl Caller {
    /// The shared token's (and a dashboard login's) caller: every scope.
    pub fn all_scopes(name: &str) -> Caller {
        Caller {
            name: name.to_owned(),
            prefix: None,
            scopes: Scopes::all(),
        }
    }
}

/// What a server read of one key, kept for [`CACHE_TTL`].
#[derive(Debug, Clone)]
struct Known {
    caller: Caller,
    expires: Option<NaiveDateTime>,
}

/// Checks presented keys. Cheap to clone (one cache per server).
#[derive(Clone)]
pub struct KeyVerifier {
    pool: MySqlPool,
    secret: Option<KeySecret>,
    token: Option<Arc<str>>,
    cache: moka::future::Cache<[u8; 32], Option<Known>>,
}

impl std::fmt::Debug for KeyVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyVerifier")
            .field("keys", &self.secret.is_some())
            .field("token", &self.token.is_some())
            .finish()
    }
}

impl KeyVerifier {
    /// `secret` unset: only the shared token (`token`) is accepted.
    pub fn new(pool: MySqlPool, secret: Option<KeySecret>, token: Option<&str>) -> KeyVerifier {
        KeyVerifier {
            pool,
            secret,
            token: token
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(Arc::from),
            cache: moka::future::Cache::builder()
                .max_capacity(CACHE_ENTRIES)
                .time_to_live(CACHE_TTL)
                .build(),
        }
    }

    /// Whether any credential can be accepted (a token or the key secret).
    pub fn enabled(&self) -> bool {
        self.token.is_some() || self.secret.is_some()
    }

    /// The caller `presented` authenticates, or `None` for a wrong,
    /// revoked or expired key. Errors are the database's.
    pub async fn verify(&self, presented: &str) -> Result<Option<Caller>, StoreError> {
        let presented = presented.trim();
        if let Some(token) = self.token.as_deref() {
            if constant_time_eq(presented.as_bytes(), token.as_bytes()) {
                return Ok(Some(Caller::all_scopes("LINKTRACK_API_TOKEN")));
            }
        }
        let (Some(secret), Some(_)) = (&self.secret, prefix_of(presented)) else {
            return Ok(None);
        };
        let hash = secret.hash(presented);
        let known = match self.cache.get(&hash).await {
            Some(known) => known,
            None => {
                let known = self.look_up(&hash).await?;
                self.cache.insert(hash, known.clone()).await;
                known
            }
        };
        let now = Utc::now().naive_utc();
        Ok(known
            .filter(|k| k.expires.is_none_or(|at| at > now))
            .map(|k| k.caller))
    }

    async fn look_up(&self, hash: &[u8; 32]) -> Result<Option<Known>, StoreError> {
        let Some(row) = api_keys::find_live(&self.pool, hash).await? else {
            return Ok(None);
        };
        let scopes = Scopes::parse_list(&row.scopes).map_err(|err| StoreError::Corrupt {
            table: "api_keys",
            detail: format!("key {}: {err}", row.prefix),
        })?;
        Ok(Some(Known {
            caller: Caller {
                name: row.name,
                prefix: Some(row.prefix),
                scopes,
            },
            expires: row.expires,
        }))
    }
}

/// Compares without an early exit, so the time taken does not tell how
/// many leading bytes matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}
