//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>): the
//! secret is `whsec_` + base64 of 24 to 64 random bytes; a delivery carries
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`.
//! A few lines checked against the specification's test vector (below) and,
//! in the integration tests, against the reference `standardwebhooks` crate.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The prefix the specification serialises secrets with.
pub const SECRET_PREFIX: &str = "whsec_";

/// A signing key, decoded, with its HMAC keyed once. `Debug` never shows it.
#[derive(Clone)]
pub struct Secret {
    key: Vec<u8>,
    // Boxed: the keyed state is 200-odd bytes, and endpoints hold secrets.
    mac: Box<Hmac<Sha256>>,
}

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.key == other.key
    }
}

impl Eq for Secret {}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A secret that is not `whsec_` + base64 of 24 to 64 bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("not valid base64 after `whsec_`: {0}")]
    NotBase64(#[source] base64::DecodeError),
    #[error("decodes to {0} bytes; Standard Webhooks secrets have 24 to 64")]
    BadLength(usize),
}

impl Secret {
    /// Parse the serialised form; the `whsec_` prefix may be left out.
    pub fn parse(text: &str) -> Result<Secret, SecretError> {
        let encoded = text.trim();
        let encoded = encoded.strip_prefix(SECRET_PREFIX).unwrap_or(encoded);
        let key = BASE64.decode(encoded).map_err(SecretError::NotBase64)?;
        if !(24..=64).contains(&key.len()) {
            return Err(SecretError::BadLength(key.len()));
        }
        let mac = <Hmac<Sha256> as Mac>::new_from_slice(&key)
            .map_err(|_| SecretError::BadLength(key.len()))?;
        Ok(Secret {
            key,
            mac: Box::new(mac),
        })
    }

    /// A fresh random secret, serialised (for operators setting one up).
    pub fn generate() -> String {
        let key: [u8; 32] = rand::random();
        format!("{SECRET_PREFIX}{}", BASE64.encode(key))
    }

    /// The `webhook-signature` header value for one delivery.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = (*self.mac).clone();
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vector of the specification and of every reference library.
    #[test]
    fn the_specification_test_vector_signs_the_same() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signature = secret.sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_secret_without_prefix_is_the_same_key() {
        assert_eq!(
            Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap(),
            Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()
        );
    }

    #[test]
    fn bad_secrets_are_named() {
        assert!(matches!(
            Secret::parse("whsec_not base64!"),
            Err(SecretError::NotBase64(_))
        ));
        assert_eq!(
            Secret::parse("whsec_c2hvcnQ="),
            Err(SecretError::BadLength(5))
        );
        let generated = Secret::generate();
        assert!(generated.starts_with("whsec_"));
        assert!(Secret::parse(&generated).is_ok());
        assert_eq!(
            format!("{:?}", Secret::parse(&generated).unwrap()),
            "Secret(..)"
        );
    }
}
