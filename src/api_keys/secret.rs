//! An API key's text and its keyed hash. A key is `lt_` + an 8-character
//! public prefix (hex) + `_` + 64 hex digits (256 bits from the operating
//! system's CSPRNG); the database keeps its HMAC-SHA256 under the key
//! secret ([`KeySecret`]), so a copy of the table authenticates nobody.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The text every key starts with.
pub const KEY_MARK: &str = "lt_";

/// The HMAC key of the stored hashes: `LINKTRACK_API_KEY_SECRET`, or
/// `LINKTRACK_SECRET` when that is unset (docs/api.md, "Keys").
#[derive(Clone)]
pub struct KeySecret {
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySecret(…)")
    }
}

impl KeySecret {
    /// `None` for a blank secret: keys are then unusable.
    pub fn new(secret: &str) -> Option<KeySecret> {
        let secret = secret.trim();
        if secret.is_empty() {
            return None;
        }
        // HMAC takes keys of every length: this cannot fail.
        let mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        Some(KeySecret { mac })
    }

    /// The key secret in force: `LINKTRACK_API_KEY_SECRET`, else
    /// `LINKTRACK_SECRET` (blank ones count as unset), the same rule in
    /// `serve`, `relay` and `keys` so their hashes agree (docs/api.md,
    /// "Keys and scopes").
    pub fn in_force(api_key_secret: Option<&str>, secret: Option<&str>) -> Option<KeySecret> {
        api_key_secret
            .and_then(KeySecret::new)
            .or_else(|| secret.and_then(KeySecret::new))
    }

    /// The stored hash of a key.
    pub fn hash(&self, key: &str) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(key.as_bytes());
        mac.finalize().into_bytes().into()
    }
}

/// A newly made key: its text (shown once) and public prefix.
#[derive(Clone, PartialEq, Eq)]
pub struct NewKeyText {
    pub key: String,
    pub prefix: String,
}

impl std::fmt::Debug for NewKeyText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NewKeyText({}…)", self.prefix)
    }
}

/// A new random key.
pub fn generate() -> NewKeyText {
    let prefix = hex::encode(rand::random::<[u8; 4]>());
    let secret = hex::encode(rand::random::<[u8; 32]>());
    NewKeyText {
        key: format!("{KEY_MARK}{prefix}_{secret}"),
        prefix,
    }
}

/// The public prefix of a key's text, when it has a key's shape.
pub fn prefix_of(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(KEY_MARK)?;
    let (prefix, secret) = rest.split_once('_')?;
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(prefix, 8) && hex(secret, 64)).then_some(prefix)
}

/// Whether a name could be read as a key's prefix (`keys revoke` takes
/// either): such names are refused.
pub(super) fn looks_like_prefix(name: &str) -> bool {
    name.len() == 8 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_have_their_prefix_and_are_stored_keyed() {
        let (a, b) = (generate(), generate());
        assert_ne!(a.key, b.key);
        assert_eq!(a.key.len(), 3 + 8 + 1 + 64);
        assert_eq!(prefix_of(&a.key), Some(a.prefix.as_str()));
        let one = KeySecret::new("one-secret-0123456789").unwrap();
        let two = KeySecret::new("two-secret-0123456789").unwrap();
        assert_eq!(one.hash(&a.key), one.hash(&a.key));
        assert_ne!(one.hash(&a.key), two.hash(&a.key));
        assert_ne!(one.hash(&a.key), one.hash(&b.key));
        assert!(!hex::encode(one.hash(&a.key)).contains(&a.key[12..]));
        assert!(KeySecret::new("  ").is_none());
    }

    #[test]
    fn only_well_shaped_texts_have_a_prefix() {
        assert_eq!(prefix_of("a-long-api-token-0123456789"), None);
        assert_eq!(prefix_of(&format!("lt_0123abcd_{}", "f".repeat(63))), None);
        assert_eq!(
            prefix_of(&format!("lt_0123abcd_{}", "f".repeat(64))),
            Some("0123abcd")
        );
        assert!(looks_like_prefix("0123abcd"));
        assert!(!looks_like_prefix("bars-stats"));
    }
}
