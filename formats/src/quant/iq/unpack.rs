//! Compile-time expansion of the packed codebooks and ggml's sign table.

/// Expands a codebook packed as gguf-py stores it (hex text, each byte holding `8 / bits` codes of
/// `bits` bits, lowest first, where `bits` is what `levels.len()` needs) into `N` codewords of `W`
/// levels.
pub(super) const fn unpack_grid<const W: usize, const N: usize>(hex: &[u8], levels: &[i8]) -> [[i8; W]; N] {
    let bits = if levels.len() <= 2 {
        1
    } else if levels.len() <= 4 {
        2
    } else {
        4
    };
    let per_byte = 8 / bits;
    assert!(hex.len() == 2 * N * W / per_byte, "packed codebook of the wrong length");
    let mut grid = [[0i8; W]; N];
    let mut k = 0;
    while k < N * W {
        let i = k / per_byte;
        let byte = (hex_digit(hex[2 * i]) << 4) | hex_digit(hex[2 * i + 1]);
        let code = (byte >> (bits * (k % per_byte))) & ((1 << bits) - 1);
        grid[k / W][k % W] = levels[code as usize];
        k += 1;
    }
    grid
}

/// The value of one hexadecimal digit.
const fn hex_digit(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("not a hexadecimal digit"),
    }
}

/// ggml's `ksigns_iq2xs`: seven stored sign bits completed with an eighth that makes the count of
/// minus signs even.
pub(super) static KSIGNS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = i as u8 | (((i as u32).count_ones() as u8 & 1) << 7);
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::super::grids::{IQ1S, IQ2S, IQ2XS, IQ2XXS, IQ3S, IQ3XXS};
    use super::*;

    /// A codeword as ggml-common.h writes it: its bytes as one little-endian integer.
    fn word(c: &[i8]) -> u64 {
        c.iter().rev().fold(0u64, |acc, &b| (acc << 8) | b as u8 as u64)
    }

    #[test]
    fn codebooks_match_ggml_common() {
        // First, second and last entries of each table in llama.cpp's ggml-common.h.
        assert_eq!(
            [word(&IQ2XXS[0]), word(&IQ2XXS[1]), word(&IQ2XXS[255])],
            [0x0808080808080808, 0x080808080808082b, 0x2b2b2b1908081908]
        );
        assert_eq!([word(&IQ2XS[1]), word(&IQ2XS[511])], [0x080808080808082b, 0x2b2b2b2b2b2b2b2b]);
        assert_eq!([word(&IQ2S[1]), word(&IQ2S[1023])], [0x080808080808082b, 0x2b2b2b2b2b2b2b2b]);
        assert_eq!([word(&IQ3XXS[0]), word(&IQ3XXS[1]), word(&IQ3XXS[255])], [0x04040404, 0x04040414, 0x3e341c04]);
        assert_eq!([word(&IQ3S[0]), word(&IQ3S[1]), word(&IQ3S[511])], [0x01010101, 0x01010103, 0x0f0f0101]);
        assert_eq!(
            [word(&IQ1S[0]), word(&IQ1S[1]), word(&IQ1S[2047])],
            [0xffffffffffffffff, 0xffffffffffffff01, 0x0101010101010101]
        );
    }

    #[test]
    fn signs_match_ggml_common() {
        assert_eq!(&KSIGNS[..8], &[0, 129, 130, 3, 132, 5, 6, 135]);
        assert_eq!(KSIGNS[127], 255);
    }
}
