//! The MLP's gated activation `act(g) · u` in one pass, with a vectorized `exp` on the x86 levels: SiLU as
//! `g·u / (1 + e^-g)`, GELU (tanh form) as `g·u / (1 + e^-2z)` with `z = √(2/π)·(g + 0.044715·g³)`, which is
//! `0.5·g·(1 + tanh z)·u`. The scalar path is the textbook formulas, and the test oracle.

use rayon::prelude::*;

use super::{backend, Backend};

/// The MLP's activation on the gate projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SiLU, `g·σ(g)` (SwiGLU): Llama, Mistral, Qwen, Phi.
    Silu,
    /// GELU, tanh approximation (GeGLU): Gemma.
    GeluTanh,
}

/// √(2/π).
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// The cubic term's coefficient of the tanh approximation.
const GELU_CUBIC: f32 = 0.044_715;

/// Values per parallel task.
const CHUNK: usize = 1 << 14;

/// `g[i] = act(g[i]) · u[i]`, on the process's kernel level (in parallel on the current rayon pool when long).
pub fn gated(gate: Activation, g: &mut [f32], u: &[f32]) {
    assert_eq!(g.len(), u.len(), "gate and up rows differ in length");
    let level = backend();
    if g.len() <= CHUNK {
        return gated_with(level, gate, g, u);
    }
    g.par_chunks_mut(CHUNK).zip(u.par_chunks(CHUNK)).for_each(|(g, u)| gated_with(level, gate, g, u));
}

/// [`gated`] on a chosen level (panics if the CPU lacks it).
pub fn gated_with(level: Backend, gate: Activation, g: &mut [f32], u: &[f32]) {
    assert_eq!(g.len(), u.len(), "gate and up rows differ in length");
    level.assert_supported();
    #[cfg(target_arch = "x86_64")]
    {
        let done = match level {
            // SAFETY: the level's features were checked just above.
            Backend::Avx512 => unsafe { simd::gated_avx512(gate, g, u) },
            // SAFETY: as above; every level but the scalar one has AVX2 and FMA.
            Backend::Avx2 | Backend::AvxVnni => unsafe { simd::gated_avx2(gate, g, u) },
            Backend::Scalar => 0,
        };
        scalar(gate, &mut g[done..], &u[done..]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    scalar(gate, g, u);
}

/// The portable formulas.
fn scalar(gate: Activation, g: &mut [f32], u: &[f32]) {
    for (g, &u) in g.iter_mut().zip(u) {
        let v = *g;
        *g = match gate {
            Activation::Silu => v / (1.0 + (-v).exp()),
            Activation::GeluTanh => 0.5 * v * (1.0 + (SQRT_2_OVER_PI * v * (1.0 + GELU_CUBIC * v * v)).tanh()),
        } * u;
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    //! The x86 paths: Cephes' `expf` (range reduction by ln 2 in two parts, a degree-6 polynomial), 16 or 8 lanes.

    use std::arch::x86_64::*;

    use super::{Activation, GELU_CUBIC, SQRT_2_OVER_PI};

    const EXP_HI: f32 = 88.376_26;
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const P: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];

    /// Defines `$name`: [`super::gated`] over `$lanes`-wide vectors of `$v`, returning how many leading values
    /// it did (the rest are the scalar path's).
    macro_rules! level {
        ($name:ident, $feat:literal, $lanes:literal, $v:ty, $load:ident, $store:ident, $set1:ident, $add:ident,
         $mul:ident, $div:ident, $fmadd:ident, $fnmadd:ident, $min:ident, $max:ident, $round:ident, $pow2:expr) => {
            /// Safety: the CPU has the level's features.
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn $name(gate: Activation, g: &mut [f32], u: &[f32]) -> usize {
                #[inline(always)]
                unsafe fn exp(t: $v) -> $v {
                    let t = $min($max(t, $set1(-EXP_HI)), $set1(EXP_HI));
                    let k = $round($mul(t, $set1(LOG2E)));
                    let r = $fnmadd(k, $set1(LN2_LO), $fnmadd(k, $set1(LN2_HI), t));
                    let mut p = $set1(P[0]);
                    for c in &P[1..] {
                        p = $fmadd(p, r, $set1(*c));
                    }
                    let p = $fmadd($mul(p, r), r, $add(r, $set1(1.0)));
                    $pow2(p, k)
                }
                let n = g.len() / $lanes * $lanes;
                let one = $set1(1.0);
                for i in (0..n).step_by($lanes) {
                    let v = $load(g.as_ptr().add(i));
                    let t = match gate {
                        Activation::Silu => $mul(v, $set1(-1.0)),
                        Activation::GeluTanh => {
                            let z = $mul($mul(v, $set1(SQRT_2_OVER_PI)), $fmadd($mul(v, v), $set1(GELU_CUBIC), one));
                            $mul(z, $set1(-2.0))
                        }
                    };
                    let y = $div($mul(v, $load(u.as_ptr().add(i))), $add(one, exp(t)));
                    $store(g.as_mut_ptr().add(i), y);
                }
                n
            }
        };
    }

    /// `p · 2^k` on 16 lanes (`k` whole).
    #[inline(always)]
    unsafe fn pow2_512(p: __m512, k: __m512) -> __m512 {
        _mm512_scalef_ps(p, k)
    }

    /// `p · 2^k` on 8 lanes (`k` whole, within the exponent's range but for the top, which gives infinity).
    #[inline(always)]
    unsafe fn pow2_256(p: __m256, k: __m256) -> __m256 {
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)));
        _mm256_mul_ps(p, _mm256_castsi256_ps(e))
    }

    #[inline(always)]
    unsafe fn round_512(v: __m512) -> __m512 {
        _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v)
    }

    #[inline(always)]
    unsafe fn round_256(v: __m256) -> __m256 {
        _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v)
    }

    level!(
        gated_avx512,
        "avx512f,avx2,fma",
        16,
        __m512,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_set1_ps,
        _mm512_add_ps,
        _mm512_mul_ps,
        _mm512_div_ps,
        _mm512_fmadd_ps,
        _mm512_fnmadd_ps,
        _mm512_min_ps,
        _mm512_max_ps,
        round_512,
        pow2_512
    );
    level!(
        gated_avx2,
        "avx2,fma",
        8,
        __m256,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_set1_ps,
        _mm256_add_ps,
        _mm256_mul_ps,
        _mm256_div_ps,
        _mm256_fmadd_ps,
        _mm256_fnmadd_ps,
        _mm256_min_ps,
        _mm256_max_ps,
        round_256,
        pow2_256
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_matches_the_formulas() {
        // Values from -30 to 30 (both tails), plus the lengths' remainders.
        let g: Vec<f32> = (0..6001).map(|i| (i as f32 - 3000.0) / 100.0).collect();
        let u: Vec<f32> = (0..g.len()).map(|i| 1.0 + (i % 7) as f32 * 0.25).collect();
        for gate in [Activation::Silu, Activation::GeluTanh] {
            let mut reference = g.clone();
            gated_with(Backend::Scalar, gate, &mut reference, &u);
            for level in Backend::available() {
                let mut y = g.clone();
                gated_with(level, gate, &mut y, &u);
                for (k, (&a, &b)) in y.iter().zip(&reference).enumerate() {
                    let tol = 4.0 * f32::EPSILON * b.abs().max(1e-30) + 1e-37;
                    assert!((a - b).abs() <= tol.max(2e-7 * u[k]), "{gate:?} {level:?} at {}: {a} vs {b}", g[k]);
                }
            }
        }
    }
}
