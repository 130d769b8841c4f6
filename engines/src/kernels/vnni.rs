//! The VNNI levels: AVX2's integer kernels with the widening multiply-add and its accumulation fused into one
//! instruction (`vpdpwssd`, `vpdpbusd`), VEX-encoded on AVX-VNNI CPUs and EVEX-encoded (256-bit) on AVX-512
//! VNNI ones. The float kernels are AVX2's.

use std::arch::x86_64::*;

use tgi_formats::GgmlType;

use super::avx2::{dispatch, packed_pair, packed_scales, q4_0_n, q4_k_n, q5_k_n, q6_k_n, q8_0_n, Mac, RowDot};
use super::avx2_iq::superblocks_n;
use super::avx2_iq1::{Iq1MBlock, Iq1SBlock};
use super::avx2_iq2::{Iq2SBlock, Iq2XsBlock, Iq2XxsBlock};
use super::avx2_iq3::{Iq3SBlock, Iq3XxsBlock};
use super::avx2_iq4::{iq4_nl_n, Iq4XsBlock};
use super::avx2_lowbit::q5_0_n;
use super::avx2_ternary::{ternary_n, Tq1Block, Tq2Block};

/// Defines the [`Mac`] `$mac` over the VNNI intrinsics `$dpwssd` and `$dpbusd`.
macro_rules! vnni_mac {
    ($(#[$doc:meta])* $mac:ident, $dpwssd:ident, $dpbusd:ident) => {
        $(#[$doc])*
        struct $mac;

        impl Mac for $mac {
            #[inline(always)]
            unsafe fn dpwssd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
                $dpwssd(acc, a, b)
            }
            #[inline(always)]
            unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
                $dpbusd(acc, a, b)
            }
            type Scales = __m256i;
            #[inline(always)]
            unsafe fn scales(sa: __m256i, sb: __m256i) -> __m256i {
                packed_scales(sa, sb)
            }
            #[inline(always)]
            unsafe fn scaled_pair(
                acc: __m256i,
                wa: __m256i,
                xa: __m256i,
                wb: __m256i,
                xb: __m256i,
                s: __m256i,
            ) -> __m256i {
                packed_pair::<Self>(acc, wa, xa, wb, xb, s)
            }
        }
    };
}

vnni_mac!(
    /// AVX-VNNI's `vpdpwssd`/`vpdpbusd` (VEX).
    AvxVnni, _mm256_dpwssd_avx_epi32, _mm256_dpbusd_avx_epi32
);
vnni_mac!(
    /// AVX-512 VNNI's `vpdpwssd`/`vpdpbusd` on 256-bit registers (EVEX, with AVX-512 VL).
    Avx512Vnni, _mm256_dpwssd_epi32, _mm256_dpbusd_epi32
);

/// The AVX-VNNI kernel for `ty`, if it differs from AVX2's.
pub(super) fn avx_vnni(ty: GgmlType) -> Option<RowDot> {
    match ty {
        GgmlType::IQ3_S => Some(iq3_s_avx_vnni),
        GgmlType::IQ3_XXS => Some(iq3_xxs_avx_vnni),
        GgmlType::IQ2_S => Some(iq2_s_avx_vnni),
        GgmlType::IQ4_XS => Some(iq4_xs_avx_vnni),
        _ => avx_vnni::row_dot(ty),
    }
}

// The i-quants the AVX-512 level runs with 512-bit kernels instead.
dispatch!("avx2,fma,f16c,avxvnni", AvxVnni, Iq3SBlock;
    /// IQ3_S weights · Q8_K activations on AVX-VNNI.
    iq3_s_avx_vnni => superblocks_n);
dispatch!("avx2,fma,f16c,avxvnni", AvxVnni, Iq3XxsBlock;
    /// IQ3_XXS weights · Q8_K activations on AVX-VNNI.
    iq3_xxs_avx_vnni => superblocks_n);
dispatch!("avx2,fma,f16c,avxvnni", AvxVnni, Iq2SBlock;
    /// IQ2_S weights · Q8_K activations on AVX-VNNI.
    iq2_s_avx_vnni => superblocks_n);
dispatch!("avx2,fma,f16c,avxvnni", AvxVnni, Iq4XsBlock;
    /// IQ4_XS weights · Q8_K activations on AVX-VNNI.
    iq4_xs_avx_vnni => superblocks_n);

/// The AVX-512 VNNI kernel for `ty`, if it differs from AVX2's. The legacy types take the VEX kernels where
/// the CPU has AVX-VNNI too: the same instructions EVEX-encoded measured 15% slower on Zen 4 (`cargo bench
/// --bench kernels`, Q8_0 2048×2048 at 4-128 rows), while the K-quant kernels measured faster EVEX-encoded.
/// IQ3_S, IQ3_XXS, IQ2_S and IQ4_XS take 512-bit kernels ([`avx512_iq`](super::avx512_iq)).
pub(super) fn avx512_vnni(ty: GgmlType) -> Option<RowDot> {
    if let Some(f) = super::avx512_iq::row_dot(ty) {
        return Some(f);
    }
    if matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0) && is_x86_feature_detected!("avxvnni") {
        return avx_vnni(ty);
    }
    avx512_vnni::row_dot(ty)
}

/// Defines the module `$level` of entry points enabling `$feat` over the [`Mac`] `$mac`.
macro_rules! level {
    ($level:ident, $feat:literal, $mac:ty) => {
        /// Entry points of one VNNI level.
        mod $level {
            use super::*;
            dispatch!($feat, $mac; /// Q8_0 weights · Q8_0 activations.
                q8_0 => q8_0_n);
            dispatch!($feat, $mac; /// Q4_0 weights · Q8_0 activations.
                q4_0 => q4_0_n);
            dispatch!($feat, $mac; /// Q5_0 weights · Q8_0 activations.
                q5_0 => q5_0_n);
            dispatch!($feat, $mac; /// Q4_K weights · Q8_K activations.
                q4_k => q4_k_n);
            dispatch!($feat, $mac; /// Q5_K weights · Q8_K activations.
                q5_k => q5_k_n);
            dispatch!($feat, $mac; /// Q6_K weights · Q8_K activations.
                q6_k => q6_k_n);
            dispatch!($feat, $mac; /// IQ4_NL weights · Q8_0 activations.
                iq4_nl => iq4_nl_n);
            dispatch!($feat, $mac, Iq2XxsBlock; /// IQ2_XXS weights · Q8_K activations.
                iq2_xxs => superblocks_n);
            dispatch!($feat, $mac, Iq2XsBlock; /// IQ2_XS weights · Q8_K activations.
                iq2_xs => superblocks_n);
            dispatch!($feat, $mac, Iq1SBlock; /// IQ1_S weights · Q8_K activations.
                iq1_s => superblocks_n);
            dispatch!($feat, $mac, Iq1MBlock; /// IQ1_M weights · Q8_K activations.
                iq1_m => superblocks_n);
            dispatch!($feat, $mac, Tq1Block; /// TQ1_0 weights · Q8_K activations.
                tq1_0 => ternary_n);
            dispatch!($feat, $mac, Tq2Block; /// TQ2_0 weights · Q8_K activations.
                tq2_0 => ternary_n);

            /// The level's kernel for `ty`, if it differs from AVX2's.
            pub(super) fn row_dot(ty: GgmlType) -> Option<RowDot> {
                Some(match ty {
                    GgmlType::Q8_0 => q8_0,
                    GgmlType::Q4_0 => q4_0,
                    GgmlType::Q5_0 => q5_0,
                    GgmlType::Q4_K => q4_k,
                    GgmlType::Q5_K => q5_k,
                    GgmlType::Q6_K => q6_k,
                    GgmlType::IQ4_NL => iq4_nl,
                    GgmlType::IQ2_XXS => iq2_xxs,
                    GgmlType::IQ2_XS => iq2_xs,
                    GgmlType::IQ1_S => iq1_s,
                    GgmlType::IQ1_M => iq1_m,
                    GgmlType::TQ1_0 => tq1_0,
                    GgmlType::TQ2_0 => tq2_0,
                    _ => return None,
                })
            }
        }
    };
}

level!(avx_vnni, "avx2,fma,f16c,avxvnni", AvxVnni);
level!(avx512_vnni, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", Avx512Vnni);
