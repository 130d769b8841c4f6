//! The batched searches against straight transcriptions of the C loops, and their edge cases.

use super::*;

/// Straight one-pass-at-a-time transcriptions of the C searches, to check the batched ones.
mod reference {
    use super::super::{nearest_int, GROUP_MAX_EPS};

    #[allow(clippy::too_many_arguments)]
    pub fn make_qkx2_quants<const N: usize>(
        nmax: i32,
        x: &[f32; N],
        weights: &[f32; N],
        l: &mut [u8; N],
        rmin: f32,
        rdelta: f32,
        nstep: i32,
        use_mad: bool,
    ) -> (f32, f32) {
        let (mut min, mut max) = (x[0], x[0]);
        let mut sum_w = weights[0];
        let mut sum_x = sum_w * x[0];
        for i in 1..N {
            if x[i] < min {
                min = x[i];
            }
            if x[i] > max {
                max = x[i];
            }
            sum_w += weights[i];
            sum_x += weights[i] * x[i];
        }
        if min > 0.0 {
            min = 0.0;
        }
        if max == min {
            l.fill(0);
            return (0.0, -min);
        }
        let err = |d: f32| if use_mad { d.abs() } else { d * d };
        let iscale = nmax as f32 / (max - min);
        let mut scale = 1.0 / iscale;
        let mut best_error = 0.0f32;
        for i in 0..N {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            l[i] = q as u8;
            best_error += weights[i] * err(scale * q as f32 + min - x[i]);
        }
        let mut laux = [0u8; N];
        for is in 0..=nstep {
            let iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
            let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
            for i in 0..N {
                let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
                laux[i] = q as u8;
                let w = weights[i];
                sum_l += w * q as f32;
                sum_l2 += w * q as f32 * q as f32;
                sum_xl += w * q as f32 * x[i];
            }
            let det = sum_w * sum_l2 - sum_l * sum_l;
            if det > 0.0 {
                let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
                let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
                if this_min > 0.0 {
                    this_min = 0.0;
                    this_scale = sum_xl / sum_l2;
                }
                let mut cur_error = 0.0f32;
                for i in 0..N {
                    cur_error += weights[i] * err(this_scale * laux[i] as f32 + this_min - x[i]);
                }
                if cur_error < best_error {
                    *l = laux;
                    best_error = cur_error;
                    scale = this_scale;
                    min = this_min;
                }
            }
        }
        (scale, -min)
    }

    pub fn make_qx_quants<const N: usize>(nmax: i32, x: &[f32; N], weights: &[f32; N], l: &mut [u8; N]) -> f32 {
        let (mut max, mut amax) = (0.0f32, 0.0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax < GROUP_MAX_EPS {
            l.fill(0);
            return 0.0;
        }
        let pass = |iscale: f32, l: &mut [u8; N], store: bool| {
            let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
            for i in 0..N {
                let q = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
                if store {
                    l[i] = (q + nmax) as u8;
                }
                let w = weights[i];
                sumlx += w * x[i] * q as f32;
                suml2 += w * q as f32 * q as f32;
            }
            (sumlx, suml2)
        };
        let (sumlx, suml2) = pass(-(nmax as f32) / max, l, true);
        let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
        let mut best = scale * sumlx;
        for is in -9..=9 {
            if is == 0 {
                continue;
            }
            let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
            let (sumlx, suml2) = pass(iscale, l, false);
            if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
                pass(iscale, l, true);
                scale = sumlx / suml2;
                best = scale * sumlx;
            }
        }
        scale
    }
}

/// Deterministic groups of many shapes: Gaussian, heavy-tailed, one-signed, sparse,
/// constant, integer grids, outliers.
fn groups<const N: usize>(count: usize) -> Vec<[f32; N]> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    };
    (0..count)
        .map(|g| {
            let mut x: [f32; N] = std::array::from_fn(|_| {
                let u = uniform() - 0.5;
                match g % 8 {
                    0 => u,
                    1 => u * u * u * 100.0,
                    2 => u.abs() + 0.01,
                    3 => -(u.abs()) * 1e-3,
                    4 => (u * 16.0).round(),
                    5 if uniform() < 0.8 => 0.0,
                    6 => 0.25,
                    _ => u * 1e-20,
                }
            });
            if g % 5 == 0 {
                x[g % N] = 50.0 * (uniform() - 0.5);
            }
            x
        })
        .collect()
}

#[test]
fn batched_qkx2_equals_reference() {
    for x in groups::<32>(3000) {
        let mut sum_x2 = 0.0f32;
        for v in &x {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let w: [f32; 32] = std::array::from_fn(|i| av_x + x[i].abs());
        for (nmax, rmin, nstep) in [(15, -1.0, 20), (31, -0.5, 15)] {
            let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
            let got = make_qkx2_quants::<32, false>(nmax, &x, &w, &mut a, rmin, 0.1, nstep);
            let want = reference::make_qkx2_quants(nmax, &x, &w, &mut b, rmin, 0.1, nstep, false);
            assert_eq!((got.0.to_bits(), got.1.to_bits(), a), (want.0.to_bits(), want.1.to_bits(), b), "{x:?}");
        }
    }
    for x in groups::<16>(3000) {
        let w: [f32; 16] = std::array::from_fn(|i| x[i].abs());
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        let got = make_qkx2_quants::<16, true>(3, &x, &w, &mut a, -0.5, 0.1, 15);
        let want = reference::make_qkx2_quants(3, &x, &w, &mut b, -0.5, 0.1, 15, true);
        assert_eq!((got.0.to_bits(), got.1.to_bits(), a), (want.0.to_bits(), want.1.to_bits(), b), "{x:?}");
    }
}

#[test]
fn batched_qx_equals_reference() {
    for x in groups::<16>(5000) {
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        let got = make_qx_quants(32, &x, &squares(&x), &mut a);
        let want = reference::make_qx_quants(32, &x, &squares(&x), &mut b);
        assert_eq!((got.to_bits(), a), (want.to_bits(), b), "{x:?}");
    }
    // With importance weights, as Q3_K (nmax 4 and 32), Q4_0 (8) and Q5_0 (16) call it.
    for (g, x) in groups::<16>(3000).into_iter().enumerate() {
        let w: [f32; 16] = std::array::from_fn(|i| ((g * 7 + i * 13) % 17) as f32 * 0.3 * (1.0 + x[i] * x[i]).sqrt());
        for nmax in [4, 32] {
            let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
            let got = make_qx_quants(nmax, &x, &w, &mut a);
            let want = reference::make_qx_quants(nmax, &x, &w, &mut b);
            assert_eq!((got.to_bits(), a), (want.to_bits(), b), "{x:?}");
        }
    }
    for (g, x) in groups::<32>(2000).into_iter().enumerate() {
        let w: [f32; 32] = std::array::from_fn(|i| ((g + i * 5) % 9) as f32 * (0.5 + x[i] * x[i]).sqrt());
        for nmax in [8, 16] {
            let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
            let got = make_qx_quants(nmax, &x, &w, &mut a);
            let want = reference::make_qx_quants(nmax, &x, &w, &mut b);
            assert_eq!((got.to_bits(), a), (want.to_bits(), b), "{x:?}");
        }
    }
}

#[test]
fn batched_qkx3_parameters_equal_reference() {
    // make_qkx3_quants with importance weights: rmin -0.9, rdelta 0.05, 36 steps.
    for (g, x) in groups::<32>(2000).into_iter().enumerate() {
        let w: [f32; 32] = std::array::from_fn(|i| ((g * 3 + i * 11) % 13) as f32 * (0.2 + x[i] * x[i]).sqrt());
        for nmax in [15, 31] {
            let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
            let got = make_qkx2_quants::<32, false>(nmax, &x, &w, &mut a, -0.9, 0.05, 36);
            let want = reference::make_qkx2_quants(nmax, &x, &w, &mut b, -0.9, 0.05, 36, false);
            assert_eq!((got.0.to_bits(), got.1.to_bits(), a), (want.0.to_bits(), want.1.to_bits(), b), "{x:?}");
        }
    }
    for (g, x) in groups::<16>(3000).into_iter().enumerate() {
        let w: [f32; 16] = std::array::from_fn(|i| ((g + i) % 5) as f32 * (1.0 + x[i] * x[i]).sqrt());
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        let got = make_qkx2_quants::<16, false>(3, &x, &w, &mut a, -0.9, 0.05, 36);
        let want = reference::make_qkx2_quants(3, &x, &w, &mut b, -0.9, 0.05, 36, false);
        assert_eq!((got.0.to_bits(), got.1.to_bits(), a), (want.0.to_bits(), want.1.to_bits(), b), "{x:?}");
    }
}

#[test]
fn qkx2_constant_and_zero_groups() {
    let x = [0.0f32; 32];
    let w = [1.0f32; 32];
    let mut l = [9u8; 32];
    assert_eq!(make_qkx2_quants::<32, false>(15, &x, &w, &mut l, -1.0, 0.1, 20), (0.0, -0.0));
    assert_eq!(l, [0; 32]);
    // A constant negative group: min = max, the min carries everything.
    let x = [-2.5f32; 32];
    let (scale, the_min) = make_qkx2_quants::<32, false>(15, &x, &w, &mut l, -1.0, 0.1, 20);
    assert_eq!((scale, the_min), (0.0, 2.5));
    // A constant positive group: min is clamped to 0, so it is all scale.
    let x = [3.0f32; 32];
    let (scale, the_min) = make_qkx2_quants::<32, false>(15, &x, &w, &mut l, -1.0, 0.1, 20);
    assert_eq!(the_min, -0.0);
    assert!((scale * l[0] as f32 - 3.0).abs() < 1e-5, "{scale} {}", l[0]);
}

#[test]
fn qkx2_fits_a_ramp_exactly() {
    let x: [f32; 32] = std::array::from_fn(|i| (i % 16) as f32 * 0.5 - 1.0);
    let w = [1.0f32; 32];
    let mut l = [0u8; 32];
    let (scale, the_min) = make_qkx2_quants::<32, false>(15, &x, &w, &mut l, -1.0, 0.1, 20);
    for i in 0..32 {
        assert!((scale * l[i] as f32 - the_min - x[i]).abs() < 1e-5);
    }
}

#[test]
fn qx_levels_are_symmetric_grid() {
    let x: [f32; 16] = std::array::from_fn(|i| (i as f32 - 7.5) * 0.25);
    let mut l = [0u8; 16];
    let scale = make_qx_quants(32, &x, &squares(&x), &mut l);
    assert!(scale != 0.0);
    for i in 0..16 {
        assert!(l[i] < 64);
        assert!((scale * (l[i] as f32 - 32.0) - x[i]).abs() < 0.05, "{i}");
    }
    let mut l = [5u8; 16];
    assert_eq!(make_qx_quants(32, &[1e-16f32; 16], &[1.0; 16], &mut l), 0.0);
    assert_eq!(l, [0; 16]);
}

#[test]
fn q3_levels_in_range() {
    let x: [f32; 16] = std::array::from_fn(|i| ((i * 37 % 16) as f32 - 8.0) * 0.3);
    let mut l = [0i8; 16];
    let scale = make_q3_quants(4, &x, &mut l);
    let mut err = 0.0f32;
    let mut norm = 0.0f32;
    for i in 0..16 {
        assert!((0..8).contains(&l[i]));
        err += (scale * (l[i] as f32 - 4.0) - x[i]).powi(2);
        norm += x[i] * x[i];
    }
    // 16 distinct values on 8 levels: about a quarter of the signal is lost.
    assert!((err / norm).sqrt() < 0.3, "{}", (err / norm).sqrt());
}
