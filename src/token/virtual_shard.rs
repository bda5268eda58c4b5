//! Which of a Spider cluster's virtual shards a token's row lives on.

use super::uuid_v7::Token;

/// The Spider cluster's routing of a token to one of `n` virtual shards
/// (docs/token.md): its last four bytes, which are sealed (or random, for
/// legacy tokens) and so uniform, modulo `n`. `n = 0` is treated as 1.
pub fn virtual_shard(token: &Token, n: u32) -> u32 {
    let b = token.as_bytes();
    u32::from_be_bytes([b[12], b[13], b[14], b[15]]) % n.max(1)
}
