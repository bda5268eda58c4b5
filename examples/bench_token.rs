//! The cost of opening a sealed token (docs/token.md): the request
//! extractor opens every token it serves, so this is added to every hit.
//! Measured for one key, as before key rings, and through a ring of three
//! keys (docs/token.md, "Rotating the secret"): a token of the current
//! key, the hot path after a rotation, and one of the oldest key.
//!
//! `cargo run --release --example bench_token [-- OPENS]`

use linktrack::kind::TokenKind;
use linktrack::token::{Opened, Plaintext, SealRing, Token, TokenSeal};
use std::time::Instant;

fn main() {
    let opens: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let seal = TokenSeal::derive(Some("bench secret"), &[7; 32], 0);
    let older = TokenSeal::derive(Some("bench secret, rotated once"), &[7; 32], 0);
    let oldest = TokenSeal::derive(Some("bench secret, rotated twice"), &[7; 32], 0);
    let ring = SealRing::new(seal.clone(), vec![older, oldest.clone()]);
    let tokens_of = |seal: &TokenSeal| -> Vec<Token> {
        (0..1024u64)
            .map(|n| {
                seal.seal(
                    chrono::Utc::now(),
                    Plaintext::issue(TokenKind::Click, 42, n + 1),
                )
            })
            .collect()
    };
    let current = tokens_of(&seal);
    let old = tokens_of(&oldest);
    let fits = |kind: TokenKind| matches!(kind, TokenKind::Click | TokenKind::Honeypot);
    type Open<'a> = &'a dyn Fn(&Token) -> Option<Opened>;
    let rounds: [(&str, Open, &[Token]); 3] = [
        ("one key", &|t| Some(seal.open(t)), &current),
        (
            "ring of 3, current key's token",
            &|t| ring.open_fitting(t, fits),
            &current,
        ),
        (
            "ring of 3, oldest key's token",
            &|t| ring.open_fitting(t, fits),
            &old,
        ),
    ];
    for (name, open, tokens) in rounds {
        let started = Instant::now();
        let mut opened = 0usize;
        for n in 0..opens {
            let token = &tokens[n % tokens.len()];
            if let Some(Opened::Sealed(_)) = open(std::hint::black_box(token)) {
                opened += 1;
            }
        }
        let elapsed = started.elapsed();
        assert!(opened > opens / 2, "{name}: {opened} of {opens} opened");
        println!(
            "{name}: {opens} opens in {elapsed:?}: {:.0} ns per open",
            elapsed.as_nanos() as f64 / opens as f64
        );
    }
}
