//! Reader tests: each malformed case built in memory maps to its error variant; mutation and truncation
//! of valid files never panic; the bundled stories260k GGUF opens.

use std::path::{Path, PathBuf};

use super::reader::parse;
use super::testutil::Raw;
use super::{Array, GgufError, GgufFile, GgufWriter, TensorSpec, Value, ALIGNMENT_KEY};
use crate::GgmlType;

fn err(raw: Raw) -> GgufError {
    parse(&raw.0, Path::new("m.gguf")).unwrap_err()
}

/// A valid file: one u32 KV and one F32 [4] tensor, followed by its data.
fn valid() -> Raw {
    Raw::header(3, 1, 1).kv("a.b", &Value::U32(1)).tensor("t", &[4], 0, 0).pad(32).zeros(16)
}

macro_rules! assert_variant {
    ($e:expr, $p:pat) => {{
        let e = $e;
        assert!(matches!(e, $p), "unexpected error: {e}");
        assert!(e.to_string().starts_with("m.gguf: "), "message does not name the file: {e}");
        e
    }};
}

#[test]
fn valid_minimal_file_parses() {
    let h = parse(&valid().0, Path::new("m.gguf")).unwrap();
    assert_eq!(h.version, 3);
    assert_eq!(h.tensors[0].size, 16);
    assert_eq!(h.data_start, 96);
}

#[test]
fn magic_and_version() {
    assert_variant!(err(Raw::default()), GgufError::BadMagic { .. });
    assert_variant!(err(Raw::default().bytes(b"GGU")), GgufError::BadMagic { .. });
    assert_variant!(err(Raw::default().bytes(b"GGML").u32(3)), GgufError::BadMagic { .. });
    for v in [0, 1, 4, 0x0300_0000] {
        assert_variant!(err(Raw::header(v, 0, 0)), GgufError::UnsupportedVersion { .. });
    }
    assert!(parse(&Raw::header(2, 0, 0).0, Path::new("m.gguf")).is_ok());
    assert!(parse(&Raw::header(3, 0, 0).0, Path::new("m.gguf")).is_ok());
}

#[test]
fn truncation() {
    assert_variant!(err(Raw::default().bytes(b"GGUF").u32(3).u32(0)), GgufError::Truncated { .. });
    let full = valid().0;
    // Cut inside the tensor info: the name and dims are there, the type is not.
    let e = assert_variant!(err(Raw(full[..58].to_vec())), GgufError::Truncated { .. });
    assert!(e.to_string().contains("tensor 't'"), "{e}");
    // Cut inside the data.
    assert_variant!(err(Raw(full[..100].to_vec())), GgufError::TensorOutOfBounds { .. });
}

#[test]
fn absurd_counts() {
    assert_variant!(err(Raw::header(3, u64::MAX, 0)), GgufError::CountTooLarge { .. });
    assert_variant!(err(Raw::header(3, 1 << 40, 0).zeros(64)), GgufError::CountTooLarge { .. });
    assert_variant!(err(Raw::header(3, 0, u64::MAX)), GgufError::CountTooLarge { .. });
    let arr = Raw::header(3, 0, 1).str("k").u32(9).u32(4).u64(u64::MAX / 2);
    assert_variant!(err(arr), GgufError::CountTooLarge { .. });
    let arr = Raw::header(3, 0, 1).str("k").u32(9).u32(8).u64(3).zeros(16);
    assert_variant!(err(arr), GgufError::CountTooLarge { .. });
}

#[test]
fn strings() {
    assert_variant!(err(Raw::header(3, 0, 1).u64(u64::MAX).zeros(16)), GgufError::StringTooLong { .. });
    assert_variant!(err(Raw::header(3, 0, 1).u64(100).zeros(20)), GgufError::StringTooLong { .. });
    let bad_key = Raw::header(3, 0, 1).u64(2).bytes(&[0xc3, 0x28]).u32(4).u32(0);
    assert_variant!(err(bad_key), GgufError::InvalidUtf8 { .. });
    let bad_value = Raw::header(3, 0, 1).str("k").u32(8).u64(1).bytes(&[0xff]);
    assert_variant!(err(bad_value), GgufError::InvalidUtf8 { .. });
    let bad_name = Raw::header(3, 1, 0).u64(1).bytes(&[0x80]).u32(1).u64(4).u32(0).u64(0);
    assert_variant!(err(bad_name), GgufError::InvalidUtf8 { .. });
}

#[test]
fn value_types() {
    assert_variant!(err(Raw::header(3, 0, 1).str("k").u32(13).u32(0)), GgufError::UnknownValueType { .. });
    let e = assert_variant!(err(Raw::header(3, 0, 1).str("k").u32(u32::MAX)), GgufError::UnknownValueType { .. });
    assert_eq!(e.to_string(), format!("m.gguf: key 'k' has unknown value type {}", u32::MAX));
    let arr = Raw::header(3, 0, 1).str("k").u32(9).u32(77).u64(0);
    assert_variant!(err(arr), GgufError::UnknownValueType { .. });
    assert_variant!(err(Raw::header(3, 0, 1).str("k").u32(7).bytes(&[2])), GgufError::InvalidBool { byte: 2, .. });
    let arr = Raw::header(3, 0, 1).str("k").u32(9).u32(7).u64(2).bytes(&[1, 9]);
    assert_variant!(err(arr), GgufError::InvalidBool { byte: 9, .. });
}

#[test]
fn array_nesting() {
    let nest = |depth: usize| {
        let mut r = Raw::header(3, 0, 1).str("k").u32(9);
        for _ in 1..depth {
            r = r.u32(9).u64(1);
        }
        r.u32(4).u64(0)
    };
    let h = parse(&nest(8).0, Path::new("m.gguf")).unwrap();
    let mut a = h.metadata[0].1.as_array().unwrap();
    for _ in 1..8 {
        a = match a {
            Array::Array(v) => &v[0],
            other => panic!("{other:?}"),
        };
    }
    assert_eq!(a, &Array::U32(vec![]));
    assert_variant!(err(nest(9)), GgufError::NestingTooDeep { .. });
    assert_variant!(err(nest(100_000)), GgufError::NestingTooDeep { .. });
}

#[test]
fn duplicate_keys_and_alignment() {
    let dup = Raw::header(3, 0, 2).kv("k", &Value::U8(1)).kv("k", &Value::U8(2));
    assert_variant!(err(dup), GgufError::DuplicateKey { .. });
    for v in [Value::U64(32), Value::I32(32), Value::U32(48), Value::U32(0), Value::from("32")] {
        assert_variant!(err(Raw::header(3, 0, 1).kv(ALIGNMENT_KEY, &v)), GgufError::BadAlignment { .. });
    }
    let r = Raw::header(3, 1, 1).kv(ALIGNMENT_KEY, &Value::U32(64)).tensor("t", &[4], 0, 0).pad(64).zeros(16);
    let h = parse(&r.0, Path::new("m.gguf")).unwrap();
    assert_eq!((h.alignment, h.data_start), (64, 128));
}

#[test]
fn tensor_infos() {
    let one = |name: &str, dims: &[u64], ty: u32, off: u64| {
        Raw::header(3, 1, 0).tensor(name, dims, ty, off).pad(32).zeros(64)
    };
    assert_variant!(err(one("t", &[], 0, 0)), GgufError::BadDimCount { n_dims: 0, .. });
    assert_variant!(err(one("t", &[1; 5], 0, 0)), GgufError::BadDimCount { n_dims: 5, .. });
    assert_variant!(err(one("t", &[1 << 32, 1 << 32], 0, 0)), GgufError::ShapeOverflow { .. });
    assert_variant!(err(one("t", &[u64::MAX], 0, 0)), GgufError::ShapeOverflow { .. });
    assert_variant!(err(one("t", &[1 << 62], 0, 0)), GgufError::ShapeOverflow { .. });
    let e = assert_variant!(err(one("t", &[33], 2, 0)), GgufError::BlockMisaligned { .. });
    assert_eq!(e.to_string(), "m.gguf: tensor 't' ne[0] = 33 is not a multiple of the q4_0 block size 32");
    assert_variant!(err(one("t", &[32], 4, 0)), GgufError::UnknownTensorType { type_id: 4, .. });
    assert_variant!(err(one("t", &[32], 99, 0)), GgufError::UnknownTensorType { type_id: 99, .. });
    assert_variant!(err(one(&"n".repeat(64), &[4], 0, 0)), GgufError::NameTooLong { len: 64, .. });
    assert!(parse(&one(&"n".repeat(63), &[4], 0, 0).0, Path::new("m.gguf")).is_ok());
    // A 4-dim tensor with a zero dim is empty but valid.
    assert!(parse(&one("t", &[4, 0, 2, 3], 0, 0).0, Path::new("m.gguf")).is_ok());
}

#[test]
fn data_ranges() {
    let two = |off_a: u64, off_b: u64, data: usize| {
        Raw::header(3, 2, 0).tensor("a", &[8], 0, off_a).tensor("b", &[8], 0, off_b).pad(32).zeros(data)
    };
    assert!(parse(&two(0, 32, 64).0, Path::new("m.gguf")).is_ok());
    // Gaps and reordering are legal for the reader.
    assert!(parse(&two(64, 0, 96).0, Path::new("m.gguf")).is_ok());
    assert_variant!(err(two(0, 16, 64)), GgufError::MisalignedOffset { offset: 16, .. });
    assert_variant!(err(two(0, 32, 40)), GgufError::TensorOutOfBounds { .. });
    assert_variant!(err(two(0, u64::MAX - 31, 64)), GgufError::TensorOutOfBounds { .. });
    let e = assert_variant!(err(two(0, 0, 64)), GgufError::TensorOverlap { .. });
    assert_eq!(e.to_string(), "m.gguf: tensor 'b' data overlaps tensor 'a'");
    let big = Raw::header(3, 2, 0).tensor("a", &[16], 0, 0).tensor("b", &[8], 0, 32).pad(32).zeros(96);
    assert_variant!(err(big), GgufError::TensorOverlap { .. });
    let dup = Raw::header(3, 2, 0).tensor("a", &[8], 0, 0).tensor("a", &[8], 0, 32).pad(32).zeros(64);
    assert_variant!(err(dup), GgufError::DuplicateTensor { .. });
}

/// A valid file with every value type, written by our writer.
fn rich_file() -> Vec<u8> {
    let md = vec![
        ("s".to_string(), Value::from("hé")),
        ("toks".to_string(), Value::strings(["a", "bc", ""])),
        ("f".to_string(), Value::f32s(vec![1.0, 2.0])),
        ("n".to_string(), Value::Array(Array::Array(vec![Array::Bool(vec![true, false]), Array::I64(vec![-1])]))),
        ("u".to_string(), Value::U32(7)),
        ("b".to_string(), Value::Bool(true)),
        ("d".to_string(), Value::F64(1.5)),
    ];
    let specs = vec![
        TensorSpec { name: "x".into(), dims: vec![32, 2], ty: GgmlType::Q8_0 },
        TensorSpec { name: "y".into(), dims: vec![3], ty: GgmlType::F32 },
    ];
    let mut w = GgufWriter::new(Vec::new(), md, specs).unwrap();
    w.write_tensor("x", &[5; 68]).unwrap();
    w.write_tensor("y", &[6; 12]).unwrap();
    w.finish().unwrap()
}

#[test]
fn truncation_and_mutation_never_panic() {
    let file = rich_file();
    let path = Path::new("fuzz.gguf");
    let h = parse(&file, path).unwrap();
    let y = &h.tensors[1];
    let data_end = (h.data_start + y.offset + y.size) as usize;
    for len in 0..file.len() {
        // A prefix parses exactly when it still holds the last tensor's bytes.
        assert_eq!(parse(&file[..len], path).is_ok(), len >= data_end, "prefix {len}");
    }
    for pos in 0..file.len() {
        for x in [0x01u8, 0x80, 0xff, 0x7f] {
            let mut m = file.clone();
            m[pos] ^= x;
            let _ = parse(&m, path);
        }
        for v in [0x00u8, 0xff] {
            let mut m = file.clone();
            m[pos] = v;
            let _ = parse(&m, path);
        }
    }
    // Random multi-byte corruptions (xorshift, fixed seed).
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let mut m = file.clone();
        for _ in 0..1 + next() % 4 {
            let pos = (next() % m.len() as u64) as usize;
            m[pos] = next() as u8;
        }
        let cut = m.len() - (next() % 8) as usize;
        let _ = parse(&m[..cut], path);
    }
}

#[test]
fn open_reports_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.gguf");
    let e = GgufFile::open(&missing).unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }) && e.to_string().contains("nope.gguf"), "{e}");
    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let e = GgufFile::open(&empty).unwrap_err();
    assert!(matches!(e, GgufError::BadMagic { .. }) && e.to_string().contains("empty.gguf"), "{e}");
}

/// The bundled stories260k model (copied into the repo under `models/`).
pub(crate) fn stories_gguf() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories260k/stories260k-f32.gguf")
}

#[test]
fn stories260k_opens() {
    let f = GgufFile::open(&stories_gguf()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.metadata().len(), 19);
    assert_eq!(f.get("general.architecture").and_then(Value::as_str), Some("llama"));
    assert_eq!(f.get("llama.block_count").and_then(Value::as_u32), Some(5));
    assert_eq!(f.get("llama.attention.layer_norm_rms_epsilon").and_then(Value::as_f32), Some(1e-5));
    let tokens = f.get("tokenizer.ggml.tokens").and_then(Value::as_array).unwrap();
    assert_eq!(tokens.len(), 512);
    assert_eq!(f.tensors().len(), 48);
    assert_eq!(f.data_start(), 14176);
    let emb = f.tensor("token_embd.weight").unwrap();
    assert_eq!((emb.dims.as_slice(), emb.ty, emb.offset, emb.size), (&[64, 512][..], GgmlType::F32, 0, 131072));
    assert!(f.tensors().iter().all(|t| t.ty == GgmlType::F32));
    assert_eq!(f.tensor_data(emb).len(), 131072);
    assert_eq!(f.tensor("blk.0.attn_k.weight").unwrap().dims, vec![64, 32]);
}

#[test]
fn dropping_arrays_keeps_scalars_and_tensors() {
    let mut f = GgufFile::open(&stories_gguf()).unwrap();
    let bos = f.get("tokenizer.ggml.bos_token_id").cloned();
    f.drop_arrays("tokenizer.ggml.");
    assert!(f.get("tokenizer.ggml.tokens").is_none() && f.get("tokenizer.ggml.scores").is_none());
    assert!(f.metadata().iter().all(|(k, v)| !(k.starts_with("tokenizer.ggml.") && v.as_array().is_some())));
    assert_eq!(f.get("tokenizer.ggml.bos_token_id").cloned(), bos);
    assert_eq!(f.get("llama.block_count").and_then(Value::as_u32), Some(5));
    assert_eq!(f.tensors().len(), 48);
}
