//! Byte-exact checks of `tgi_formats::quant` against reference vectors written by
//! `tests/python/quant_vectors.py` (gguf-py), `tests/python/kquant_vs_ggml.py` and
//! `tests/python/imatrix_vs_ggml.py` (llama.cpp's ggml, without and with an importance matrix) and
//! `tests/python/iq4_vs_ggml.py` (also IQ4_NL's `from_float`, the KV-cache encoder), `iq3_vs_ggml.py`,
//! `iq2_vs_ggml.py` and `tq_vs_ggml.py` (the ternary TQ1_0/TQ2_0, also against gguf-py). See `tests/data/quant_vectors/README.md`. Set `QUANT_VECTORS_DIR` to check another
//! directory written by the same scripts (e.g. a larger, uncommitted set).

use std::collections::BTreeSet;
use std::path::PathBuf;

use tgi_formats::quant::{
    dequantize_row, quantize_matrix, quantize_row_searched, quantize_row_weighted, requires_importance,
    uses_importance, Iq4Search,
};
use tgi_formats::GgmlType;

fn data_dir() -> PathBuf {
    match std::env::var_os("QUANT_VECTORS_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/quant_vectors"),
    }
}

fn read(name: &str) -> Vec<u8> {
    let path = data_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_f32(name: &str) -> Vec<f32> {
    read(name).chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// One manifest line.
enum Vector {
    /// `<set>.f32` as rows of `n_per_row`, encoded as `ty`, equals `<set>.<ty>.bin`.
    Encode { set: String, ty: GgmlType, n_per_row: usize },
    /// `<set>.f32` as rows of `n_per_row`, each encoded as `ty` with the importance `<set>.imatrix.f32`,
    /// equals `<set>.<ty>.imatrix.bin`.
    EncodeWeighted { set: String, ty: GgmlType, n_per_row: usize },
    /// `<set>.f32` encoded as `ty` by ggml's `from_float` (how a KV cache is written) equals
    /// `<set>.<ty>.from_float.bin`.
    EncodeFromFloat { set: String, ty: GgmlType },
    /// `decode.<ty>.bin` decodes to `decode.<ty>.f32`, bit for bit.
    Decode { ty: GgmlType },
}

/// All vectors of all `manifest*.txt` files, with the manifest each came from.
fn manifest() -> Vec<(String, Vector)> {
    let mut files: Vec<_> = std::fs::read_dir(data_dir())
        .expect("vector directory")
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("manifest") && n.ends_with(".txt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifest*.txt in {}", data_dir().display());
    let mut out = Vec::new();
    for file in files {
        let text = String::from_utf8(read(&file)).unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let ty = |s: &str| GgmlType::parse(s).unwrap_or_else(|| panic!("{file}: type {s}"));
            let v = match f.as_slice() {
                ["encode", set, t, n] => {
                    Vector::Encode { set: set.to_string(), ty: ty(t), n_per_row: n.parse().unwrap() }
                }
                ["encode_weighted", set, t, n] => {
                    Vector::EncodeWeighted { set: set.to_string(), ty: ty(t), n_per_row: n.parse().unwrap() }
                }
                ["encode_from_float", set, t, _] => Vector::EncodeFromFloat { set: set.to_string(), ty: ty(t) },
                ["decode", t] => Vector::Decode { ty: ty(t) },
                _ => panic!("{file}: bad line {line:?}"),
            };
            out.push((file.clone(), v));
        }
    }
    out
}

#[test]
fn encoders_match_reference_bytes() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (file, v) in manifest() {
        let Vector::Encode { set, ty, n_per_row } = v else {
            continue;
        };
        let x = read_f32(&format!("{set}.f32"));
        let want = read(&format!("{set}.{}.bin", ty.ggml_name()));
        let got = quantize_matrix(ty, &x, n_per_row).unwrap();
        assert_eq!(got.len(), want.len(), "{set} {ty}: length");
        let bs = ty.type_size();
        let bad: Vec<usize> =
            (0..got.len() / bs).filter(|&b| got[b * bs..(b + 1) * bs] != want[b * bs..(b + 1) * bs]).collect();
        if !bad.is_empty() {
            failures.push(format!(
                "{file}: {set} {ty}: {} of {} blocks differ, first {}",
                bad.len(),
                got.len() / bs,
                bad[0]
            ));
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked > 0);
}

#[test]
fn weighted_encoders_match_reference_bytes() {
    let mut failures = Vec::new();
    let mut types = BTreeSet::new();
    for (file, v) in manifest() {
        let Vector::EncodeWeighted { set, ty, n_per_row } = v else {
            continue;
        };
        let x = read_f32(&format!("{set}.f32"));
        let qw = read_f32(&format!("{set}.imatrix.f32"));
        let want = read(&format!("{set}.{}.imatrix.bin", ty.ggml_name()));
        let row_bytes = ty.bytes_for(n_per_row as u64).unwrap() as usize;
        assert_eq!(want.len(), x.len() / n_per_row * row_bytes, "{set} {ty}: length");
        let mut got = vec![0u8; row_bytes];
        for (r, (row, want)) in x.chunks_exact(n_per_row).zip(want.chunks_exact(row_bytes)).enumerate() {
            quantize_row_weighted(ty, row, &mut got, &qw).unwrap();
            if got != want {
                failures.push(format!("{file}: {set} {ty}: row {r} differs"));
            }
        }
        types.insert(ty);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let weighted: BTreeSet<_> = GgmlType::ALL.into_iter().filter(|&t| uses_importance(t)).collect();
    assert_eq!(types, weighted, "importance-matrix vectors for every type whose encoder uses one");
}

/// IQ4_NL as ggml writes a KV cache (`from_float`, [`Iq4Search::FromFloat`]), block for block.
#[test]
fn from_float_encoders_match_reference_bytes() {
    let mut checked = 0;
    for (file, v) in manifest() {
        let Vector::EncodeFromFloat { set, ty } = v else { continue };
        let x = read_f32(&format!("{set}.f32"));
        let want = read(&format!("{set}.{}.from_float.bin", ty.ggml_name()));
        let mut got = vec![0u8; want.len()];
        quantize_row_searched(ty, &x, &mut got, Iq4Search::FromFloat).unwrap();
        let bs = ty.type_size();
        let bad = got.chunks_exact(bs).zip(want.chunks_exact(bs)).filter(|(a, b)| a != b).count();
        assert_eq!(bad, 0, "{file}: {set} {ty} from_float: {bad} of {} blocks differ", got.len() / bs);
        checked += 1;
    }
    assert!(checked >= 9, "from_float vectors for every set");
}

#[test]
fn f32_encoding_is_the_input() {
    let x = read_f32("normal.f32");
    assert_eq!(quantize_matrix(GgmlType::F32, &x, 512).unwrap(), read("normal.f32"));
}

#[test]
fn decoders_match_reference_floats() {
    let mut failures = Vec::new();
    for (file, v) in manifest() {
        let Vector::Decode { ty } = v else { continue };
        let name = ty.ggml_name();
        let bytes = read(&format!("decode.{name}.bin"));
        let want = read_f32(&format!("decode.{name}.f32"));
        let mut got = vec![f32::NAN; want.len()];
        dequantize_row(ty, &bytes, &mut got).unwrap();
        let bad = got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        if bad > 0 {
            failures.push(format!("{file}: decode {ty}: {bad} of {} values differ", want.len()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_type_is_covered() {
    let (mut enc, mut weighted, mut dec) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for (_, v) in manifest() {
        match v {
            Vector::Encode { ty, .. } => enc.insert(ty),
            Vector::EncodeWeighted { ty, .. } => weighted.insert(ty),
            Vector::Decode { ty } => dec.insert(ty),
            Vector::EncodeFromFloat { .. } => false,
        };
    }
    for ty in GgmlType::ALL {
        if ty != GgmlType::F32 {
            // Types ggml writes only with an importance matrix have weighted vectors alone.
            let covered = if requires_importance(ty) { weighted.contains(&ty) } else { enc.contains(&ty) };
            assert!(covered, "no encoder vectors for {ty}");
        }
        if ty.is_quantized() {
            assert!(dec.contains(&ty), "no decoder vectors for {ty}");
        }
    }
}
