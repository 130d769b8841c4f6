//! Bit-exact checks of `tgi_formats::bnb` against bitsandbytes 0.50.2 (CPU), from the vectors that
//! `tests/reference/bnb/make_vectors.py` wrote with `quantize_4bit` / `dequantize_4bit`: packed
//! bytes, absmax, double-quant codes, nested absmax, offset, maps, quant_state JSON bytes and the
//! dequantized tensor (after rounding to the input dtype) must all be identical, bit for bit.

use std::path::{Path, PathBuf};

use half::{bf16, f16};
use tgi_formats::bnb::{
    code, compress_absmax, decompress_absmax, dequantize_4bit, dynamic_map, quantize_4bit, torch_mean_f32, FourBitType,
    QuantStateJson, NESTED_BLOCKSIZE,
};
use tgi_formats::{DType, SafetensorsSet, TensorSource};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/bnb")
}

#[derive(serde::Deserialize)]
struct Case {
    key: String,
    input: String,
    shape: Vec<usize>,
    dtype: String,
    blocksize: usize,
    quant_type: String,
    double_quant: bool,
}

#[derive(serde::Deserialize)]
struct Manifest {
    cases: Vec<Case>,
    mean_lengths: Vec<usize>,
}

fn manifest() -> Manifest {
    serde_json::from_slice(&std::fs::read(dir().join("vectors.json")).unwrap()).unwrap()
}

fn open() -> SafetensorsSet {
    SafetensorsSet::open_files(&[dir().join("vectors.safetensors")]).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The stored bits of a tensor in its dtype (u16 for F16/BF16, u32 for F32).
fn stored_bits(src: &SafetensorsSet, name: &str) -> Vec<u32> {
    let dtype = src.tensors().into_iter().find(|t| t.name == name).unwrap().dtype;
    let raw = src.raw_bytes(name).unwrap();
    match dtype {
        DType::F32 => raw.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        DType::F16 | DType::BF16 => raw.chunks_exact(2).map(|b| u32::from(u16::from_le_bytes([b[0], b[1]]))).collect(),
        other => panic!("{name}: {other}"),
    }
}

/// f32 values rounded to `dtype` as bitsandbytes' kernels store them (round to nearest even).
fn round_bits(v: &[f32], dtype: &str) -> Vec<u32> {
    match dtype {
        "float16" => v.iter().map(|&x| u32::from(f16::from_f32(x).to_bits())).collect(),
        "bfloat16" => v.iter().map(|&x| u32::from(bf16::from_f32(x).to_bits())).collect(),
        _ => bits(v),
    }
}

/// Bit equality, except that +0.0 and -0.0 are the same value: FP4 index 8 is +0.0 in bitsandbytes'
/// `quant_map` (and in its torch dequantization, used for odd row lengths) but -0.0 in the lookup
/// table of its native CPU kernel (`fp4_lut` in `csrc/cpu_ops.cpp`, used for even row lengths).
fn same_value(a: u32, b: u32, dtype: &str) -> bool {
    let sign = if dtype == "float32" { 1 << 31 } else { 1 << 15 };
    a == b || (a | b) == sign
}

#[test]
fn quantize_and_dequantize_match_bitsandbytes() {
    let src = open();
    let m = manifest();
    assert_eq!(m.cases.len(), 36);
    let mut checked_values = 0;
    for case in &m.cases {
        let k = &case.key;
        let ty: FourBitType = case.quant_type.parse().unwrap();
        let x = src.read_f32(&case.input).unwrap();
        let n: usize = case.shape.iter().product();
        assert_eq!(x.len(), n, "{k}");
        let (packed, absmax) = quantize_4bit(ty, case.blocksize, &x).unwrap();
        assert_eq!(src.read_f32(&format!("{k}.quant_map")).unwrap(), code(ty).to_vec(), "{k}: quant_map");
        assert_eq!(packed, src.raw_bytes(&format!("{k}.packed")).unwrap(), "{k}: packed bytes");
        let used_absmax = if case.double_quant {
            let nested = compress_absmax(&absmax);
            assert_eq!(
                nested.offset.to_bits(),
                src.read_f32(&format!("{k}.offset")).unwrap()[0].to_bits(),
                "{k}: offset (torch mean)"
            );
            assert_eq!(nested.codes, src.raw_bytes(&format!("{k}.absmax")).unwrap(), "{k}: absmax codes");
            assert_eq!(
                bits(&nested.nested_absmax),
                bits(&src.read_f32(&format!("{k}.nested_absmax")).unwrap()),
                "{k}: nested absmax"
            );
            assert_eq!(
                bits(&src.read_f32(&format!("{k}.nested_quant_map")).unwrap()),
                bits(&dynamic_map()),
                "{k}: nested map"
            );
            let decoded = decompress_absmax(&nested);
            assert_eq!(
                bits(&decoded),
                bits(&src.read_f32(&format!("{k}.absmax_decoded")).unwrap()),
                "{k}: decoded absmax"
            );
            decoded
        } else {
            assert_eq!(bits(&absmax), bits(&src.read_f32(&format!("{k}.absmax")).unwrap()), "{k}: absmax");
            absmax
        };
        let state = QuantStateJson {
            quant_type: ty.name().into(),
            blocksize: case.blocksize,
            dtype: case.dtype.clone(),
            shape: case.shape.clone(),
            nested_blocksize: case.double_quant.then_some(NESTED_BLOCKSIZE),
            nested_dtype: case.double_quant.then(|| "float32".into()),
            nested_offset: case.double_quant.then(|| f64::from(src.read_f32(&format!("{k}.offset")).unwrap()[0])),
        };
        assert_eq!(
            state.to_json().as_bytes(),
            src.raw_bytes(&format!("{k}.quant_state")).unwrap(),
            "{k}: quant_state JSON"
        );
        let mut out = vec![0.0; n];
        dequantize_4bit(ty, case.blocksize, &packed, &used_absmax, n, &mut out).unwrap();
        let (ours, theirs) = (round_bits(&out, &case.dtype), stored_bits(&src, &format!("{k}.dequant")));
        let diff: Vec<(usize, u32, u32)> = ours
            .iter()
            .zip(&theirs)
            .enumerate()
            .filter(|(_, (a, b))| !same_value(**a, **b, &case.dtype))
            .map(|(i, (a, b))| (i, *a, *b))
            .collect();
        assert!(
            diff.is_empty(),
            "{k}: {} dequantized values differ (index, ours, bitsandbytes): {:?}",
            diff.len(),
            &diff[..diff.len().min(8)]
        );
        checked_values += n;
    }
    assert!(checked_values > 100_000);
}

#[test]
fn offset_is_torch_mean() {
    let src = open();
    for n in manifest().mean_lengths {
        let x = src.read_f32(&format!("mean.{n}.x")).unwrap();
        let want = src.read_f32(&format!("mean.{n}.mean")).unwrap()[0];
        assert_eq!(torch_mean_f32(&x).to_bits(), want.to_bits(), "length {n}: {} vs torch {want}", torch_mean_f32(&x));
    }
}

/// The checkpoint transformers + bitsandbytes saved for stories260k reads back, every linear weight
/// decodes close to the float32 original, and its stored double quantization is what ours computes.
#[test]
fn reads_transformers_checkpoint() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
    let saved = SafetensorsSet::open_dir(&models.join("stories260k-nf4-transformers")).unwrap();
    let orig = SafetensorsSet::open_dir(&models.join("stories260k/hf")).unwrap();
    let mut linear = 0;
    for t in orig.tensors() {
        if !t.name.ends_with("_proj.weight") {
            continue;
        }
        let w = tgi_formats::bnb::read_bnb4(&saved, &t.name).unwrap();
        assert_eq!((w.ty, w.blocksize, w.dtype.as_str()), (FourBitType::Nf4, 64, "float32"));
        assert_eq!(w.shape.to_vec(), t.shape);
        let x = orig.read_f32(&t.name).unwrap();
        let (packed, absmax) = quantize_4bit(FourBitType::Nf4, 64, &x).unwrap();
        assert_eq!(&packed[..], &w.packed[..], "{}", t.name);
        assert_eq!(w.nested.as_ref().unwrap(), &compress_absmax(&absmax), "{}", t.name);
        let mut out = vec![0.0; w.numel()];
        w.dequantize_into(&mut out).unwrap();
        let err: f64 = x.iter().zip(&out).map(|(a, b)| f64::from(a - b).powi(2)).sum();
        let norm: f64 = x.iter().map(|a| f64::from(*a).powi(2)).sum();
        assert!((err / norm).sqrt() < 0.12, "{}", t.name);
        linear += 1;
    }
    assert_eq!(linear, 35);
    assert!(!tgi_formats::bnb::is_bnb4_weight(&saved, "model.embed_tokens.weight"));
    let e = tgi_formats::bnb::read_bnb4(&saved, "model.norm.weight").unwrap_err();
    assert!(e.to_string().contains("not a bitsandbytes 4-bit weight"), "{e}");
}
