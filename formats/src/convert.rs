//! Bulk conversion of little-endian F32/F16/BF16 tensor bytes to f32, in parallel chunks, into a
//! caller's slice so that streaming over a model reuses one allocation.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use rayon::prelude::*;

/// Elements converted per parallel task.
const CHUNK: usize = 1 << 16;
/// Elements staged per F16 batch (on the stack).
const F16_BATCH: usize = 1024;

/// Converts `bytes` of `width`-byte elements with `f`, one parallel task per chunk; trailing bytes that
/// do not form a whole element are ignored.
fn convert(bytes: &[u8], width: usize, out: &mut [f32], f: impl Fn(&[u8], &mut [f32]) + Sync) {
    let n = (bytes.len() / width).min(out.len());
    out[..n].par_chunks_mut(CHUNK).zip(bytes.par_chunks(CHUNK * width)).for_each(|(dst, src)| f(src, dst));
}

/// Little-endian f32 bytes to f32 into `out` (as many as both hold).
pub fn f32_from_bytes(bytes: &[u8], out: &mut [f32]) {
    convert(bytes, 4, out, |src, dst| {
        for (d, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
            *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
    })
}

/// Little-endian IEEE f16 bytes to f32 into `out` (uses F16C/NEON through `half` where available).
pub fn f16_to_f32(bytes: &[u8], out: &mut [f32]) {
    convert(bytes, 2, out, |src, dst| {
        let mut bits = [0u16; F16_BATCH];
        for (s, d) in src.chunks(2 * F16_BATCH).zip(dst.chunks_mut(F16_BATCH)) {
            let bits = &mut bits[..d.len()];
            for (b, c) in bits.iter_mut().zip(s.chunks_exact(2)) {
                *b = u16::from_le_bytes([c[0], c[1]]);
            }
            bits.reinterpret_cast::<f16>().convert_to_f32_slice(d);
        }
    })
}

/// Little-endian bfloat16 bytes to f32 into `out` (exact: bf16 is the top half of an f32).
pub fn bf16_to_f32(bytes: &[u8], out: &mut [f32]) {
    convert(bytes, 2, out, |src, dst| {
        for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *d = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn run(f: fn(&[u8], &mut [f32]), bytes: &[u8]) -> Vec<f32> {
        let width = if std::ptr::fn_addr_eq(f, f32_from_bytes as fn(&[u8], &mut [f32])) { 4 } else { 2 };
        let mut out = vec![1.0; bytes.len() / width];
        f(bytes, &mut out);
        out
    }

    fn sample(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i as f32) * 0.37).sin() * 100.0).collect()
    }

    #[test]
    fn f32_round_trips() {
        let v = sample(CHUNK * 2 + 3);
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(run(f32_from_bytes, &bytes), v);
    }

    #[test]
    fn f16_matches_half() {
        let mut v: Vec<f16> = sample(CHUNK + F16_BATCH + 5).into_iter().map(f16::from_f32).collect();
        v.extend([f16::INFINITY, f16::NEG_INFINITY, f16::from_bits(1), f16::NEG_ZERO]);
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let got = run(f16_to_f32, &bytes);
        assert_eq!(got.len(), v.len());
        for (g, e) in got.iter().zip(&v) {
            assert_eq!(g.to_bits(), e.to_f32().to_bits());
        }
        assert!(run(f16_to_f32, &[0x00, 0x7e])[0].is_nan());
    }

    #[test]
    fn bf16_matches_half() {
        let v: Vec<bf16> = sample(CHUNK + 9).into_iter().map(bf16::from_f32).collect();
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let got = run(bf16_to_f32, &bytes);
        for (g, e) in got.iter().zip(&v) {
            assert_eq!(g.to_bits(), e.to_f32().to_bits());
        }
        assert_eq!(run(bf16_to_f32, &[]), Vec::<f32>::new());
    }
}
