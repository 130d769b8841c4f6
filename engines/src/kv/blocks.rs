//! Block allocation: a pool of fixed-size blocks, each refcounted so sequences can share prompt-prefix blocks,
//! the per-sequence table of blocks it holds, and the cache of full blocks known by a content hash. A block
//! nobody holds stays cached (evictable, least recently used first) until a fresh block is needed and the
//! free list is empty.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use super::KvError;

/// Hands out fixed-size KV blocks from a pool of `num_blocks`.
#[derive(Debug)]
pub struct BlockAllocator {
    /// Blocks nobody holds and no hash names.
    free: Vec<u32>,
    /// Holders per block.
    refs: Vec<u32>,
    /// The content hash each cached block is known by.
    hash: Vec<Option<u64>>,
    /// Cached blocks by content hash.
    cached: HashMap<u64, u32>,
    /// Cached blocks nobody holds, by the tick they were released at (oldest first).
    evictable: BTreeMap<u64, u32>,
    /// The tick each evictable block was released at.
    released_at: Vec<u64>,
    /// Counts releases, for the LRU order.
    tick: u64,
    num_blocks: usize,
    block_size: usize,
}

impl BlockAllocator {
    /// A pool of `num_blocks` blocks of `block_size` tokens, all free.
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        assert!(block_size > 0, "block size must be positive");
        BlockAllocator {
            free: (0..num_blocks as u32).rev().collect(),
            refs: vec![0; num_blocks],
            hash: vec![None; num_blocks],
            cached: HashMap::new(),
            evictable: BTreeMap::new(),
            released_at: vec![0; num_blocks],
            tick: 0,
            num_blocks,
            block_size,
        }
    }

    /// Blocks not held by any sequence: free ones and cached ones that can be evicted.
    pub fn free_blocks(&self) -> usize {
        self.free.len() + self.evictable.len()
    }

    /// Blocks held by at least one sequence (a shared block counts once).
    pub fn used_blocks(&self) -> usize {
        self.num_blocks - self.free_blocks()
    }

    /// Blocks nobody holds that keep their content for the prefix cache.
    pub fn cached_blocks(&self) -> usize {
        self.evictable.len()
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// Grows `table` to hold `tokens` tokens with fresh blocks, evicting least recently used cached blocks
    /// once the free list is empty; on failure the table is unchanged.
    pub fn grow(&mut self, table: &mut BlockTable, tokens: usize) -> Result<(), KvError> {
        let needed = self.blocks_for(tokens).saturating_sub(table.blocks.len());
        if needed > self.free_blocks() {
            return Err(KvError::OutOfBlocks { needed, free: self.free_blocks(), total: self.num_blocks });
        }
        for _ in 0..needed {
            let b = match self.free.pop() {
                Some(b) => b,
                None => self.evict(),
            };
            self.refs[b as usize] = 1;
            table.blocks.push(b);
        }
        table.block_size = self.block_size;
        Ok(())
    }

    /// Drops `table`'s hold on each of its blocks, leaving it empty: a block nobody holds any more returns to
    /// the free list, or stays cached (evictable) when a hash names it.
    pub fn release(&mut self, table: &mut BlockTable) {
        self.truncate(table, 0);
    }

    /// Drops `table`'s hold on the blocks past the first ones holding `tokens` tokens, last first (so a chain's
    /// tail is evicted before its head); rolls back speculative positions that were rejected, without copies.
    pub fn truncate(&mut self, table: &mut BlockTable, tokens: usize) {
        let keep = self.blocks_for(tokens);
        while table.blocks.len() > keep {
            let Some(b) = table.blocks.pop() else { break };
            let i = b as usize;
            self.refs[i] -= 1;
            if self.refs[i] > 0 {
                continue;
            }
            if self.hash[i].is_some() {
                self.tick += 1;
                self.evictable.insert(self.tick, b);
                self.released_at[i] = self.tick;
            } else {
                self.free.push(b);
            }
        }
    }

    /// How many of the blocks named by `hashes`, in order, are cached (up to the first that is not).
    pub fn cached_prefix(&self, hashes: &[u64]) -> usize {
        hashes.iter().take_while(|h| self.cached.contains_key(h)).count()
    }

    /// Appends to the empty `table` the cached blocks named by `hashes`, in order, up to the first hash not
    /// cached; returns how many it took. The table then shares them: they must not be written.
    pub fn share(&mut self, table: &mut BlockTable, hashes: &[u64]) -> usize {
        debug_assert!(table.blocks.is_empty(), "prefix blocks go first");
        for h in hashes {
            let Some(&b) = self.cached.get(h) else { break };
            let i = b as usize;
            if self.refs[i] == 0 {
                self.evictable.remove(&self.released_at[i]);
            }
            self.refs[i] += 1;
            table.blocks.push(b);
        }
        table.block_size = self.block_size;
        table.blocks.len()
    }

    /// Names `table`'s block `index` (full, its tokens computed) by the content hash `hash`, so later tables can
    /// share it. Does nothing when the block already has a name or another block has this one.
    pub fn publish(&mut self, table: &BlockTable, index: usize, hash: u64) {
        let b = table.blocks[index];
        if self.hash[b as usize].is_none() && !self.cached.contains_key(&hash) {
            self.hash[b as usize] = Some(hash);
            self.cached.insert(hash, b);
        }
    }

    /// Takes the least recently released cached block out of the cache; there must be one.
    fn evict(&mut self) -> u32 {
        let (_, b) = self.evictable.pop_first().expect("an evictable block when the free list is empty");
        if let Some(h) = self.hash[b as usize].take() {
            self.cached.remove(&h);
        }
        b
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

    /// Positions `range` as runs of consecutive cache slots, one per block touched: (first position, its slot,
    /// length). The positions must be below the capacity.
    pub fn runs(&self, range: Range<usize>) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let mut p = range.start;
        std::iter::from_fn(move || {
            (p < range.end).then(|| {
                let len = (self.block_size - p % self.block_size).min(range.end - p);
                let run = (p, self.slot(p), len);
                p += len;
                run
            })
        })
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

    #[test]
    fn shared_blocks_are_refcounted() {
        let mut pool = BlockAllocator::new(4, 2);
        let mut a = BlockTable::new();
        pool.grow(&mut a, 4).unwrap();
        pool.publish(&a, 0, 10);
        pool.publish(&a, 1, 11);
        let mut b = BlockTable::new();
        assert_eq!(pool.cached_prefix(&[10, 11, 12]), 2);
        assert_eq!(pool.cached_prefix(&[11, 10]), 2);
        assert_eq!(pool.cached_prefix(&[12, 10]), 0, "stops at the first hash not cached");
        assert_eq!(pool.share(&mut b, &[10, 11, 12]), 2, "stops at the first hash not cached");
        assert_eq!(b.blocks(), a.blocks());
        pool.grow(&mut b, 6).unwrap();
        assert_eq!(pool.used_blocks(), 3, "shared blocks count once");
        pool.release(&mut a);
        assert_eq!(pool.used_blocks(), 3, "b still holds them");
        assert_eq!(pool.cached_blocks(), 0);
        pool.release(&mut b);
        assert_eq!((pool.used_blocks(), pool.cached_blocks(), pool.free_blocks()), (0, 2, 4));
        // A cached block nobody holds is shared again without being recomputed.
        let mut c = BlockTable::new();
        assert_eq!(pool.share(&mut c, &[10]), 1);
        assert_eq!((pool.used_blocks(), pool.cached_blocks()), (1, 1));
        // Publishing a hash some block already has, or naming a named block again, changes nothing.
        pool.grow(&mut c, 4).unwrap();
        pool.publish(&c, 1, 11);
        pool.publish(&c, 0, 99);
        let mut d = BlockTable::new();
        assert_eq!(pool.share(&mut d, &[99]), 0);
        assert_eq!(pool.share(&mut d, &[10, 11]), 2);
        assert_eq!(d.blocks(), &[c.blocks()[0], cached_block(&pool, 11)]);
    }

    #[test]
    fn truncate_drops_only_the_tail() {
        let mut pool = BlockAllocator::new(6, 2);
        let mut a = BlockTable::new();
        pool.grow(&mut a, 4).unwrap();
        pool.publish(&a, 0, 10);
        let mut b = BlockTable::new();
        assert_eq!(pool.share(&mut b, &[10]), 1);
        pool.grow(&mut b, 7).unwrap();
        assert_eq!((b.blocks().len(), pool.used_blocks()), (4, 5));
        pool.truncate(&mut b, 3);
        assert_eq!(b.blocks().len(), 2, "positions 0..3 need two blocks");
        assert_eq!(pool.used_blocks(), 3);
        pool.truncate(&mut b, 4);
        assert_eq!(b.blocks().len(), 2, "nothing to drop");
        pool.truncate(&mut a, 1);
        assert_eq!(a.blocks().len(), 1);
        assert_eq!(pool.used_blocks(), 2, "the shared block stays held by both");
        pool.release(&mut a);
        pool.release(&mut b);
        assert_eq!((pool.used_blocks(), pool.cached_blocks()), (0, 1));
    }

    /// Runs cover the positions in order, one per block touched, each slot the one `slot` gives.
    #[test]
    fn runs_split_positions_at_block_edges() {
        let mut pool = BlockAllocator::new(6, 4);
        let (mut a, mut b) = (BlockTable::new(), BlockTable::new());
        pool.grow(&mut b, 4).unwrap();
        pool.grow(&mut a, 12).unwrap();
        let runs: Vec<_> = a.runs(2..11).collect();
        assert_eq!(runs, vec![(2, a.slot(2), 2), (4, a.slot(4), 4), (8, a.slot(8), 3)]);
        for (p, slot, len) in runs {
            assert!((0..len).all(|k| a.slot(p + k) == slot + k));
        }
        assert_eq!(a.runs(5..5).count(), 0);
    }

    /// The block cached under `hash`.
    fn cached_block(pool: &BlockAllocator, hash: u64) -> u32 {
        pool.cached[&hash]
    }

    #[test]
    fn cached_blocks_are_evicted_least_recently_used_only_when_nothing_is_free() {
        let mut pool = BlockAllocator::new(3, 1);
        let (mut a, mut b) = (BlockTable::new(), BlockTable::new());
        pool.grow(&mut a, 1).unwrap();
        pool.publish(&a, 0, 1);
        pool.grow(&mut b, 1).unwrap();
        pool.publish(&b, 0, 2);
        pool.release(&mut a); // cached under 1, released first
        pool.release(&mut b); // cached under 2
        assert_eq!((pool.free_blocks(), pool.cached_blocks()), (3, 2));
        // The one free block goes first; then the least recently released cached one.
        let mut c = BlockTable::new();
        pool.grow(&mut c, 1).unwrap();
        assert_eq!(pool.cached_blocks(), 2);
        pool.grow(&mut c, 2).unwrap();
        assert_eq!(pool.cached_blocks(), 1);
        let mut d = BlockTable::new();
        assert_eq!(pool.share(&mut d, &[1]), 0, "hash 1 was evicted");
        assert_eq!(pool.share(&mut d, &[2]), 1, "hash 2 survived");
        // An evicted block comes back unnamed: releasing it frees it.
        pool.release(&mut c);
        assert_eq!((pool.free_blocks(), pool.cached_blocks()), (2, 0));
        let e = pool.grow(&mut c, 3).unwrap_err();
        assert!(matches!(e, KvError::OutOfBlocks { needed: 3, free: 2, total: 3 }), "{e}");
    }
}
