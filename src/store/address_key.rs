//! The installation's address key (`privacy_key`, made by `migrate`): the
//! key every keyed hash of an address is made with. Read by the address
//! lists and by `privacy`, so it lives in neither.

use super::error::StoreError;
use crate::address::AddressKey;
use sqlx::MySqlPool;

/// The installation's address key (`privacy_key`, made by `migrate`).
pub async fn load_key(pool: &MySqlPool) -> Result<AddressKey, StoreError> {
    let key: Option<Vec<u8>> = sqlx::query_scalar("SELECT hmac_key FROM privacy_key WHERE id = 1")
        .fetch_optional(pool)
        .await?;
    match key {
        Some(key) if key.len() == 32 => Ok(AddressKey::new(&key)),
        Some(key) => Err(StoreError::Corrupt {
            table: "privacy_key",
            detail: format!("the key is {} bytes, not 32", key.len()),
        }),
        None => Err(StoreError::Corrupt {
            table: "privacy_key",
            detail: "no key: run `linktrack migrate`".into(),
        }),
    }
}
