//! The search tables of the IQ3 encoders, as ggml's `iq3xs_init_impl` builds them: every point of
//! the 4-value, 3-bit lattice either is a codeword of the grid or has a list of its nearest
//! codewords (all those within the two (IQ3_XXS) or three (IQ3_S) smallest distances).

use std::sync::OnceLock;

use super::grids::{IQ3S, IQ3XXS};

/// Points of the lattice: four 3-bit levels packed as `l0 | l1 << 3 | l2 << 6 | l3 << 9`.
const POINTS: usize = 4096;

/// A codebook with its lattice map and neighbour lists.
pub(super) struct Grid3 {
    /// The levels (0..=7) of each codeword.
    levels: Vec<[i8; 4]>,
    /// The codeword at each lattice point, if one is there.
    map: Vec<Option<u16>>,
    /// For each point off the grid, its nearest codewords in ggml's order (empty on the grid).
    neighbours: Vec<Vec<u16>>,
}

/// The packed lattice point of four levels.
#[inline(always)]
pub(super) fn point(l: &[i8]) -> usize {
    l.iter().take(4).enumerate().fold(0, |u, (i, &l)| u | (l as usize) << (3 * i))
}

impl Grid3 {
    /// Builds the tables of a codebook whose values `v` stand for the levels `v / step`, keeping
    /// the codewords within the `nwant` smallest distances of each point off the grid.
    fn new(codebook: &[[i8; 4]], step: i8, nwant: usize) -> Grid3 {
        let levels: Vec<[i8; 4]> = codebook.iter().map(|c| c.map(|v| v / step)).collect();
        let mut map = vec![None; POINTS];
        for (j, l) in levels.iter().enumerate() {
            map[point(l)] = Some(j as u16);
        }
        let neighbours =
            (0..POINTS).map(|u| if map[u].is_some() { Vec::new() } else { nearest(&levels, u, nwant) }).collect();
        Grid3 { levels, map, neighbours }
    }

    /// The codeword at lattice point `u`, if any.
    #[inline(always)]
    pub(super) fn at(&self, u: usize) -> Option<u16> {
        self.map[u]
    }

    /// The levels of codeword `j`.
    #[inline(always)]
    pub(super) fn levels(&self, j: u16) -> &[i8; 4] {
        &self.levels[usize::from(j)]
    }

    /// ggml's `iq3_find_best_neighbour`: the neighbour of point `u` (off the grid) whose values
    /// `scale · (2l + 1)` are nearest `xval` in the `weight`ed squared distance (the first on ties).
    pub(super) fn best_neighbour(&self, u: usize, xval: &[f32], weight: &[f32], scale: f32) -> u16 {
        let list = &self.neighbours[u];
        let (mut best_d2, mut best) = (f32::MAX, list[0]);
        for &j in list {
            let mut d2 = 0.0f32;
            for ((&l, &x), &w) in self.levels(j).iter().zip(xval).zip(weight) {
                let diff = scale * f32::from(2 * l + 1) - x;
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

/// The codewords nearest lattice point `u`, ordered by (distance, index), up to the `nwant`-th
/// distinct distance.
fn nearest(levels: &[[i8; 4]], u: usize, nwant: usize) -> Vec<u16> {
    let pos: [i32; 4] = std::array::from_fn(|k| (u >> (3 * k) & 7) as i32);
    let mut dist: Vec<(i32, u16)> = levels
        .iter()
        .enumerate()
        .map(|(j, l)| (l.iter().zip(&pos).map(|(&l, &p)| 4 * (i32::from(l) - p).pow(2)).sum(), j as u16))
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

/// The IQ3_XXS tables (256 codewords of values `8l + 4`, 62 for 7; two distances of neighbours).
pub(super) fn iq3_xxs() -> &'static Grid3 {
    static G: OnceLock<Grid3> = OnceLock::new();
    G.get_or_init(|| Grid3::new(&IQ3XXS, 8, 2))
}

/// The IQ3_S tables (512 codewords of values `2l + 1`; three distances of neighbours).
pub(super) fn iq3_s() -> &'static Grid3 {
    static G: OnceLock<Grid3> = OnceLock::new();
    G.get_or_init(|| Grid3::new(&IQ3S, 2, 3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lattice_points_match_ggml_kgrid() {
        // The first, second and last entries of kgrid_256 / kgrid_512 in iq3xs_init_impl.
        let p = |g: &Grid3, j: u16| point(g.levels(j));
        assert_eq!([p(iq3_xxs(), 0), p(iq3_xxs(), 1), p(iq3_xxs(), 255)], [0, 2, 3992]);
        assert_eq!([p(iq3_s(), 0), p(iq3_s(), 1), p(iq3_s(), 511)], [0, 1, 4032]);
    }

    #[test]
    fn points_off_the_grid_have_neighbours() {
        for g in [iq3_xxs(), iq3_s()] {
            for u in 0..POINTS {
                assert_eq!(g.at(u).is_none(), !g.neighbours[u].is_empty(), "{u}");
            }
        }
    }
}
