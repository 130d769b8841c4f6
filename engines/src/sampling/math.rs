//! Float kernels over whole vocabularies, written so the compiler vectorises them: max, e^x,
//! softmax weights with per-block sums, and a draw from those weights.

/// Independent accumulators per loop, so reductions vectorise despite strict float order.
const LANES: usize = 8;
/// Tokens per block of [`exp_blocks`]; a draw scans block sums, then one block.
pub(crate) const BLOCK: usize = 1024;

/// `pub(crate) fn $name` running `$body` compiled for AVX2 + FMA where the CPU has them (8-lane vectors instead of
/// the baseline's 4), else for the baseline: the same operations in the same order, so the same results.
macro_rules! dispatched {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),*) -> $r:ty $body:block) => {
        $(#[$m])*
        pub(crate) fn $name($($a: $t),*) -> $r {
            #[inline(always)]
            fn body($($a: $t),*) -> $r $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($a: $t),*) -> $r {
                    body($($a),*)
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has AVX2 and FMA (checked above).
                    return unsafe { avx2($($a),*) };
                }
            }
            body($($a),*)
        }
    };
}

dispatched! {
    /// The largest value (NaN ignored); -inf when there is none.
    fn max(xs: &[f32]) -> f32 {
        let mut acc = [f32::NEG_INFINITY; LANES];
        let mut chunks = xs.chunks_exact(LANES);
        for c in &mut chunks {
            for (a, &x) in acc.iter_mut().zip(c) {
                *a = a.max(x);
            }
        }
        chunks.remainder().iter().chain(&acc).fold(f32::NEG_INFINITY, |m, &x| m.max(x))
    }
}

/// The first index holding the largest value (ties to the lowest index), or 0 when every value is NaN.
pub(crate) fn argmax(xs: &[f32]) -> usize {
    let m = max(xs);
    xs.iter().position(|&x| x == m).unwrap_or(0)
}

/// e^x for x <= 0 within 2e-7 relative error (Cephes' expf polynomial); 0 below -87 and for NaN.
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    /// 1.5 * 2^23: adding it rounds an f32 to an integer kept in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.max(-87.0);
    let t = xc * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = xc - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_2e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    let scale = f32::from_bits(t.to_bits().wrapping_sub(0x4B40_0000 - 127) << 23);
    // A multiply, not a branch, so loops over this vectorise.
    let keep = u32::from(x >= -87.0) as f32;
    e * scale * keep
}

dispatched! {
    /// Replaces each x by e^(x - max) and returns the sum of each [`BLOCK`] in `sums` and the total.
    fn exp_blocks(xs: &mut [f32], max: f32, sums: &mut Vec<f32>) -> f64 {
        sums.clear();
        for block in xs.chunks_mut(BLOCK) {
            let mut acc = [0f32; LANES];
            let mut chunks = block.chunks_exact_mut(LANES);
            for c in &mut chunks {
                for (a, x) in acc.iter_mut().zip(c) {
                    *x = exp_neg(*x - max);
                    *a += *x;
                }
            }
            let mut sum = acc.iter().sum::<f32>();
            for x in chunks.into_remainder() {
                *x = exp_neg(*x - max);
                sum += *x;
            }
            sums.push(sum);
        }
        sums.iter().map(|&s| f64::from(s)).sum()
    }
}

/// The sum of the weights `ws` of the logits `xs` within [lo, hi].
pub(crate) fn mass_within(xs: &[f32], ws: &[f32], lo: f32, hi: f32) -> f64 {
    paired_sum(xs, ws, |x, w| w * f32::from(u8::from(x >= lo && x <= hi)))
}

/// The entropy of the softmax of logits `xs` with weights `ws` = e^(x - max) summing to `total`,
/// `lse` being max + ln(total): the sum of w (lse - x) / total. Logits of weight 0 add nothing.
pub(crate) fn entropy(xs: &[f32], ws: &[f32], lse: f32, total: f64) -> f64 {
    paired_sum(xs, ws, |x, w| w * (lse - x.max(lse - 200.0))) / total
}

/// The sum of `f(x, w)` over paired values, in vectorisable lanes, blocks added in f64.
#[inline(always)]
fn paired_sum(xs: &[f32], ws: &[f32], f: impl Fn(f32, f32) -> f32) -> f64 {
    let mut total = 0.0;
    for (xb, wb) in xs.chunks(BLOCK).zip(ws.chunks(BLOCK)) {
        let mut acc = [0f32; LANES];
        let (xc, wc) = (xb.chunks_exact(LANES), wb.chunks_exact(LANES));
        let tail: f32 = xc.remainder().iter().zip(wc.remainder()).map(|(&x, &w)| f(x, w)).sum();
        for (x, w) in xc.zip(wc) {
            for i in 0..LANES {
                acc[i] += f(x[i], w[i]);
            }
        }
        total += f64::from(acc.iter().sum::<f32>() + tail);
    }
    total
}

/// The index drawn from weights `ws` (block sums `sums`, total `total`) by a uniform `u` in [0, 1):
/// the first whose cumulative weight exceeds `u * total`; None when no weight is positive.
pub(crate) fn draw(ws: &[f32], sums: &[f32], total: f64, u: f64) -> Option<usize> {
    if !(total > 0.0 && total.is_finite()) {
        return None;
    }
    let last = sums.iter().rposition(|&s| s > 0.0)?;
    let mut target = u * total;
    let mut b = 0;
    while b < last && target >= f64::from(sums[b]) {
        target -= f64::from(sums[b]);
        b += 1;
    }
    let start = b * BLOCK;
    let block = &ws[start..ws.len().min(start + BLOCK)];
    let mut cum = 0.0;
    // Rounding may leave `target` past the block's running sum: fall back to its last positive weight.
    let i = block
        .iter()
        .position(|&w| {
            cum += f64::from(w);
            cum > target
        })
        .or_else(|| block.iter().rposition(|&w| w > 0.0))?;
    Some(start + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std() {
        let mut worst = 0f32;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let (want, got) = (x.exp(), exp_neg(x));
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 3e-7, "relative error {worst}");
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_neg(-100.0), 0.0);
        assert_eq!(exp_neg(f32::NAN), 0.0);
    }

    #[test]
    fn max_and_argmax() {
        let xs: Vec<f32> = (0..37).map(|i| ((i * 7) % 37) as f32).collect();
        assert_eq!(max(&xs), 36.0);
        assert_eq!(argmax(&[1.0, f32::NAN, 3.0, 3.0, 2.0]), 2);
        assert_eq!(max(&[]), f32::NEG_INFINITY);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    }

    #[test]
    fn paired_sums() {
        let xs: Vec<f32> = (0..3000).map(|i| (i % 10) as f32).collect();
        let ws = vec![0.5f32; 3000];
        assert_eq!(mass_within(&xs, &ws, 2.0, 4.0), 450.0);
        assert_eq!(mass_within(&xs, &ws, f32::NEG_INFINITY, f32::INFINITY), 1500.0);
        // Two equally likely logits (and one impossible): ln 2 nats.
        let (xs, ws) = ([1.0, 1.0, f32::NEG_INFINITY], [1.0, 1.0, 0.0]);
        let h = entropy(&xs, &ws, 1.0 + 2f32.ln(), 2.0);
        assert!((h - 2f64.ln()).abs() < 1e-6, "{h}");
    }

    #[test]
    fn blocks_and_draws() {
        let mut ws = vec![f32::NEG_INFINITY; 3 * BLOCK + 5];
        ws[7] = 1.0;
        ws[2 * BLOCK + 3] = 1.0;
        ws[3 * BLOCK + 4] = 2.0;
        let mut sums = Vec::new();
        let total = exp_blocks(&mut ws, 2.0, &mut sums);
        assert_eq!(sums.len(), 4);
        assert!((total - (2.0 * (-1f64).exp() + 1.0)).abs() < 1e-5);
        assert!(ws[0] == 0.0 && (ws[7] - (-1f32).exp()).abs() < 1e-6);
        assert_eq!(draw(&ws, &sums, total, 0.0), Some(7));
        assert_eq!(draw(&ws, &sums, total, 0.3), Some(2 * BLOCK + 3));
        assert_eq!(draw(&ws, &sums, total, 0.9999999), Some(3 * BLOCK + 4));
        assert_eq!(draw(&ws, &sums, 0.0, 0.5), None);
    }
}
