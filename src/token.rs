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
//! * Since version 2 (docs/token.md) the 74 bits are the *seal* of a 74-bit
//!   plaintext (kind, link template, nonce) under a key only the server and
//!   the builder hold ([`TokenSeal`]): to anyone else they are as random as
//!   before, and the server reads a token's kind and template without a
//!   database read.
//!
//! In URLs a token is written as 32 lowercase hex digits without dashes.
//! [`Token::parse`] is strict: anything else is rejected before any database
//! read.

use crate::kind::TokenKind;
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
        // The digits read in the one pass that checks them (a check, then
        // `Uuid::try_parse`, took 500 instructions of an open).
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

    /// A token stamped with `time` whose 74 bits seal `plain` under `seal`.
    pub fn sealed(seal: &TokenSeal, time: DateTime<Utc>, plain: Plaintext) -> Self {
        let millis = u64::try_from(time.timestamp_millis()).unwrap_or(0) & MAX_MILLIS;
        let bits = seal.feistel.encrypt(millis, plain.pack());
        Self::from_74_bits(millis, bits)
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

    fn from_74_bits(unix_millis: u64, bits: u128) -> Self {
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

/// The Spider cluster's routing of a token to one of `n` virtual shards
/// (docs/token.md): its last four bytes, which are sealed (or random, for
/// legacy tokens) and so uniform, modulo `n`. `n = 0` is treated as 1.
pub fn virtual_shard(token: &Token, n: u32) -> u32 {
    let b = token.as_bytes();
    u32::from_be_bytes([b[12], b[13], b[14], b[15]]) % n.max(1)
}

/// The local part's prefix of every VERP bounce address:
/// `bounces+{token}@{bounce domain}` (docs/bounces.md).
pub const BOUNCE_LOCAL_PREFIX: &str = "bounces+";

/// A letter's VERP address for its bounce token.
pub fn bounce_address(token: &Token, domain: &str) -> String {
    format!("{BOUNCE_LOCAL_PREFIX}{token}@{domain}")
}

/// The token of a VERP address (`bounces+{token}@…`, any case of the
/// prefix, angle brackets allowed); `None` for any other address.
pub fn token_of_bounce_address(address: &str) -> Option<Token> {
    let address = address.trim().trim_start_matches('<').trim_end_matches('>');
    let (local, _domain) = address.rsplit_once('@')?;
    let prefix = local.get(..BOUNCE_LOCAL_PREFIX.len())?;
    if !prefix.eq_ignore_ascii_case(BOUNCE_LOCAL_PREFIX) {
        return None;
    }
    // Some MTAs lowercase or uppercase the local part: the hex is read
    // in either case.
    let hex = local[BOUNCE_LOCAL_PREFIX.len()..].to_ascii_lowercase();
    Token::parse(&hex).ok()
}

/// Largest 48-bit millisecond timestamp.
const MAX_MILLIS: u64 = (1 << 48) - 1;
/// Widths of the plaintext's fields (docs/token.md): 3 + 32 + 39 = 74.
const KIND_BITS: u32 = 3;
const TEMPLATE_BITS: u32 = 32;
const NONCE_BITS: u32 = 39;
const _: () = assert!(KIND_BITS + TEMPLATE_BITS + NONCE_BITS == 74);
/// The nonce's low 19 bits are random; the 20 above them are the letter id's.
const RANDOM_NONCE_BITS: u32 = 19;
const NONCE_MASK: u64 = (1 << NONCE_BITS) - 1;

/// What a version-2 token's 74 bits seal (docs/token.md, "Layout").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plaintext {
    /// 3 bits: a [`TokenKind`] code, 0 never issued.
    pub kind: u8,
    /// `link_templates.id`; 0 = no template.
    pub template: u32,
    /// 39 bits: letter id's low 20 bits ‖ 19 random bits.
    pub nonce: u64,
}

impl Plaintext {
    /// A fresh plaintext for a letter's link: the nonce is the letter id's
    /// low 20 bits and 19 random bits (39 random bits for `letter_id = 0`,
    /// the image tokens a mailing's letters share).
    pub fn issue(kind: TokenKind, template: u32, letter_id: u64) -> Plaintext {
        let random = rand::rng().next_u64();
        let nonce = if letter_id == 0 {
            random & NONCE_MASK
        } else {
            ((letter_id & ((1 << 20) - 1)) << RANDOM_NONCE_BITS)
                | (random & ((1 << RANDOM_NONCE_BITS) - 1))
        };
        Plaintext {
            kind: kind.code(),
            template,
            nonce,
        }
    }

    /// The plaintext of a letter's bounce address (VERP, docs/bounces.md):
    /// kind [`TokenKind::Bounce`], the mailing's unsubscribe link template
    /// (which names the mailing) and the whole nonce for the letter id
    /// (its low 39 bits). Nothing random: stamped with the letter's Date
    /// (its unsubscribe token's time), a re-run seals the same address,
    /// as it writes the same message.
    pub fn bounce(unsubscribe_template: u32, letter_id: u64) -> Plaintext {
        Plaintext {
            kind: TokenKind::Bounce.code(),
            template: unsubscribe_template,
            nonce: letter_id & NONCE_MASK,
        }
    }

    /// The letter id a bounce plaintext carries (its low 39 bits).
    pub fn bounce_letter_id(&self) -> u64 {
        self.nonce & NONCE_MASK
    }

    /// The kind, if it is one ever issued.
    pub fn token_kind(&self) -> Option<TokenKind> {
        TokenKind::from_code(self.kind)
    }

    fn pack(self) -> u128 {
        (u128::from(self.kind & 0b111) << (TEMPLATE_BITS + NONCE_BITS))
            | (u128::from(self.template) << NONCE_BITS)
            | u128::from(self.nonce & NONCE_MASK)
    }

    fn unpack(bits: u128) -> Plaintext {
        Plaintext {
            kind: (bits >> (TEMPLATE_BITS + NONCE_BITS)) as u8 & 0b111,
            template: (bits >> NONCE_BITS) as u32,
            nonce: bits as u64 & NONCE_MASK,
        }
    }
}

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

/// The seal keys a server opens tokens with (docs/token.md, "Rotating the
/// secret"): the current one (`LINKTRACK_SECRET`), which the builder
/// seals new tokens with, then the previous ones
/// (`LINKTRACK_PREVIOUS_SECRETS`), which opened tokens made before a
/// rotation. Opening tries the current key first and the others only when
/// it does not give a kind the route serves, so a token of the current key
/// costs one open, as before rotation.
#[derive(Clone, Debug)]
pub struct SealRing {
    keys: Vec<TokenSeal>,
}

impl SealRing {
    /// A ring of `current` then `previous`, in that order (a key given
    /// twice is kept once).
    pub fn new(current: TokenSeal, previous: Vec<TokenSeal>) -> SealRing {
        let mut keys = vec![current];
        for seal in previous {
            let fingerprint = seal.fingerprint();
            if keys.iter().all(|k| k.fingerprint() != fingerprint) {
                keys.push(seal);
            }
        }
        SealRing { keys }
    }

    /// The key new tokens are sealed with.
    pub fn current(&self) -> &TokenSeal {
        &self.keys[0]
    }

    /// Every key, the current one first.
    pub fn keys(&self) -> &[TokenSeal] {
        &self.keys
    }

    /// The first opening of `token` whose kind `fits`, trying the current
    /// key first; `None` when no key of the ring gives a fitting kind (a
    /// forged token, or one sealed by a key not in the ring). A legacy
    /// token opens as [`Opened::Legacy`] under every key.
    pub fn open_fitting(&self, token: &Token, fits: impl Fn(TokenKind) -> bool) -> Option<Opened> {
        self.openings(token, fits).next()
    }

    /// Every opening of `token` whose kind `fits`, the current key's first:
    /// a late link's template is looked for under each in turn (a wrong
    /// key's opening may fit by chance, and then names no template).
    pub fn openings<'a>(
        &'a self,
        token: &'a Token,
        fits: impl Fn(TokenKind) -> bool + 'a,
    ) -> impl Iterator<Item = Opened> + 'a {
        self.keys
            .iter()
            .map(move |seal| seal.open(token))
            .filter(move |opened| match opened {
                Opened::Legacy => true,
                Opened::Sealed(plain) => plain.token_kind().is_some_and(&fits),
            })
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

/// A tweakable permutation of 74-bit strings: a balanced Feistel network
/// over two 37-bit halves, [`ROUNDS`] rounds, each round's function
/// SipHash-2-4 (a keyed PRF) of the tweak, the round number and one half.
///
/// Why not a standard FPE mode: NIST FF1 (the `fpe` crate with AES-128)
/// measured 7 µs per 80-bit decryption on our 2-core machine, and the open
/// runs on every hit; this network costs a few hundred nanoseconds. With a
/// PRF round function a Feistel network is a pseudo-random permutation
/// (Luby–Rackoff); 10 rounds keep the known attacks on small halves (Patarin:
/// about 2^37 queries for few rounds) far beyond what a sender ever issues
/// under one key and tweak (one millisecond).
#[derive(Clone)]
struct Feistel {
    key: [u8; 16],
    /// SipHash-2-4 keyed with `key`, its key schedule done once.
    prf: siphasher::sip::SipHasher24,
}

const ROUNDS: u8 = 10;
const HALF_BITS: u32 = 37;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;

impl Feistel {
    fn new(key: [u8; 16]) -> Feistel {
        Feistel {
            prf: siphasher::sip::SipHasher24::new_with_key(&key),
            key,
        }
    }

    /// SipHash-2-4 of the 16 bytes `(tweak << 8 | round)` and `half`, both
    /// big-endian (a fixed byte order, so every machine opens every token
    /// alike), cut to a half. Through the crate's one-shot `hash`, which
    /// reads the message word by word: its streaming `Hasher` interface
    /// buffered the bytes and took about a third of an open's seal
    /// (callgrind).
    fn round(&self, tweak: u64, round: u8, half: u64) -> u64 {
        let mut input = [0u8; 16];
        input[..8].copy_from_slice(&((tweak << 8) | u64::from(round)).to_be_bytes());
        input[8..].copy_from_slice(&half.to_be_bytes());
        self.prf.hash(&input) & HALF_MASK
    }

    fn encrypt(&self, tweak: u64, bits: u128) -> u128 {
        let (mut left, mut right) = (
            (bits >> HALF_BITS) as u64 & HALF_MASK,
            bits as u64 & HALF_MASK,
        );
        for round in 0..ROUNDS {
            (left, right) = (right, left ^ self.round(tweak, round, right));
        }
        (u128::from(left) << HALF_BITS) | u128::from(right)
    }

    fn decrypt(&self, tweak: u64, bits: u128) -> u128 {
        let (mut left, mut right) = (
            (bits >> HALF_BITS) as u64 & HALF_MASK,
            bits as u64 & HALF_MASK,
        );
        for round in (0..ROUNDS).rev() {
            (left, right) = (right ^ self.round(tweak, round, left), left);
        }
        (u128::from(left) << HALF_BITS) | u128::from(right)
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

    #[test]
    fn other_addresses_are_no_bounce_address() {
        for address in [
            "news@example.com",
            "bounces+@example.com",
            "bounces+0123@example.com",
            "bounces+zz000000000070008000000000000000@example.com",
            "bounces-01890000000070008000000000000000@example.com",
            "bounces+01890000000070008000000000000000",
            "",
        ] {
            assert_eq!(token_of_bounce_address(address), None, "{address}");
        }
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

    fn seal() -> TokenSeal {
        TokenSeal::derive(Some("test secret"), b"install key", 0)
    }

    fn plaintext() -> impl Strategy<Value = Plaintext> {
        (1u8..7, any::<u32>(), 0u64..(1 << 39)).prop_map(|(kind, template, nonce)| Plaintext {
            kind,
            template,
            nonce,
        })
    }

    fn instant(ms: u64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp_millis(ms as i64).unwrap()
    }

    /// The round function as it was written before it was computed by
    /// hand: `siphasher`'s SipHash-2-4 over the round's 16 bytes.
    fn round_by_siphasher(key: &[u8; 16], tweak: u64, round: u8, half: u64) -> u64 {
        use std::hash::Hasher;
        let mut input = [0u8; 16];
        input[..8].copy_from_slice(&((tweak << 8) | u64::from(round)).to_be_bytes());
        input[8..].copy_from_slice(&half.to_be_bytes());
        let mut hasher = siphasher::sip::SipHasher24::new_with_key(key);
        hasher.write(&input);
        hasher.finish() & HALF_MASK
    }

    #[test]
    fn the_round_function_is_siphash_2_4_of_its_bytes() {
        // The 16-byte message 00..0f under the key 00..0f, from the
        // reference implementation's table (vectors.h, entry 16).
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let message: [u8; 16] = std::array::from_fn(|i| i as u8);
        let feistel = Feistel::new(key);
        assert_eq!(
            feistel.prf.hash(&message),
            // The table's bytes db 9b c2 57 7f cc 2a 3f, little-endian.
            0x3f2a_cc7f_57c2_9bdb
        );
    }

    /// `Token::parse` as it was written before it read the digits itself.
    fn parse_by_uuid(text: &str) -> Result<Token, TokenError> {
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
        Token::from_uuid(uuid)
    }

    proptest! {
        /// Any text, near-tokens (hex of any case, a digit changed) and
        /// real tokens parse as they did through `Uuid::try_parse`.
        #[test]
        fn tokens_parse_as_uuid_parsed_them(
            any_text in "\\PC{0,40}",
            hex in "[0-9a-fA-Fg-]{32}",
            bytes in any::<[u8; 16]>(),
            ms in millis(),
            random in any::<[u8; 10]>(),
            at in 0usize..32,
            digit in "[0-9a-zA-Z]",
        ) {
            let made = Token::from_parts(ms, random).to_string();
            let mut changed = made.clone();
            changed.replace_range(at..at + 1, &digit);
            let simple = Uuid::from_bytes(bytes).simple().to_string();
            for text in [&any_text, &hex, &made, &changed, &simple, &simple.to_uppercase()] {
                prop_assert_eq!(Token::parse(text), parse_by_uuid(text), "{:?}", text);
            }
        }

        #[test]
        fn the_round_function_is_the_one_siphasher_computed(
            key in any::<[u8; 16]>(), tweak in millis(), round in 0u8..ROUNDS, half in 0u64..=HALF_MASK,
        ) {
            let feistel = Feistel::new(key);
            prop_assert_eq!(feistel.round(tweak, round, half), round_by_siphasher(&key, tweak, round, half));
        }

        #[test]
        fn sealed_tokens_open_to_their_plaintext(ms in millis(), plain in plaintext()) {
            let seal = seal();
            let token = seal.seal(instant(ms), plain);
            prop_assert_eq!(token.unix_millis(), ms);
            prop_assert_eq!(Token::parse(&token.to_string()), Ok(token));
            prop_assert_eq!(seal.open(&token), Opened::Sealed(plain));
        }

        #[test]
        fn bounce_addresses_carry_their_letter_and_are_the_same_on_a_rerun(
            ms in millis(), template in any::<u32>(), letter in 0u64..(1 << 39),
        ) {
            let seal = seal();
            let plain = Plaintext::bounce(template, letter);
            let token = seal.seal(instant(ms), plain);
            prop_assert_eq!(token, seal.seal(instant(ms), Plaintext::bounce(template, letter)));
            let Opened::Sealed(opened) = seal.open(&token) else {
                return Err(TestCaseError::fail("a bounce token opens sealed"));
            };
            prop_assert_eq!(opened.token_kind(), Some(TokenKind::Bounce));
            prop_assert_eq!(opened.template, template);
            prop_assert_eq!(opened.bounce_letter_id(), letter);
        }

        #[test]
        fn a_bounce_address_gives_back_its_token(ms in millis(), random in any::<[u8; 10]>()) {
            let token = Token::from_parts(ms, random);
            let address = bounce_address(&token, "bounces.example.com");
            prop_assert_eq!(token_of_bounce_address(&address), Some(token));
            let shouted = format!("<{}>", address.to_ascii_uppercase());
            prop_assert_eq!(token_of_bounce_address(&shouted), Some(token));
        }

        #[test]
        fn any_flipped_bit_opens_to_something_else(
            ms in millis(), plain in plaintext(), bit in 0u32..74,
        ) {
            let seal = seal();
            let token = seal.seal(instant(ms), plain);
            let flipped = Token::from_74_bits(ms, token.bits_74() ^ (1u128 << bit));
            prop_assert_ne!(flipped, token);
            prop_assert_ne!(seal.open(&flipped), Opened::Sealed(plain));
        }

        #[test]
        fn another_key_or_moment_opens_to_noise(ms in millis(), plain in plaintext()) {
            let token = seal().seal(instant(ms), plain);
            let other = TokenSeal::derive(Some("test secret"), b"another install", 0);
            prop_assert_ne!(other.open(&token), Opened::Sealed(plain));
            let rotated = TokenSeal::derive(Some("rotated"), b"install key", 0);
            prop_assert_ne!(rotated.open(&token), Opened::Sealed(plain));
            let later = Token::from_74_bits(ms ^ 1, token.bits_74());
            prop_assert_ne!(seal().open(&later), Opened::Sealed(plain));
        }

        #[test]
        fn issued_nonces_carry_the_letter_id(letter_id in 1u64..u64::MAX, template in any::<u32>()) {
            let plain = Plaintext::issue(TokenKind::Click, template, letter_id);
            prop_assert_eq!(plain.nonce >> 19, letter_id & 0xf_ffff);
            prop_assert_eq!(plain.token_kind(), Some(TokenKind::Click));
            prop_assert_eq!(plain.template, template);
        }

        #[test]
        fn a_token_bit_layout_round_trips(ms in millis(), bits in 0u128..(1 << 74)) {
            prop_assert_eq!(Token::from_74_bits(ms, bits).bits_74(), bits);
        }
    }

    /// Forged tokens (random bits under the right key and a fresh moment)
    /// open to plaintexts the checks of docs/token.md refuse: the kind is 0
    /// or 7 about 2 in 8, and the template is spread over all of u32, so a
    /// forger cannot aim at the few ids that exist.
    #[test]
    fn forged_tokens_open_to_random_plaintexts() {
        let seal = seal();
        let now = Utc::now();
        let tries = 8_000;
        let (mut unissued, mut low_templates) = (0, 0);
        for _ in 0..tries {
            let Opened::Sealed(plain) = seal.open(&Token::at(now)) else {
                panic!("a token of now is sealed");
            };
            if plain.token_kind().is_none() {
                unissued += 1;
            }
            if plain.template < 1_000_000 {
                low_templates += 1;
            }
        }
        // Only code 0 is never issued: expected 1000 (1 in 8); 800..1200
        // is over 6 standard deviations.
        assert!((800..1_200).contains(&unissued), "{unissued}");
        // A million template ids are 1 in 4295 of u32: expected about 2.
        assert!(low_templates < 20, "{low_templates}");
    }

    #[test]
    fn tokens_before_sealing_began_are_legacy() {
        let since = 1_800_000_000_000;
        let seal = TokenSeal::derive(None, b"k", since);
        assert_eq!(seal.open(&Token::at(instant(since - 1))), Opened::Legacy);
        assert!(matches!(
            seal.open(&Token::at(instant(since))),
            Opened::Sealed(_)
        ));
    }

    #[test]
    fn the_virtual_shard_is_the_last_four_bytes_modulo_n() {
        let mut random = [0u8; 10];
        random[6..].copy_from_slice(&1_000_003u32.to_be_bytes());
        let token = Token::from_parts(0, random);
        assert_eq!(virtual_shard(&token, 1_000), 3);
        assert_eq!(virtual_shard(&token, 1), 0);
        assert_eq!(virtual_shard(&token, 0), 0, "no shards is one");
        // Sealed bits spread over the shards evenly.
        let seal = seal();
        let mut counts = [0u32; 8];
        for n in 0..8_000u64 {
            let plain = Plaintext::issue(TokenKind::Click, 7, n + 1);
            counts[virtual_shard(&seal.seal(Utc::now(), plain), 8) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1_200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn debug_never_shows_the_key() {
        let text = format!("{:?}", seal());
        assert!(!text.contains("key"), "{text}");
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

    #[test]
    fn a_ring_opens_tokens_of_every_key_and_the_current_key_first() {
        let old = TokenSeal::derive(Some("old secret"), b"install", 0);
        let new = TokenSeal::derive(Some("new secret"), b"install", 0);
        assert_ne!(old.fingerprint(), new.fingerprint());
        assert_eq!(old.fingerprint().len(), 16);
        assert_eq!(
            old.fingerprint(),
            TokenSeal::derive(Some("old secret"), b"install", 5).fingerprint(),
            "the fingerprint names the key alone"
        );
        let ring = SealRing::new(new.clone(), vec![old.clone(), new.clone()]);
        assert_eq!(ring.keys().len(), 2, "a key given twice is kept once");
        let at = Utc.timestamp_millis_opt(1_790_000_000_000).unwrap();
        let click = |kind: TokenKind| matches!(kind, TokenKind::Click | TokenKind::Honeypot);
        for n in 0..500u64 {
            let plain = Plaintext::issue(TokenKind::Click, 7, n);
            // A new token opens under the current key, at the first try.
            let fresh = new.seal(at, plain);
            assert_eq!(
                ring.open_fitting(&fresh, click),
                Some(Opened::Sealed(plain))
            );
            // An old one is among the openings, whatever the current key
            // makes of it first.
            let before = old.seal(at, plain);
            assert!(ring
                .openings(&before, click)
                .any(|o| o == Opened::Sealed(plain)));
            assert!(ring.open_fitting(&before, click).is_some());
        }
        // A token of a key outside the ring mostly fits nothing.
        let stray = TokenSeal::derive(Some("stray"), b"install", 0);
        let refused = (0..500u64)
            .filter(|n| {
                let token = stray.seal(at, Plaintext::issue(TokenKind::Click, 7, *n));
                ring.open_fitting(&token, click).is_none()
            })
            .count();
        assert!(refused > 250, "{refused} of 500 refused");
    }
}
