//! The token's tests: parsing, dates, the seal and its permutation, the
//! key ring and bounce addresses.

use super::feistel::{Feistel, HALF_MASK, ROUNDS};
use super::*;
use crate::kind::TokenKind;
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use proptest::prelude::*;
use uuid::Uuid;

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

/// Milliseconds in a UTC day.
const MS_PER_DAY: i64 = 86_400_000;

/// `Token::is_expired` as it was written, with dates.
fn expired_by_dates(token: &Token, today: NaiveDate, keep_days: u32) -> bool {
    match today.checked_sub_days(chrono::Days::new(u64::from(keep_days))) {
        Some(oldest_kept) => token.date() < oldest_kept,
        None => false,
    }
}

/// The request path's check as it was written with dates.
fn age_by_dates(token: &Token, now: DateTime<Utc>, keep_days: u32) -> Option<bool> {
    let today = now.date_naive();
    let tomorrow = today.succ_opt().unwrap_or(today);
    if token.date() > tomorrow {
        return None;
    }
    Some(expired_by_dates(token, today, keep_days))
}

/// The request path's check as the server counted it before
/// (`server/state.rs`'s `token_age`), in days from milliseconds.
fn age_by_millis(token_millis: u64, now: DateTime<Utc>, keep_days: u32) -> Option<bool> {
    let token_day = token_millis as i64 / MS_PER_DAY;
    let today = now.timestamp_millis().div_euclid(MS_PER_DAY);
    if token_day > today + 1 {
        return None;
    }
    Some(token_day < today - i64::from(keep_days))
}

proptest! {
    /// Tokens around today, the retention edge and midnight, and any
    /// token and time at all, are judged as the dates judged them and as
    /// the server's own count in milliseconds did, by both of the token's
    /// checks.
    #[test]
    fn token_ages_are_what_the_dates_and_the_old_count_said(
        now_ms in -200_000_000_000_000i64..200_000_000_000_000,
        offset_ms in -40 * MS_PER_DAY..3 * MS_PER_DAY,
        any_ms in 0u64..(1 << 48),
        keep_days in prop_oneof![0u32..40, Just(u32::MAX), any::<u32>()],
        random in any::<[u8; 10]>(),
    ) {
        let now = DateTime::from_timestamp_millis(now_ms).unwrap();
        let near = u64::try_from(now_ms + offset_ms).unwrap_or(0) & ((1 << 48) - 1);
        for ms in [near, any_ms] {
            let token = Token::from_parts(ms, random);
            let age = token.is_expired_at(now, keep_days);
            prop_assert_eq!(age, age_by_dates(&token, now, keep_days));
            prop_assert_eq!(age, age_by_millis(token.unix_millis(), now, keep_days));
            prop_assert_eq!(
                token.is_expired(now.date_naive(), keep_days),
                expired_by_dates(&token, now.date_naive(), keep_days)
            );
        }
    }
}
