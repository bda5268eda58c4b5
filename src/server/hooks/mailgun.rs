//! Mailgun's webhook signature: HMAC-SHA256, keyed with the account's
//! webhook signing key, of `timestamp` followed by `token`, in hex
//! (documentation.mailgun.com, "Securing Webhooks"). A post whose
//! timestamp is too far from now, or whose token was already used, is
//! refused: a captured post cannot be played again.

use hmac::{Hmac, Mac};
use moka::future::Cache;
use serde::Deserialize;
use sha2::Sha256;
use std::time::Duration;

/// The `signature` object of a Mailgun webhook post.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Signature {
    pub(crate) timestamp: String,
    pub(crate) token: String,
    pub(crate) signature: String,
}

/// Why a post is not Mailgun's; the text is the response body, the
/// label the metric's `reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("unsigned: no signature object with timestamp, token and signature")]
    Unsigned,
    #[error("the signature does not verify")]
    BadSignature,
    #[error("the timestamp {0} is not within {1} s of now")]
    Stale(String, u64),
    #[error("the token was used before (a replayed post)")]
    Replayed,
}

impl Refusal {
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Refusal::Unsigned => "unsigned",
            Refusal::BadSignature => "bad_signature",
            Refusal::Stale(..) => "stale",
            Refusal::Replayed => "replayed_token",
        }
    }
}

/// The signing key and the tokens seen within the accepted age.
#[derive(Clone)]
pub(crate) struct Verifier {
    key: Vec<u8>,
    max_age: Duration,
    used: Cache<String, ()>,
}

impl Verifier {
    pub(crate) fn new(key: &str, max_age: Duration) -> Verifier {
        Verifier {
            key: key.as_bytes().to_vec(),
            max_age,
            // A token older than max_age is refused as stale anyway, so it
            // need not be remembered longer (twice, for clock skew both ways).
            used: Cache::builder()
                .max_capacity(1_000_000)
                .time_to_live(max_age.saturating_mul(2))
                .build(),
        }
    }

    /// The signature, then the timestamp; the token is checked and
    /// remembered by [`Verifier::spend`] once the post was acted on (a post
    /// answered 503 is retried with the same token).
    pub(crate) fn check(&self, signature: &Signature, now_secs: u64) -> Result<(), Refusal> {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return Err(Refusal::BadSignature);
        };
        mac.update(signature.timestamp.as_bytes());
        mac.update(signature.token.as_bytes());
        let given = hex::decode(signature.signature.trim()).map_err(|_| Refusal::BadSignature)?;
        mac.verify_slice(&given)
            .map_err(|_| Refusal::BadSignature)?;
        let stale = Refusal::Stale(signature.timestamp.clone(), self.max_age.as_secs());
        let at: u64 = signature
            .timestamp
            .trim()
            .parse()
            .map_err(|_| stale.clone())?;
        if at.abs_diff(now_secs) > self.max_age.as_secs() {
            return Err(stale);
        }
        Ok(())
    }

    /// How old a signature may be.
    pub(crate) fn max_age(&self) -> Duration {
        self.max_age
    }

    /// Whether the token was used before.
    pub(crate) async fn used(&self, token: &str) -> bool {
        self.used.contains_key(token)
    }

    /// Remember the token of a post acted on.
    pub(crate) async fn spend(&self, token: &str) {
        self.used.insert(token.to_owned(), ()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(key: &str, timestamp: &str, token: &str) -> Signature {
        let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
        mac.update(timestamp.as_bytes());
        mac.update(token.as_bytes());
        Signature {
            timestamp: timestamp.into(),
            token: token.into(),
            signature: hex::encode(mac.finalize().into_bytes()),
        }
    }

    #[test]
    fn the_hmac_and_the_timestamp_are_checked() {
        let verifier = Verifier::new("key-1", Duration::from_secs(900));
        let now = 1_800_000_000;
        assert_eq!(
            verifier.check(&signed("key-1", "1800000000", "t"), now),
            Ok(())
        );
        assert_eq!(
            verifier.check(&signed("key-2", "1800000000", "t"), now),
            Err(Refusal::BadSignature)
        );
        let mut tampered = signed("key-1", "1800000000", "t");
        tampered.token = "u".into();
        assert_eq!(verifier.check(&tampered, now), Err(Refusal::BadSignature));
        assert!(matches!(
            verifier.check(&signed("key-1", "1799990000", "t"), now),
            Err(Refusal::Stale(..))
        ));
    }
}
