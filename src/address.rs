//! Email addresses: the one normalisation (the suppression list's key, and
//! how every command recognises the same recipient twice) and a
//! deliberately modest validity check. Full RFC 5322 parsing would accept
//! quoted local parts and comments that no sending pool delivers; this
//! rejects what certainly cannot be sent and names why.
//!
//! [`Email::parse`] is normalisation and validation in one step: build,
//! `suppressions add|import`, the unsubscribe handler and `erase` all go
//! through [`normalize`], so an address written with a byte-order mark, a
//! zero-width space or a non-breaking space is the same address as without.

use std::fmt;

/// An address that is normalised and valid: the only way to make one is
/// [`Email::parse`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Email(String);

impl Email {
    /// Normalise `raw` ([`normalize`]) and check the result ([`validate`]).
    pub fn parse(raw: &str) -> Result<Email, AddressError> {
        let email = normalize(raw);
        validate(&email)?;
        Ok(Email(email))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Serialised as the address itself.
impl serde::Serialize for Email {
    fn serialize<S: serde::Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_str(&self.0)
    }
}

impl PartialEq<str> for Email {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Email {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl AsRef<str> for Email {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Characters that show as nothing: a byte-order mark (Excel and Notepad
/// start UTF-8 files with one), zero-width spaces and joiners, the word
/// joiner, and the Mongolian vowel separator (white space until Unicode
/// 6.3). None of them is Unicode `White_Space`, so `char::is_whitespace`
/// alone would keep them, and an address carrying one would be a different
/// key from the same address without it.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{feff}' | '\u{200b}' | '\u{200c}' | '\u{200d}' | '\u{2060}' | '\u{180e}'
    )
}

/// `raw` without leading and trailing Unicode white space (`White_Space`:
/// tabs, NBSP U+00A0, ideographic space, …) and invisible characters
/// ([`is_invisible`]). Also how list files tell blank and comment lines.
pub fn trim(raw: &str) -> &str {
    raw.trim_matches(|c: char| c.is_whitespace() || is_invisible(c))
}

/// Trimmed ([`trim`]) and lowercased, local part included: the form stored
/// in `suppressions` and used to recognise the same recipient twice. Never
/// fails: commands that must act on whatever they are given (`suppressions
/// remove`, `erase`, an unsubscribe) use it directly; [`Email::parse`] adds
/// the check.
pub fn normalize(address: &str) -> String {
    trim(address).to_lowercase()
}

/// Why an address cannot be sent to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("empty address")]
    Empty,
    #[error("address has no @")]
    NoAt,
    #[error("address has more than one @")]
    ManyAt,
    #[error("address has an empty local part")]
    EmptyLocal,
    #[error("address domain {0:?} is not a domain name")]
    BadDomain(String),
    #[error("address contains whitespace or a control character")]
    Whitespace,
    #[error("address contains the invisible character U+{0:04X}")]
    Invisible(u32),
    #[error("address contains {0:?}, which needs quoting no sender supports")]
    Special(char),
    #[error("address is longer than 254 bytes")]
    TooLong,
}

/// Check a normalised address.
pub fn validate(address: &str) -> Result<(), AddressError> {
    if address.is_empty() {
        return Err(AddressError::Empty);
    }
    if address.len() > 254 {
        return Err(AddressError::TooLong);
    }
    if address.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(AddressError::Whitespace);
    }
    if let Some(c) = address.chars().find(|c| is_invisible(*c)) {
        return Err(AddressError::Invisible(u32::from(c)));
    }
    if let Some(c) = address.chars().find(|c| "<>()[],;:\\\"".contains(*c)) {
        return Err(AddressError::Special(c));
    }
    let (local, domain) = address.split_once('@').ok_or(AddressError::NoAt)?;
    if domain.contains('@') {
        return Err(AddressError::ManyAt);
    }
    if local.is_empty() {
        return Err(AddressError::EmptyLocal);
    }
    let labels_ok = domain
        .split('.')
        .all(|label| !label.is_empty() && !label.starts_with('-') && !label.ends_with('-'));
    if !domain.contains('.') || !labels_ok {
        return Err(AddressError::BadDomain(domain.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_case_and_space() {
        assert_eq!(normalize("  Ann.Lee@Example.COM \t"), "ann.lee@example.com");
        assert_eq!(normalize("JOSÉ@Example.es"), "josé@example.es");
    }

    #[test]
    fn invisible_and_unicode_space_at_either_end_is_trimmed() {
        for raw in [
            "\u{feff}x@y.com",
            "x@y.com\u{feff}",
            "\u{200b}x@y.com\u{200b}",
            "x@y.com\u{00a0}",
            "\u{00a0}\u{2060}X@Y.com\u{200d}\u{200c}",
            "\u{3000}x@y.com\u{2028}",
            "\u{180e}x@y.com\r\n",
        ] {
            assert_eq!(normalize(raw), "x@y.com", "{raw:?}");
            assert_eq!(
                Email::parse(raw).map(Email::into_string),
                Ok("x@y.com".into())
            );
        }
    }

    #[test]
    fn parse_refuses_what_validate_refuses_and_names_the_invisible_character() {
        assert_eq!(Email::parse(" \u{feff} "), Err(AddressError::Empty));
        assert_eq!(Email::parse("a@b@c.com"), Err(AddressError::ManyAt));
        assert_eq!(Email::parse("no-at.example.com"), Err(AddressError::NoAt));
        assert_eq!(Email::parse("a b@c.com"), Err(AddressError::Whitespace));
        assert_eq!(
            Email::parse("a\u{00a0}b@c.com"),
            Err(AddressError::Whitespace)
        );
        let inside = Email::parse("a\u{200b}b@c.com").unwrap_err();
        assert_eq!(inside, AddressError::Invisible(0x200b));
        assert!(inside.to_string().contains("U+200B"), "{inside}");
    }

    proptest::proptest! {
        /// Whatever invisible or white-space characters surround an
        /// address, it normalises to the same key, so it cannot slip past
        /// a suppression.
        #[test]
        fn padding_never_changes_the_key(
            pad_left in proptest::collection::vec(padding(), 0..4),
            pad_right in proptest::collection::vec(padding(), 0..4),
        ) {
            let raw: String = pad_left
                .iter()
                .copied()
                .chain(std::iter::once("Ann@Example.com"))
                .chain(pad_right.iter().copied())
                .collect();
            proptest::prop_assert_eq!(normalize(&raw), "ann@example.com");
        }
    }

    fn padding() -> impl proptest::strategy::Strategy<Value = &'static str> {
        proptest::sample::select(vec![
            " ", "\t", "\r", "\n", "\u{a0}", "\u{feff}", "\u{200b}", "\u{200c}", "\u{200d}",
            "\u{2060}", "\u{2007}", "\u{202f}", "\u{3000}", "\u{85}", "\u{1680}",
        ])
    }

    #[test]
    fn accepts_ordinary_and_international_addresses() {
        for ok in [
            "a@example.com",
            "ann+news@mail.example.co.uk",
            "山田@例え.jp",
            "o'brien@example.ie",
        ] {
            assert_eq!(validate(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_what_cannot_be_sent() {
        assert_eq!(validate(""), Err(AddressError::Empty));
        assert_eq!(validate("example.com"), Err(AddressError::NoAt));
        assert_eq!(validate("@example.com"), Err(AddressError::EmptyLocal));
        assert!(matches!(
            validate("a@localhost"),
            Err(AddressError::BadDomain(_))
        ));
        assert_eq!(validate("a@b@c.com"), Err(AddressError::ManyAt));
        assert!(matches!(
            validate("a@-x.com"),
            Err(AddressError::BadDomain(_))
        ));
        assert_eq!(validate("a b@example.com"), Err(AddressError::Whitespace));
        assert_eq!(validate("<a@example.com>"), Err(AddressError::Special('<')));
        assert_eq!(
            validate(&format!("{}@example.com", "a".repeat(250))),
            Err(AddressError::TooLong)
        );
    }
}
