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
//!
//! One file per stage: the token made, parsed and dated (`uuid_v7.rs`),
//! what it seals (`plaintext.rs`), the seal and its key's fingerprint
//! (`seal.rs`) over its permutation (`feistel.rs`), the key ring a server
//! opens with (`ring.rs`) and its policy (`ring_policy.rs`, refusals in
//! `key_refusal.rs`), the VERP bounce address (`bounce_address.rs`)
//! and the Spider shard of a token (`virtual_shard.rs`).

mod bounce_address;
mod feistel;
mod key_refusal;
mod plaintext;
mod ring;
mod ring_policy;
mod seal;
mod uuid_v7;
mod virtual_shard;

pub use bounce_address::{bounce_address, token_of_bounce_address, BOUNCE_LOCAL_PREFIX};
pub use key_refusal::KeyRefusal;
pub use plaintext::Plaintext;
pub use ring::SealRing;
pub use ring_policy::{
    CurrentSecret, Decision, KeyRecord, NewKey, Purpose, RingKeys, RingPolicy, Verdict,
};
pub use seal::{Opened, TokenSeal};
pub use uuid_v7::{Token, TokenError, TOKEN_HEX_LEN};
pub use virtual_shard::virtual_shard;

#[cfg(test)]
mod tests;
