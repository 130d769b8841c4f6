//! This machine's ceilings over the rayon pool, for benches to set their figures against: read bandwidth and the
//! int8 dot-product and f32 FMA peaks of the widest instructions the CPU has.

use std::time::{Duration, Instant};

/// Best time of repeated calls, running for about `budget`.
pub fn best_of(budget: Duration, mut f: impl FnMut()) -> Duration {
    f();
    let start = Instant::now();
    let mut best = Duration::MAX;
    let mut runs = 0;
    while runs < 3 || (start.elapsed() < budget && runs < 1000) {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
        runs += 1;
    }
    best
}

/// Best-of read bandwidth of a 256 MiB buffer summed in parallel, GB/s: the ceiling for one activation row.
pub fn read_bandwidth() -> f64 {
    use rayon::prelude::*;
    let buf: Vec<u64> = (0..32u64 << 20).collect();
    let mut sink = 0u64;
    let t = best_of(Duration::from_millis(500), || {
        sink = sink.wrapping_add(
            buf.par_chunks(1 << 16)
                .map(|c| c.iter().fold(0u64, |a, &v| a.wrapping_add(v)))
                .reduce(|| 0, u64::wrapping_add),
        );
    });
    std::hint::black_box(sink);
    (buf.len() * 8) as f64 / t.as_secs_f64() / 1e9
}

/// A peak: operations per second over the pool and the instruction that reaches it.
#[derive(Debug, Clone, Copy)]
pub struct Peak {
    /// Operations per second (a multiply and an add count two), in units of 1e9.
    pub giga_ops: f64,
    /// The instruction measured, e.g. `vpdpbusd zmm`.
    pub instruction: &'static str,
}

/// Independent accumulators per loop: enough to cover the latency of two pipes.
const CHAINS: usize = 16;
/// Loop iterations per thread and timed call.
const ITERS: u64 = 1 << 20;

/// Times `kernel` (one thread's `ITERS` iterations, returning a value to keep) on every thread of the pool at once.
fn over_pool(kernel: fn() -> i64, ops_per_iter: f64, instruction: &'static str) -> Peak {
    let threads = rayon::current_num_threads();
    let t = best_of(Duration::from_millis(600), || {
        std::hint::black_box(rayon::broadcast(|_| kernel()));
    });
    Peak { giga_ops: threads as f64 * ITERS as f64 * ops_per_iter / t.as_secs_f64() / 1e9, instruction }
}

/// The int8 dot-product peak (u8 × i8 products summed into i32, as the quantized GEMMs run them).
pub fn int8_peak() -> Peak {
    #[cfg(target_arch = "x86_64")]
    {
        use x86::*;
        if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512bw") {
            return over_pool(|| unsafe { dpbusd_zmm() }, (CHAINS * 64 * 2) as f64, "vpdpbusd zmm");
        }
        if is_x86_feature_detected!("avxvnni") {
            return over_pool(|| unsafe { dpbusd_ymm() }, (CHAINS * 32 * 2) as f64, "vpdpbusd ymm (AVX-VNNI)");
        }
        if is_x86_feature_detected!("avx2") {
            return over_pool(|| unsafe { maddubs_ymm() }, (CHAINS * 32 * 2) as f64, "vpmaddubsw+vpmaddwd ymm");
        }
    }
    over_pool(scalar_int8, (CHAINS * 2) as f64, "scalar")
}

/// The f32 FMA peak.
pub fn fma_peak() -> Peak {
    #[cfg(target_arch = "x86_64")]
    {
        use x86::*;
        if is_x86_feature_detected!("avx512f") {
            return over_pool(|| unsafe { fma_zmm() }, (CHAINS * 16 * 2) as f64, "vfmadd zmm");
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return over_pool(|| unsafe { fma_ymm() }, (CHAINS * 8 * 2) as f64, "vfmadd ymm");
        }
    }
    over_pool(scalar_fma, (CHAINS * 2) as f64, "scalar")
}

fn scalar_int8() -> i64 {
    let (a, b) = std::hint::black_box((3i32, 5i32));
    let mut acc = [0i32; CHAINS];
    for _ in 0..ITERS {
        for (i, r) in acc.iter_mut().enumerate() {
            *r = r.wrapping_add(a.wrapping_mul(b + i as i32));
        }
        std::hint::black_box(&mut acc);
    }
    acc.iter().map(|&v| v as i64).sum()
}

fn scalar_fma() -> i64 {
    let (a, b) = std::hint::black_box((0.999f32, 1e-7f32));
    let mut acc = [0f32; CHAINS];
    for _ in 0..ITERS {
        for r in acc.iter_mut() {
            *r = r.mul_add(a, b);
        }
        std::hint::black_box(&mut acc);
    }
    acc.iter().sum::<f32>() as i64
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{CHAINS, ITERS};

    /// Defines `$name`: `CHAINS` accumulators of `$ty`, each stepped by `$step(acc, a, b)` `ITERS` times.
    macro_rules! chains {
        ($name:ident, $features:literal, $ty:ty, $zero:expr, $a:expr, $b:expr, $step:expr, $lane:expr) => {
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name() -> i64 {
                let (a, b) = std::hint::black_box(($a, $b));
                let mut acc: [$ty; CHAINS] = [$zero; CHAINS];
                for _ in 0..ITERS {
                    for r in acc.iter_mut() {
                        *r = $step(*r, a, b);
                    }
                }
                acc.iter().map(|&r| $lane(r)).sum()
            }
        };
    }

    chains!(
        dpbusd_zmm,
        "avx512f,avx512bw,avx512vnni",
        __m512i,
        _mm512_setzero_si512(),
        _mm512_set1_epi8(1),
        _mm512_set1_epi8(2),
        |r, a, b| _mm512_dpbusd_epi32(r, a, b),
        |r| _mm512_reduce_add_epi32(r) as i64
    );
    chains!(
        dpbusd_ymm,
        "avx2,avxvnni",
        __m256i,
        _mm256_setzero_si256(),
        _mm256_set1_epi8(1),
        _mm256_set1_epi8(2),
        |r, a, b| _mm256_dpbusd_avx_epi32(r, a, b),
        |r| _mm256_extract_epi32::<0>(r) as i64
    );
    chains!(
        maddubs_ymm,
        "avx2",
        __m256i,
        _mm256_setzero_si256(),
        _mm256_set1_epi8(1),
        _mm256_set1_epi8(2),
        |r, a, b| _mm256_add_epi32(r, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))),
        |r| _mm256_extract_epi32::<0>(r) as i64
    );
    chains!(
        fma_zmm,
        "avx512f",
        __m512,
        _mm512_setzero_ps(),
        _mm512_set1_ps(0.999),
        _mm512_set1_ps(1e-7),
        |r, a, b| _mm512_fmadd_ps(r, a, b),
        |r| _mm512_reduce_add_ps(r) as i64
    );
    chains!(
        fma_ymm,
        "avx2,fma",
        __m256,
        _mm256_setzero_ps(),
        _mm256_set1_ps(0.999),
        _mm256_set1_ps(1e-7),
        |r, a, b| _mm256_fmadd_ps(r, a, b),
        |r| _mm256_cvtss_f32(r) as i64
    );
}
