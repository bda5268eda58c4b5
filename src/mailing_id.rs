//! [`MailingId`]: a mailing's id, checked once where it comes in (the
//! mailing file, a command-line flag, a URL) and carried as its own type
//! from there to the store, so no function further in has to wonder
//! whether the text it was given is a valid id.
//!
//! The rules are the ones `links.mailing_id` and the reports need: 1 to 64
//! characters, none of them a control character, and no white space at
//! either end. Ids are taken byte for byte: `a ` is refused rather than
//! trimmed, since it would otherwise be the same mailing as `a`.

use std::fmt;

/// The longest mailing id the `links.mailing_id` column holds (characters).
pub const MAX_MAILING_ID: usize = 64;

/// A mailing's id, valid by construction: the only way to make one is
/// [`MailingId::parse`].
///
/// # Examples
///
/// ```
/// use linktrack::mailing_id::MailingId;
///
/// let id = MailingId::parse("2026-11 news").unwrap();
/// assert_eq!(id.as_str(), "2026-11 news");
///
/// // Taken byte for byte: white space around an id is refused, not trimmed.
/// assert!(MailingId::parse("news ").is_err());
/// assert!(MailingId::parse("").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MailingId(String);

/// Why a text is not a mailing id; the message is what a user reads after
/// the name of the field or flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MailingIdError {
    #[error("must be 1 to {MAX_MAILING_ID} printable characters")]
    Length,
    #[error("must be 1 to {MAX_MAILING_ID} printable characters")]
    Control,
    #[error("must not begin or end with white space (ids are taken byte for byte)")]
    Padded,
}

impl MailingId {
    /// Check `text` against the rules above and keep it as it is.
    pub fn parse(text: &str) -> Result<MailingId, MailingIdError> {
        if text.is_empty() || text.chars().count() > MAX_MAILING_ID {
            return Err(MailingIdError::Length);
        }
        if text.chars().any(char::is_control) {
            return Err(MailingIdError::Control);
        }
        if text.trim() != text {
            return Err(MailingIdError::Padded);
        }
        Ok(MailingId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// Quoted, as the text it holds: messages that said `mailing "w47"` when the
/// id was a `String` still do.
impl fmt::Debug for MailingId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for MailingId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Compared with text as the text it holds (`id == "w47"`).
impl PartialEq<str> for MailingId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for MailingId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl AsRef<str> for MailingId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for MailingId {
    type Err = MailingIdError;

    fn from_str(text: &str) -> Result<MailingId, MailingIdError> {
        MailingId::parse(text)
    }
}

/// Serialised as the id itself.
impl serde::Serialize for MailingId {
    fn serialize<S: serde::Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_str(&self.0)
    }
}

/// Read as text, then checked: a JSON id that breaks the rules is an error
/// of the document that holds it.
impl<'de> serde::Deserialize<'de> for MailingId {
    fn deserialize<D: serde::Deserializer<'de>>(from: D) -> Result<MailingId, D::Error> {
        let text = String::deserialize(from)?;
        MailingId::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_rules_of_an_id() {
        assert_eq!(MailingId::parse(""), Err(MailingIdError::Length));
        assert_eq!(
            MailingId::parse(&"x".repeat(65)),
            Err(MailingIdError::Length)
        );
        assert!(
            MailingId::parse(&"é".repeat(64)).is_ok(),
            "64 characters, not bytes"
        );
        assert_eq!(MailingId::parse("a\tb"), Err(MailingIdError::Control));
        assert_eq!(MailingId::parse(" a"), Err(MailingIdError::Padded));
        assert_eq!(MailingId::parse("a\u{3000}"), Err(MailingIdError::Padded));
        assert_eq!(
            MailingId::parse("w47").map(MailingId::into_string),
            Ok("w47".into())
        );
    }

    #[test]
    fn an_id_prints_as_its_text() {
        let id = MailingId::parse("w47").unwrap();
        assert_eq!(format!("{id} {id:?}"), r#"w47 "w47""#);
    }

    #[test]
    fn json_ids_are_checked_when_read() {
        let id: MailingId = serde_json::from_str(r#""w47""#).unwrap();
        assert_eq!(id.as_str(), "w47");
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""w47""#);
        let padded = serde_json::from_str::<MailingId>(r#""w47 ""#).unwrap_err();
        assert!(padded.to_string().contains("white space"), "{padded}");
    }

    proptest! {
        /// Whatever is accepted comes back byte for byte.
        #[test]
        fn an_accepted_id_is_kept_as_given(text in "\\PC{0,70}") {
            if let Ok(id) = MailingId::parse(&text) {
                prop_assert_eq!(id.as_str(), text.as_str());
                prop_assert!(!text.is_empty() && text.trim() == text);
            }
        }
    }
}
