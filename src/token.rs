//! The tracking token: 128 bits in the RFC 9562 UUIDv7 layout.
//!
//! ```text
//!  0                   1                   2                   3
//!  unix_ts_ms (48 bits)             | ver=7 | rand_a (12) |var| rand_b (62)
//! ```
//!
//! * The 48-bit Unix-millisecond timestamp gives the UTC day that is the row's
//!   partition (`inserted`), so a lookup names exactly one partition.
//! * Time-ordered leading bits keep inserts into `UNIQUE (uuid, inserted)` near
//!   the right edge of the B-tree (seed 001, problem 1 and 2).
//! * All 74 remaining bits (`rand_a` and `rand_b`) come from a cryptographically
//!   secure generator. We deliberately do *not* use `uuid`'s `now_v7()`, which
//!   spends up to 42 of those bits on a monotonic counter and so would leave
//!   fewer than the 74 unpredictable bits the contract demands.
//!
//! In URLs a token is written as 32 lowercase hex digits without dashes.
//! [`Token::parse`] is strict: anything else is rejected before any database
//! read.

use chrono::{DateTime, NaiveDate, Utc};
use rand::Rng;
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

/// Number of hex digits in a token's text form.
pub const TOKEN_HEX_LEN: usize = 32;

/// A tracking token. Cheap to copy; compares by its 16 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(Uuid);

/// Why a string is not a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("a token is {TOKEN_HEX_LEN} hex digits, got {0} characters")]
    Length(usize),
    #[error("a token holds only lowercase hex digits (0-9, a-f)")]
    NotLowercaseHex,
    #[error("not a version-7 token")]
    Version,
    #[error("not an RFC 9562 variant token")]
    Variant,
    #[error("token timestamp is outside the representable date range")]
    Timestamp,
    #[error("a token is 16 bytes, got {0}")]
    ByteLength(usize),
}

impl Token {
    /// A fresh token stamped with the current time.
    pub fn new() -> Self {
        Self::at(Utc::now())
    }

    /// A fresh token stamped with `time` (milliseconds; earlier times are
    /// clamped to the epoch). Used by the builder, which stamps every token of
    /// a batch with the batch's time, and by tests that need old tokens.
    pub fn at(time: DateTime<Utc>) -> Self {
        let millis = u64::try_from(time.timestamp_millis()).unwrap_or(0);
        let mut random = [0u8; 10];
        rand::rng().fill_bytes(&mut random);
        Self::from_parts(millis, random)
    }

    /// Assemble a token from its timestamp and 10 random bytes; the version
    /// and variant bits overwrite 6 of the 80 random bits, leaving 74.
    pub fn from_parts(unix_millis: u64, random: [u8; 10]) -> Self {
        Token(uuid::Builder::from_unix_timestamp_millis(unix_millis, &random).into_uuid())
    }

    /// Parse the URL form: exactly 32 lowercase hex digits of a version-7,
    /// RFC-variant UUID whose timestamp is a representable date.
    pub fn parse(text: &str) -> Result<Self, TokenError> {
        if text.len() != TOKEN_HEX_LEN {
            return Err(TokenError::Length(text.chars().count()));
        }
        if !text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(TokenError::NotLowercaseHex);
        }
        let uuid = Uuid::try_parse(text).map_err(|_| TokenError::NotLowercaseHex)?;
        Self::from_uuid(uuid)
    }

    /// Read the 16 bytes stored in the database.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TokenError> {
        let array: [u8; 16] = bytes
            .try_into()
            .map_err(|_| TokenError::ByteLength(bytes.len()))?;
        Self::from_uuid(Uuid::from_bytes(array))
    }

    fn from_uuid(uuid: Uuid) -> Result<Self, TokenError> {
        if uuid.get_version_num() != 7 {
            return Err(TokenError::Version);
        }
        if uuid.get_variant() != uuid::Variant::RFC4122 {
            return Err(TokenError::Variant);
        }
        let token = Token(uuid);
        if DateTime::<Utc>::from_timestamp_millis(token.unix_millis() as i64).is_none() {
            return Err(TokenError::Timestamp);
        }
        Ok(token)
    }

    /// The 48-bit Unix-millisecond timestamp.
    pub fn unix_millis(&self) -> u64 {
        let b = self.0.as_bytes();
        u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    /// The moment the token was made.
    pub fn created_at(&self) -> DateTime<Utc> {
        // Every constructor guarantees a representable timestamp: 48 bits of
        // milliseconds end in the year 10889, well inside chrono's range.
        DateTime::<Utc>::from_timestamp_millis(self.unix_millis() as i64).unwrap_or_default()
    }

    /// The UTC day of the timestamp: the row's partition key (`inserted`).
    pub fn date(&self) -> NaiveDate {
        self.created_at().date_naive()
    }

    /// True when the token's day is older than `today - keep_days`, i.e. its
    /// partition has been (or may have been) dropped: no database read needed.
    pub fn is_expired(&self, today: NaiveDate, keep_days: u32) -> bool {
        match today.checked_sub_days(chrono::Days::new(u64::from(keep_days))) {
            Some(oldest_kept) => self.date() < oldest_kept,
            None => false,
        }
    }

    /// The 16 bytes stored in `BINARY(16)` columns.
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }
}

impl Default for Token {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.simple(), f)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({self})")
    }
}

impl FromStr for Token {
    type Err = TokenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Token::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    /// 48-bit millisecond timestamps.
    fn millis() -> impl Strategy<Value = u64> {
        0u64..(1u64 << 48)
    }

    proptest! {
        #[test]
        fn text_round_trip(ms in millis(), random in any::<[u8; 10]>()) {
            let token = Token::from_parts(ms, random);
            let text = token.to_string();
            prop_assert_eq!(text.len(), 32);
            prop_assert!(text.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            prop_assert_eq!(Token::parse(&text), Ok(token));
            prop_assert_eq!(Token::from_bytes(token.as_bytes()), Ok(token));
        }

        #[test]
        fn date_is_the_utc_date_of_the_timestamp(ms in millis(), random in any::<[u8; 10]>()) {
            let token = Token::from_parts(ms, random);
            prop_assert_eq!(token.unix_millis(), ms);
            let expected = Utc.timestamp_millis_opt(ms as i64).unwrap().date_naive();
            prop_assert_eq!(token.date(), expected);
        }

        #[test]
        fn random_bits_survive(ms in millis(), random in any::<[u8; 10]>()) {
            // 74 of the 80 random input bits must reach the token unchanged.
            let b = *Token::from_parts(ms, random).as_bytes();
            prop_assert_eq!(b[6] & 0x0f, random[0] & 0x0f);
            prop_assert_eq!(b[7], random[1]);
            prop_assert_eq!(b[8] & 0x3f, random[2] & 0x3f);
            prop_assert_eq!(&b[9..16], &random[3..10]);
        }

        #[test]
        fn wrong_length_is_rejected(s in "[0-9a-f]{0,31}|[0-9a-f]{33,80}") {
            prop_assert!(matches!(Token::parse(&s), Err(TokenError::Length(_))));
        }

        #[test]
        fn any_non_hex_character_is_rejected(
            ms in millis(), random in any::<[u8; 10]>(), at in 0usize..32,
            bad in "[^0-9a-f]",
        ) {
            let mut chars: Vec<char> = Token::from_parts(ms, random).to_string().chars().collect();
            chars[at] = bad.chars().next().unwrap();
            let text: String = chars.into_iter().collect();
            prop_assert!(Token::parse(&text).is_err());
        }

        #[test]
        fn uppercase_is_rejected(ms in millis(), random in any::<[u8; 10]>()) {
            let text = Token::from_parts(ms, random).to_string().to_uppercase();
            // All-digit tokens have no letters to upper-case; the chance is nil.
            prop_assume!(text.bytes().any(|b| b.is_ascii_alphabetic()));
            prop_assert_eq!(Token::parse(&text), Err(TokenError::NotLowercaseHex));
        }

        #[test]
        fn wrong_version_is_rejected(ms in millis(), random in any::<[u8; 10]>(), version in 0u8..16) {
            prop_assume!(version != 7);
            let mut b = *Token::from_parts(ms, random).as_bytes();
            b[6] = (b[6] & 0x0f) | (version << 4);
            let text = Uuid::from_bytes(b).simple().to_string();
            prop_assert_eq!(Token::parse(&text), Err(TokenError::Version));
        }

        #[test]
        fn wrong_variant_is_rejected(ms in millis(), random in any::<[u8; 10]>(), variant in 0u8..4) {
            prop_assume!(variant != 0b10);
            let mut b = *Token::from_parts(ms, random).as_bytes();
            b[8] = (b[8] & 0x3f) | (variant << 6);
            let text = Uuid::from_bytes(b).simple().to_string();
            prop_assert_eq!(Token::parse(&text), Err(TokenError::Variant));
        }

        #[test]
        fn parse_never_panics(s in "\\PC*") {
            let _ = Token::parse(&s);
        }
    }

    #[test]
    fn dashed_uuid_is_rejected() {
        let dashed = Token::new().0.hyphenated().to_string();
        assert!(Token::parse(&dashed).is_err());
    }

    #[test]
    fn fresh_tokens_differ_and_carry_today() {
        let a = Token::new();
        let b = Token::new();
        assert_ne!(a, b);
        assert_eq!(a.date(), Utc::now().date_naive());
    }

    #[test]
    fn expiry_follows_the_retention_window() {
        let today = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
        let at = |d: NaiveDate| Token::at(d.and_hms_opt(12, 0, 0).unwrap().and_utc());
        let day = |n: u64| today.checked_sub_days(chrono::Days::new(n)).unwrap();
        assert!(!at(today).is_expired(today, 90));
        assert!(!at(day(90)).is_expired(today, 90));
        assert!(at(day(91)).is_expired(today, 90));
    }
}
