//! Which head partition MariaDB puts a row of a table `PARTITION BY KEY
//! (column)` in, computed by linktrack: the head's `events` is partitioned
//! by KEY (`event_id`), so an event written straight to a data node goes to
//! the data table the head would have chosen, and the head, reading that
//! partition, finds it there (a lookup by `event_id` prunes to it).
//!
//! MariaDB hashes a `BINARY(n)` key with the binary collation's hash
//! (`my_hash_sort_bin`: `nr1 = 1`, `nr2 = 4`, then for each byte
//! `nr1 ^= ((nr1 & 63) + nr2) * byte + (nr1 << 8); nr2 += 3` in 64 bits),
//! keeps the low 32 bits and takes them modulo the partition count (plain
//! KEY, not LINEAR KEY).
//! Checked against the server: the unit test's values were read from a
//! MariaDB 10.11 table, and `tests/it/spider_topology.rs` finds every
//! routed event through the head with a lookup pruned to one partition.

/// The 0-based partition of a `PARTITION BY KEY` table of `partitions`
/// partitions that holds a row whose (single, binary) key column is `key`.
pub fn key_partition(key: &[u8], partitions: u32) -> u32 {
    let (mut nr1, mut nr2) = (1u64, 4u64);
    for &byte in key {
        nr1 ^= ((nr1 & 63).wrapping_add(nr2))
            .wrapping_mul(u64::from(byte))
            .wrapping_add(nr1 << 8);
        nr2 = nr2.wrapping_add(3);
    }
    // MariaDB keeps the hash as a 32-bit value before the modulo.
    (nr1 as u32) % partitions.max(1)
}

/// Variants of an event id [`place_on`] tries; with the partitions spread
/// over N nodes, about N are needed.
const PLACING_TRIES: u16 = 4_096;

/// Change the last two bytes of `key` (random ones of a version-7 UUID,
/// below its counter, so ids stay ordered as made), when needed, so that
/// its partition among `partition_nodes.len()` lies on `node`
/// (`partition_nodes`: each partition's node). Left as it is when no
/// partition lies there.
pub(super) fn place_on(key: &mut [u8; 16], partition_nodes: &[usize], node: usize) {
    let count = partition_nodes.len() as u32;
    if !partition_nodes.contains(&node) {
        return;
    }
    let original = *key;
    for variant in 0..PLACING_TRIES {
        let mut candidate = original;
        let [high, low] = variant.to_be_bytes();
        candidate[14] ^= high;
        candidate[15] ^= low;
        let partition = key_partition(&candidate, count) as usize;
        if partition_nodes.get(partition) == Some(&node) {
            *key = candidate;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(hex: &str) -> Vec<u8> {
        hex::decode(hex).unwrap()
    }

    /// Partitions MariaDB 10.11 chose for `UNHEX(MD5(n))` rows of a
    /// `BINARY(16)` column, `PARTITION BY KEY` with 15 and with 3 partitions.
    #[test]
    fn partitions_are_the_ones_mariadb_chose() {
        for (hex, fifteen) in [
            ("02522A2B2726FB0A03BB19F2D8D9524D", 14),
            ("0F28B5D49B3020AFEECD95B4009ADF4C", 14),
            ("1385974ED5904A438616FF7BDB3F7439", 7),
            ("182BE0C5CDCD5072BB1864CDEE4D3D6E", 14),
            ("1C383CD30B7C298AB50293ADFECB7B18", 0),
            ("1FF8A7B5DC7A7D1F0ED65AAA29C04B1E", 14),
        ] {
            assert_eq!(key_partition(&id(hex), 15), fifteen, "{hex}");
        }
        for (hex, three) in [
            ("A87FF679A2F3E71D9181A67B7542122C", 0),
            ("C4CA4238A0B923820DCC509A6F75849B", 1),
            ("C81E728D9D4C2F636F067F89CC14862C", 1),
            ("ECCBC87E4B5CE2FE28308FD9F2A7BAF3", 1),
        ] {
            assert_eq!(key_partition(&id(hex), 3), three, "{hex}");
        }
        assert_eq!(key_partition(b"x", 0), 0, "no count is one partition");
    }

    /// Every id lands on the node asked for, whichever node of three holds
    /// which partitions, and only its last two bytes change.
    #[test]
    fn ids_are_placed_on_the_node_asked_for() {
        let nodes: Vec<usize> = (0..15).map(|p| p % 3).collect();
        let uneven = [0, 0, 1, 2, 2, 2, 0, 1, 2, 0, 0, 0, 2, 1, 0];
        for layout in [&nodes[..], &uneven[..]] {
            for n in 0u32..3_000 {
                let original: [u8; 16] = *uuid::Uuid::now_v7().as_bytes();
                let node = (n % 3) as usize;
                let mut id = original;
                place_on(&mut id, layout, node);
                assert_eq!(layout[key_partition(&id, 15) as usize], node, "{n}");
                assert_eq!(id[..14], original[..14]);
            }
        }
        let mut id = [7; 16];
        place_on(&mut id, &[0, 0, 0], 1);
        assert_eq!(id, [7; 16], "no partition on the node: unchanged");
    }
}
