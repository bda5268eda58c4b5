//! The shard function: which virtual shard a token belongs to, computed from
//! the token alone, so linktrack can route a lookup without asking the head.

/// `virtual_shard(token, n) = u32::from_be_bytes(token bytes 12..16) % n`,
/// the function docs/token.md fixes for every part that shards by token:
/// public bits of the token, uniform because they are sealed (or random, for
/// legacy tokens). The head's `links` is partitioned `BY LIST (shard)` on
/// this value, which linktrack computes at insert.
///
/// (The token module gets the same function with the sealed-token work;
/// this copy is the cluster's until the two are merged.)
pub fn shard_of(token: &[u8; 16], shards: u32) -> u32 {
    let bits = u32::from_be_bytes([token[12], token[13], token[14], token[15]]);
    bits % shards.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shard_is_the_big_endian_bytes_12_to_16_modulo_the_count() {
        let mut token = [0u8; 16];
        token[12..16].copy_from_slice(&1_000_003u32.to_be_bytes());
        assert_eq!(shard_of(&token, 15), 1_000_003 % 15);
        assert_eq!(shard_of(&token, 1), 0);
        assert_eq!(shard_of(&token, 0), 0, "no shard count is one shard");
        token[0..12].copy_from_slice(&[0xff; 12]);
        assert_eq!(
            shard_of(&token, 15),
            1_000_003 % 15,
            "only bytes 12..16 count"
        );
    }

    #[test]
    fn random_tokens_spread_evenly_over_the_shards() {
        let mut counts = [0u32; 15];
        for _ in 0..15_000 {
            counts[shard_of(crate::token::Token::new().as_bytes(), 15) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..=1200).contains(&c)),
            "{counts:?}"
        );
    }
}
