//! The search tables of the IQ2 and IQ3 encoders, as ggml's `iq2xs_init_impl` / `iq3xs_init_impl`
//! build them: every point of the lattice of `W` levels (2 bits each for the 8-value IQ2 grids, 3
//! for the 4-value IQ3 grids) either is a codeword of the grid or has a list of its nearest
//! codewords (all those within the `nwant` smallest distances). Built once, at first use.

use std::sync::OnceLock;

use super::grids::{IQ1S, IQ2S, IQ2XS, IQ2XXS, IQ3S, IQ3XXS};

/// A codebook of `W`-level codewords with its lattice map and neighbour lists.
pub(super) struct Grid<const W: usize> {
    /// Bits per level in a lattice point.
    bits: usize,
    /// The largest level of a codeword.
    top: i8,
    /// The levels of each codeword.
    levels: Vec<[i8; W]>,
    /// The codeword at each lattice point, if one is there.
    map: Vec<Option<u16>>,
    /// For each point off the grid whose levels are all at most the largest codeword level, its
    /// nearest codewords in ggml's order (empty elsewhere).
    neighbours: Vec<Vec<u16>>,
}

impl<const W: usize> Grid<W> {
    /// Builds the tables of a codebook whose values `v` stand for the levels `level(v)`, keeping
    /// the codewords within the `nwant` smallest distances of each point off the grid.
    fn new(codebook: &[[i8; W]], level: fn(i8) -> i8, nwant: usize) -> Grid<W> {
        let levels: Vec<[i8; W]> = codebook.iter().map(|c| c.map(level)).collect();
        let top = levels.iter().flatten().copied().max().unwrap_or(0);
        let bits = (u8::BITS - (top as u8).leading_zeros()) as usize;
        let mut grid = Grid { bits, top, levels, map: vec![None; 1 << (bits * W)], neighbours: Vec::new() };
        for j in 0..grid.levels.len() {
            let u = grid.point(&grid.levels[j]);
            grid.map[u] = Some(j as u16);
        }
        grid.neighbours = (0..grid.map.len())
            .map(|u| {
                let pos: [i8; W] = std::array::from_fn(|k| (u >> (bits * k) & ((1 << bits) - 1)) as i8);
                if grid.map[u].is_some() || pos.iter().any(|&p| p > top) {
                    Vec::new()
                } else {
                    nearest(&grid.levels, &pos, nwant)
                }
            })
            .collect();
        grid
    }

    /// The packed lattice point of `W` levels: level `i` at bit `bits · i`.
    #[inline(always)]
    pub(super) fn point(&self, l: &[i8]) -> usize {
        l.iter().take(W).enumerate().fold(0, |u, (i, &l)| u | (l as usize) << (self.bits * i))
    }

    /// The largest level of a codeword (`kMaxQ - 1` of ggml's searches).
    #[inline(always)]
    pub(super) fn top(&self) -> i32 {
        i32::from(self.top)
    }

    /// The codeword at lattice point `u`, if any.
    #[inline(always)]
    pub(super) fn at(&self, u: usize) -> Option<u16> {
        self.map[u]
    }

    /// The levels of codeword `j`.
    #[inline(always)]
    pub(super) fn levels(&self, j: u16) -> &[i8; W] {
        &self.levels[usize::from(j)]
    }

    /// ggml's `iq2_find_best_neighbour` / `iq3_find_best_neighbour`: the neighbour of point `u`
    /// (off the grid) whose values `scale · (2l + 1)` are nearest `xval` in the `weight`ed squared
    /// distance (the first on ties).
    pub(super) fn best_neighbour(&self, u: usize, xval: &[f32], weight: &[f32], scale: f32) -> u16 {
        self.best_neighbour_by(u, xval, weight, scale, |l| f32::from(2 * l + 1))
    }

    /// [`Grid::best_neighbour`] with the values `scale · value(l)` (ggml's `iq1_find_best_neighbour2`
    /// with IQ1's shifted levels).
    pub(super) fn best_neighbour_by(
        &self,
        u: usize,
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        value: impl Fn(i8) -> f32,
    ) -> u16 {
        let list = &self.neighbours[u];
        let (mut best_d2, mut best) = (f32::MAX, list[0]);
        for &j in list {
            let mut d2 = 0.0f32;
            for ((&l, &x), &w) in self.levels(j).iter().zip(xval).zip(weight) {
                let diff = scale * value(l) - x;
                d2 += w * diff * diff;
            }
            if d2 < best_d2 {
                best_d2 = d2;
                best = j;
            }
        }
        best
    }
}

/// The codewords nearest the lattice point of levels `pos`, ordered by (distance, index), up to
/// the `nwant`-th distinct distance.
fn nearest<const W: usize>(levels: &[[i8; W]], pos: &[i8; W], nwant: usize) -> Vec<u16> {
    let mut dist: Vec<(i32, u16)> = levels
        .iter()
        .enumerate()
        .map(|(j, l)| (l.iter().zip(pos).map(|(&l, &p)| 4 * (i32::from(l) - i32::from(p)).pow(2)).sum(), j as u16))
        .collect();
    dist.sort_unstable();
    let mut out = Vec::new();
    let (mut d2, mut nhave) = (dist[0].0, 1);
    for (d, j) in dist {
        if d > d2 {
            if nhave == nwant {
                break;
            }
            d2 = d;
            nhave += 1;
        }
        out.push(j);
    }
    out
}

/// The level of an IQ2 codebook value (8, 25 or 43).
fn iq2_level(v: i8) -> i8 {
    v / 17
}

/// The IQ2_XXS tables (256 codewords; two distances of neighbours).
pub(super) fn iq2_xxs() -> &'static Grid<8> {
    static G: OnceLock<Grid<8>> = OnceLock::new();
    G.get_or_init(|| Grid::new(&IQ2XXS, iq2_level, 2))
}

/// The IQ2_XS tables (512 codewords; two distances of neighbours).
pub(super) fn iq2_xs() -> &'static Grid<8> {
    static G: OnceLock<Grid<8>> = OnceLock::new();
    G.get_or_init(|| Grid::new(&IQ2XS, iq2_level, 2))
}

/// The IQ2_S tables (1024 codewords; one distance of neighbours).
pub(super) fn iq2_s() -> &'static Grid<8> {
    static G: OnceLock<Grid<8>> = OnceLock::new();
    G.get_or_init(|| Grid::new(&IQ2S, iq2_level, 1))
}

/// The IQ1_S / IQ1_M tables (2048 codewords of levels `v + 1` for the values -1, 0, 1; three distances of
/// neighbours).
pub(super) fn iq1() -> &'static Grid<8> {
    static G: OnceLock<Grid<8>> = OnceLock::new();
    G.get_or_init(|| Grid::new(&IQ1S, |v| v + 1, 3))
}

/// The IQ3_XXS tables (256 codewords of values `8l + 4`, 62 for 7; two distances of neighbours).
pub(super) fn iq3_xxs() -> &'static Grid<4> {
    static G: OnceLock<Grid<4>> = OnceLock::new();
    G.get_or_init(|| Grid::new(&IQ3XXS, |v| v / 8, 2))
}

/// The IQ3_S tables (512 codewords of values `2l + 1`; three distances of neighbours).
pub(super) fn iq3_s() -> &'static Grid<4> {
    static G: OnceLock<Grid<4>> = OnceLock::new();
    G.get_or_init(|| Grid::new(&IQ3S, |v| v / 2, 3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lattice_points_match_ggml_kgrid() {
        // The first, second and last entries of kgrid_256 / kgrid_512 in iq3xs_init_impl and of
        // kgrid_2bit_256 / _512 / _1024 in iq2xs_init_impl.
        fn p<const W: usize>(g: &Grid<W>, j: u16) -> usize {
            g.point(g.levels(j))
        }
        assert_eq!([p(iq3_xxs(), 0), p(iq3_xxs(), 1), p(iq3_xxs(), 255)], [0, 2, 3992]);
        assert_eq!([p(iq3_s(), 0), p(iq3_s(), 1), p(iq3_s(), 511)], [0, 1, 4032]);
        assert_eq!([p(iq2_xxs(), 0), p(iq2_xxs(), 1), p(iq2_xxs(), 255)], [0, 2, 43268]);
        assert_eq!([p(iq2_xs(), 0), p(iq2_xs(), 1), p(iq2_xs(), 511)], [0, 2, 43690]);
        assert_eq!([p(iq2_s(), 0), p(iq2_s(), 1), p(iq2_s(), 1023)], [0, 2, 43690]);
        assert_eq!([p(iq1(), 0), p(iq1(), 6), p(iq1(), 2047)], [0, 21, 43690]);
    }

    #[test]
    fn points_off_the_grid_have_neighbours() {
        fn check<const W: usize>(g: &Grid<W>, top: i32) {
            assert_eq!(g.top(), top);
            let mask = (1 << g.bits) - 1;
            for u in 0..g.map.len() {
                let inside = (0..W).all(|k| (u >> (g.bits * k) & mask) as i32 <= top);
                assert_eq!(inside && g.at(u).is_none(), !g.neighbours[u].is_empty(), "{u}");
            }
        }
        check(iq3_xxs(), 7);
        check(iq3_s(), 7);
        for g in [iq2_xxs(), iq2_xs(), iq2_s(), iq1()] {
            check(g, 2);
        }
    }
}
