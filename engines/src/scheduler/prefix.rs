//! Content hashes of full prompt blocks for the prefix cache: each block's hash chains the salt, the
//! previous block's hash and its own tokens, so equal hashes mean equal prefixes (up to 64-bit collisions).

use std::hash::{DefaultHasher, Hash, Hasher};

/// The chained hash of every full block of `tokens` (a trailing partial block gets none).
pub(super) fn block_hashes(salt: u64, tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut prev = None;
    tokens
        .chunks_exact(block_size)
        .map(|block| {
            // SipHash with fixed keys: the same in every run and on every thread.
            let mut h = DefaultHasher::new();
            (salt, prev, block).hash(&mut h);
            let hash = h.finish();
            prev = Some(hash);
            hash
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_chain_blocks_and_depend_on_the_salt() {
        let a = block_hashes(0, &[1, 2, 3, 4, 5], 2);
        assert_eq!(a.len(), 2, "the partial block has no hash");
        assert_eq!(a, block_hashes(0, &[1, 2, 3, 4], 2));
        let b = block_hashes(0, &[1, 2, 3, 9], 2);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        let c = block_hashes(0, &[7, 7, 3, 4], 2);
        assert_ne!(a[1], c[1], "a block's hash covers every block before it");
        assert!(block_hashes(1, &[1, 2, 3, 4], 2).iter().zip(&a).all(|(x, y)| x != y));
    }
}
