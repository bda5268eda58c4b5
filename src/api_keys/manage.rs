//! Making a key ([`create`]): the checks of its name and scopes, the text
//! shown once, the row stored. `linktrack keys create` and
//! `POST /api/keys` both call it.

use super::scope::Scopes;
use super::secret::{generate, looks_like_prefix, KeySecret};
use crate::store::api_keys::{self, Created, KeyRow, NewKey};
use crate::store::StoreError;
use sqlx::MySqlPool;

/// Longest key name (the column's width).
const MAX_NAME_CHARS: usize = 100;

/// Longest expiry, in days (about 100 years).
pub const MAX_EXPIRES_DAYS: u32 = 36_500;

/// What a new key is to be.
#[derive(Debug, Clone)]
pub struct KeyRequest<'a> {
    pub name: &'a str,
    pub scopes: Scopes,
    /// Days until it expires; `None`: never.
    pub expires_days: Option<u32>,
}

/// A key just made: its text, shown this once, and its row.
#[derive(Debug, Clone)]
pub struct CreatedKey {
    pub key: String,
    pub row: KeyRow,
}

/// Why no key was made.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("key name {0:?}: {1}")]
    BadName(String, &'static str),
    #[error("a key needs at least one scope")]
    NoScopes,
    #[error("expires: {0} days is not between 1 and {MAX_EXPIRES_DAYS}")]
    BadExpiry(u32),
    #[error("a key named {0:?} exists already (revoked keys keep their name)")]
    NameTaken(String),
    #[error(
        "API keys need LINKTRACK_API_KEY_SECRET (or LINKTRACK_SECRET), the key of their stored hashes, \
         the same as the servers'"
    )]
    NoSecret,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl CreateError {
    /// True when the request was at fault (not the database).
    pub fn is_bad_request(&self) -> bool {
        !matches!(self, CreateError::Store(_) | CreateError::NoSecret)
    }
}

/// Makes and stores a key; its text is in the answer and nowhere else.
pub async fn create(
    pool: &MySqlPool,
    secret: Option<&KeySecret>,
    request: &KeyRequest<'_>,
) -> Result<CreatedKey, CreateError> {
    check_name(request.name)?;
    if request.scopes.is_empty() {
        return Err(CreateError::NoScopes);
    }
    if let Some(days) = request.expires_days {
        if days == 0 || days > MAX_EXPIRES_DAYS {
            return Err(CreateError::BadExpiry(days));
        }
    }
    let secret = secret.ok_or(CreateError::NoSecret)?;
    let text = generate();
    let scopes = request.scopes.to_string();
    let new = NewKey {
        name: request.name,
        prefix: &text.prefix,
        key_hash: &secret.hash(&text.key),
        scopes: &scopes,
        expires_in_days: request.expires_days,
    };
    match api_keys::create(pool, &new).await? {
        Created::Created(row) => Ok(CreatedKey { key: text.key, row }),
        Created::NameTaken => Err(CreateError::NameTaken(request.name.to_owned())),
    }
}

fn check_name(name: &str) -> Result<(), CreateError> {
    let bad = |why| Err(CreateError::BadName(name.to_owned(), why));
    if name.trim().is_empty() {
        return bad("empty");
    }
    if name.trim() != name {
        return bad("white space around it");
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return bad("longer than 100 characters");
    }
    if name.chars().any(char::is_control) {
        return bad("a control character");
    }
    if looks_like_prefix(name) {
        return bad("8 hex digits read as a key's prefix");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_naming_the_fault() {
        assert!(check_name("bars-stats").is_ok());
        for (name, why) in [
            ("", "empty"),
            (" a", "white space"),
            ("a\tb", "control"),
            ("deadbeef", "prefix"),
        ] {
            let err = check_name(name).unwrap_err().to_string();
            assert!(err.contains(why), "{name:?}: {err}");
        }
        assert!(check_name(&"x".repeat(101)).is_err());
    }
}
