//! The token itself: 128 bits in the RFC 9562 UUIDv7 layout, made new,
//! parsed from its URL form (strictly: anything else is refused before a
//! database read), read from its stored bytes, and dated: the day that is
//! its row's partition and whether that day is past the retention window.

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use rand::Rng;
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

/// Milliseconds in a UTC day.
const MS_PER_DAY: i64 = 86_400_000;
/// `NaiveDate::num_days_from_ce` of 1970-01-01: day 0 of a token's days.
const EPOCH_DAYS_FROM_CE: i64 = 719_163;

/// Number of hex digits in a token's text form.
pub const TOKEN_HEX_LEN: usize = 32;

/// A tracking token. Cheap to copy; compares by its 16 bytes.
///
/// # Examples
///
/// A token carries the moment it was made, so it names the day (the
/// `links` partition) its row is in, and an expired link is known without
/// a database read:
///
/// ```
/// use chrono::{NaiveDate, TimeZone, Utc};
/// use linktrack::token::Token;
///
/// let made = Utc.with_ymd_and_hms(2026, 11, 27, 9, 30, 0).unwrap();
/// let token = Token::at(made);
/// assert_eq!(token.date(), NaiveDate::from_ymd_opt(2026, 11, 27).unwrap());
///
/// // The URL form is 32 lowercase hex digits, parsed back exactly.
/// let text = token.to_string();
/// assert_eq!(text.len(), 32);
/// assert_eq!(Token::parse(&text), Ok(token));
/// assert!(Token::parse(&text.to_uppercase()).is_err());
///
/// // Kept 30 days: expired on the 31st day after it was made.
/// let day = |d| NaiveDate::from_ymd_opt(2026, 12, d).unwrap();
/// assert!(!token.is_expired(day(27), 30));
/// assert!(token.is_expired(day(28), 30));
/// ```
///
/// A sealed token also carries what it is for (its kind, its link's
/// template, its letter), readable only with the installation's key:
///
/// ```
/// use chrono::Utc;
/// use linktrack::kind::TokenKind;
/// use linktrack::token::{Opened, Plaintext, TokenSeal};
///
/// let seal = TokenSeal::derive(Some("the secret"), b"installation key", 0);
/// let token = seal.seal(Utc::now(), Plaintext::issue(TokenKind::Click, 7, 42));
/// let Opened::Sealed(plain) = seal.open(&token) else { panic!("sealed") };
/// assert_eq!(plain.token_kind(), Some(TokenKind::Click));
/// assert_eq!(plain.template, 7);
///
/// // Another key opens it to something else.
/// let other = TokenSeal::derive(Some("another secret"), b"installation key", 0);
/// assert_ne!(other.open(&token), Opened::Sealed(plain));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub(super) Uuid);

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
        // The digits read in the one pass that checks them (a check, then
        // `Uuid::try_parse`, read them twice).
        let digits = text.as_bytes();
        let mut bytes = [0u8; 16];
        // Any digit that is none is seen once at the end (its table entry
        // has the high bit set, which survives the or).
        let mut refused = 0u8;
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            let (high, low) = (
                LOWERCASE_HEX[usize::from(pair[0])],
                LOWERCASE_HEX[usize::from(pair[1])],
            );
            refused |= high | low;
            *byte = high << 4 | (low & 0x0f);
        }
        if refused & 0x80 != 0 {
            return Err(TokenError::NotLowercaseHex);
        }
        Self::from_uuid(Uuid::from_bytes(bytes))
    }

    /// Read the 16 bytes stored in the database.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TokenError> {
        let array: [u8; 16] = bytes
            .try_into()
            .map_err(|_| TokenError::ByteLength(bytes.len()))?;
        Self::from_uuid(Uuid::from_bytes(array))
    }

    /// A token of `uuid`, checked: version 7, RFC variant, a representable
    /// date.
    pub(super) fn from_uuid(uuid: Uuid) -> Result<Self, TokenError> {
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
        let today = i64::from(today.num_days_from_ce()) - EPOCH_DAYS_FROM_CE;
        self.is_before_window(today, keep_days)
    }

    /// [`Token::is_expired`] as of the moment `now`, or `None` when the
    /// token is dated after tomorrow (tokens are made by our builder, so
    /// none is; tomorrow allows for clock skew around midnight). The same
    /// day arithmetic, counted from milliseconds without building dates
    /// (chrono's calendar is not needed to compare day numbers): the
    /// request path's check.
    #[inline]
    pub fn is_expired_at(&self, now: DateTime<Utc>, keep_days: u32) -> Option<bool> {
        let today = now.timestamp_millis().div_euclid(MS_PER_DAY);
        if self.day_number() > today + 1 {
            return None;
        }
        Some(self.is_before_window(today, keep_days))
    }

    /// The token's UTC day, counted from 1970-01-01 (day 0).
    #[inline]
    fn day_number(&self) -> i64 {
        // 48 bits of milliseconds: no overflow, and never before the epoch.
        self.unix_millis() as i64 / MS_PER_DAY
    }

    /// Whether the token's day is before the window of `keep_days` days
    /// that ends on day number `today`. A window reaching before chrono's
    /// first day expires nothing: no token's day (1970 on) is before it.
    #[inline]
    fn is_before_window(&self, today: i64, keep_days: u32) -> bool {
        self.day_number() < today - i64::from(keep_days)
    }

    /// The 16 bytes stored in `BINARY(16)` columns.
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }

    /// The 74 bits after the timestamp, version and variant: `rand_a` (12)
    /// then `rand_b` (62).
    pub fn bits_74(&self) -> u128 {
        let b = self.0.as_bytes();
        let rand_a = (u128::from(b[6] & 0x0f) << 8) | u128::from(b[7]);
        let mut rand_b = u128::from(b[8] & 0x3f);
        for byte in &b[9..16] {
            rand_b = (rand_b << 8) | u128::from(*byte);
        }
        (rand_a << 62) | rand_b
    }

    /// The token of `unix_millis` whose 74 bits are `bits` (the seal's
    /// output).
    pub(super) fn from_74_bits(unix_millis: u64, bits: u128) -> Self {
        // `from_parts` overwrites the top 4 bits of byte 6 (version) and the
        // top 2 of byte 8 (variant): place rand_a and rand_b around them.
        let rand_a = (bits >> 62) as u16 & 0x0fff;
        let rand_b = (bits & ((1u128 << 62) - 1)) as u64;
        let mut random = [0u8; 10];
        random[..2].copy_from_slice(&rand_a.to_be_bytes());
        random[2..].copy_from_slice(&rand_b.to_be_bytes());
        Self::from_parts(unix_millis, random)
    }
}

/// Each byte's value as a lowercase hex digit; 0xff for a byte that is none.
const LOWERCASE_HEX: [u8; 256] = {
    let mut table = [0xffu8; 256];
    let mut digit = 0;
    while digit < 16 {
        table[b"0123456789abcdef"[digit] as usize] = digit as u8;
        digit += 1;
    }
    table
};

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
