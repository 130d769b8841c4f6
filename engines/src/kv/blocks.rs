//! Block allocation: a free list of fixed-size blocks and the per-sequence table of blocks it holds.

use super::KvError;

/// Hands out fixed-size KV blocks from a pool of `num_blocks`.
#[derive(Debug)]
pub struct BlockAllocator {
    free: Vec<u32>,
    num_blocks: usize,
    block_size: usize,
}

impl BlockAllocator {
    /// A pool of `num_blocks` blocks of `block_size` tokens, all free.
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        assert!(block_size > 0, "block size must be positive");
        BlockAllocator { free: (0..num_blocks as u32).rev().collect(), num_blocks, block_size }
    }

    /// Blocks not held by any sequence.
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// Grows `table` to hold `tokens` tokens; on failure the table is unchanged.
    pub fn grow(&mut self, table: &mut BlockTable, tokens: usize) -> Result<(), KvError> {
        let needed = self.blocks_for(tokens).saturating_sub(table.blocks.len());
        if needed > self.free.len() {
            return Err(KvError::OutOfBlocks { needed, free: self.free.len(), total: self.num_blocks });
        }
        let at = self.free.len() - needed;
        table.blocks.extend(self.free.drain(at..).rev());
        table.block_size = self.block_size;
        Ok(())
    }

    /// Returns every block of `table` to the pool, leaving it empty.
    pub fn release(&mut self, table: &mut BlockTable) {
        self.free.extend(table.blocks.drain(..).rev());
    }
}

/// The blocks one sequence holds, in position order: position `p` lives in block `p / block_size`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockTable {
    blocks: Vec<u32>,
    block_size: usize,
}

impl BlockTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The blocks held, in position order.
    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }

    /// Tokens the held blocks can store.
    pub fn capacity(&self) -> usize {
        self.blocks.len() * self.block_size
    }

    /// The cache slot (block × block size + offset) of position `pos`; `pos` must be below the capacity.
    pub fn slot(&self, pos: usize) -> usize {
        self.blocks[pos / self.block_size] as usize * self.block_size + pos % self.block_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_releases_and_refuses_when_full() {
        let mut pool = BlockAllocator::new(4, 16);
        let mut a = BlockTable::new();
        let mut b = BlockTable::new();
        pool.grow(&mut a, 17).unwrap();
        assert_eq!(a.blocks(), &[0, 1]);
        assert_eq!(a.capacity(), 32);
        assert_eq!(a.slot(17), 17);
        pool.grow(&mut b, 1).unwrap();
        assert_eq!(b.slot(3), 2 * 16 + 3);
        pool.grow(&mut a, 32).unwrap(); // already enough
        assert_eq!(pool.free_blocks(), 1);
        let e = pool.grow(&mut b, 48).unwrap_err();
        assert!(matches!(e, KvError::OutOfBlocks { needed: 2, free: 1, total: 4 }), "{e}");
        assert_eq!(b.blocks().len(), 1, "a failed grow leaves the table as it was");
        pool.release(&mut a);
        assert_eq!(pool.free_blocks(), 3);
        pool.grow(&mut b, 48).unwrap();
        assert_eq!(b.blocks(), &[2, 0, 1]);
        assert_eq!(b.slot(20), 4); // position 20 is in the table's second block, block 0
    }
}
