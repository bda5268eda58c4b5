//! The cost of opening a sealed token (docs/token.md): the request
//! extractor opens every token it serves, so this is added to every hit.
//!
//! `cargo run --release --example bench_token [-- OPENS]`

use linktrack::kind::TokenKind;
use linktrack::token::{Opened, Plaintext, Token, TokenSeal};
use std::time::Instant;

fn main() {
    let opens: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let seal = TokenSeal::derive(Some("bench secret"), &[7; 32], 0);
    let tokens: Vec<Token> = (0..1024u64)
        .map(|n| {
            seal.seal(
                chrono::Utc::now(),
                Plaintext::issue(TokenKind::Click, 42, n + 1),
            )
        })
        .collect();
    let started = Instant::now();
    let mut clicks = 0usize;
    for n in 0..opens {
        let token = &tokens[n % tokens.len()];
        if let Opened::Sealed(plain) = seal.open(std::hint::black_box(token)) {
            clicks += usize::from(plain.token_kind() == Some(TokenKind::Click));
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(clicks, opens, "every token opens to its click");
    println!(
        "{opens} opens in {elapsed:?}: {:.0} ns per open",
        elapsed.as_nanos() as f64 / opens as f64
    );
}
