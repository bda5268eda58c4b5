//! The installation's token seal: its key derived from the secret and the
//! installation's key, a token sealed from a plaintext and opened back to
//! one (or found legacy, made before tokens were sealed), and the key's
//! fingerprint that names it without giving it away.

use super::feistel::Feistel;
use super::plaintext::Plaintext;
use super::uuid_v7::Token;
use chrono::{DateTime, Utc};
use std::fmt;

/// Largest 48-bit millisecond timestamp.
const MAX_MILLIS: u64 = (1 << 48) - 1;

/// What a token's 74 bits say, read with the installation's [`TokenSeal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// Made before version 2 ([`TokenSeal::sealed_since_ms`]): its bits are
    /// plain random; only its row knows its kind.
    Legacy,
    /// A version-2 token and what it seals. Its kind may still be 0 (a
    /// forged or foreign token) or one no route serves: [`Plaintext::token_kind`] says.
    Sealed(Plaintext),
}

/// The label the seal's key is derived under (docs/token.md).
const SEAL_LABEL: &[u8] = b"linktrack token seal v2";

/// The installation's token seal: the key (from `LINKTRACK_SECRET` and the
/// installation's random key in `token_format`) and the moment tokens began
/// to be sealed. The builder seals with it, the server opens with it.
#[derive(Clone)]
pub struct TokenSeal {
    feistel: Feistel,
    sealed_since_ms: u64,
}

impl fmt::Debug for TokenSeal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("TokenSeal")
            .field("sealed_since_ms", &self.sealed_since_ms)
            .finish_non_exhaustive()
    }
}

impl TokenSeal {
    /// The seal of an installation: its sub-key is HMAC-SHA256 keyed by
    /// `secret` (`LINKTRACK_SECRET`; empty when unset) over the label and
    /// the installation's random key (`token_format.install_key`), so the
    /// key is secret even without `LINKTRACK_SECRET`, differs between
    /// installations, and changes when the secret is rotated.
    pub fn derive(secret: Option<&str>, install_key: &[u8], sealed_since_ms: u64) -> TokenSeal {
        use hmac::{Hmac, Mac};
        let secret = secret.unwrap_or_default().as_bytes();
        // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
        let mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret).map(|mut mac| {
            mac.update(SEAL_LABEL);
            mac.update(&[0]);
            mac.update(install_key);
            mac.finalize().into_bytes()
        });
        let mut key = [0u8; 16];
        if let Ok(digest) = mac {
            key.copy_from_slice(&digest[..16]);
        }
        TokenSeal {
            feistel: Feistel::new(key),
            sealed_since_ms,
        }
    }

    /// Tokens stamped at or after this Unix millisecond are sealed.
    pub fn sealed_since_ms(&self) -> u64 {
        self.sealed_since_ms
    }

    /// What `token` says: its plaintext, or [`Opened::Legacy`] when it was
    /// made before tokens were sealed.
    pub fn open(&self, token: &Token) -> Opened {
        let millis = token.unix_millis();
        if millis < self.sealed_since_ms {
            return Opened::Legacy;
        }
        Opened::Sealed(Plaintext::unpack(
            self.feistel.decrypt(millis, token.bits_74()),
        ))
    }

    /// A fresh token stamped with `time` for `plain`.
    pub fn seal(&self, time: DateTime<Utc>, plain: Plaintext) -> Token {
        Token::sealed(self, time, plain)
    }
}

/// The label a key's fingerprint is made under: the fingerprint names a
/// key in the database and in messages, and never gives the key away.
const FINGERPRINT_LABEL: &[u8] = b"linktrack seal key fingerprint v1";

impl TokenSeal {
    /// A name for this seal's key (16 hex digits): HMAC-SHA256 keyed with
    /// the key over a label, cut to 64 bits. The database records it
    /// (`seal_keys`) so that a builder or server with another secret is
    /// told so before it seals or opens anything; it says nothing of the
    /// key (recovering a 128-bit key from it is a brute force of 2^128).
    pub fn fingerprint(&self) -> String {
        use hmac::{Hmac, Mac};
        let digest =
            <Hmac<sha2::Sha256> as Mac>::new_from_slice(&self.feistel.key).map(|mut mac| {
                mac.update(FINGERPRINT_LABEL);
                mac.finalize().into_bytes()
            });
        match digest {
            Ok(digest) => hex::encode(&digest[..8]),
            // HMAC takes a key of any length: not reached.
            Err(_) => String::new(),
        }
    }
}

impl Token {
    /// A token stamped with `time` whose 74 bits seal `plain` under `seal`.
    pub fn sealed(seal: &TokenSeal, time: DateTime<Utc>, plain: Plaintext) -> Self {
        let millis = u64::try_from(time.timestamp_millis()).unwrap_or(0) & MAX_MILLIS;
        let bits = seal.feistel.encrypt(millis, plain.pack());
        Self::from_74_bits(millis, bits)
    }
}
