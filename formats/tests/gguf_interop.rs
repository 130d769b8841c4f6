//! GGUF interoperability: files from our writer read by independent readers (gguf-rs-lib, and the
//! Python `gguf` package when installed), files from gguf-rs-lib read by ours, and the llama.cpp-written
//! stories260k model re-written byte for byte.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::Command;

use gguf_rs_lib::format::metadata::{MetadataArray, MetadataValue};
use gguf_rs_lib::format::types::GGUFValueType;
use gguf_rs_lib::prelude::{GGUFBuilder, GGUFFileReader};
use gguf_rs_lib::tensor::TensorType;
use tgi_formats::gguf::{Array, GgufFile, GgufWriter, TensorSpec, Value};
use tgi_formats::GgmlType;

fn metadata() -> Vec<(String, Value)> {
    vec![
        ("general.architecture".into(), "llama".into()),
        ("general.name".into(), "interop test".into()),
        ("llama.block_count".into(), 2u32.into()),
        ("llama.attention.layer_norm_rms_epsilon".into(), 1e-5f32.into()),
        ("tokenizer.ggml.tokens".into(), Value::strings(["<unk>", "<s>", "▁hé"])),
        ("tokenizer.ggml.scores".into(), Value::f32s(vec![0.0, -1.0, -2.5])),
        ("tokenizer.ggml.token_type".into(), Value::i32s([2, 3, 1])),
        ("tokenizer.ggml.add_bos_token".into(), true.into()),
        ("test.u64".into(), (1u64 << 40).into()),
        ("test.i64".into(), (-42i64).into()),
        ("test.f64".into(), 0.25f64.into()),
        ("test.u8".into(), 200u8.into()),
        ("test.i16".into(), (-300i16).into()),
        ("test.u64s".into(), Value::Array(Array::U64(vec![1, 2, 3]))),
    ]
}

/// (spec, bytes) for a mix of float and quantized tensors.
fn tensors() -> Vec<(TensorSpec, Vec<u8>)> {
    let t = |name: &str, dims: &[u64], ty: GgmlType| {
        let n: u64 = dims.iter().product();
        let len = ty.bytes_for(n).unwrap() as usize;
        let bytes = (0..len).map(|i| (i * 7 + name.len()) as u8).collect();
        (TensorSpec { name: name.into(), dims: dims.to_vec(), ty }, bytes)
    };
    vec![
        t("token_embd.weight", &[64, 8], GgmlType::F32),
        t("blk.0.attn_q.weight", &[256, 4], GgmlType::Q4_K),
        t("blk.0.ffn_down.weight", &[64, 3], GgmlType::Q8_0),
        t("blk.0.attn_norm.weight", &[5], GgmlType::F16),
        t("blk.0.ffn_up.weight", &[256, 2], GgmlType::Q6_K),
        t("output_norm.weight", &[7], GgmlType::BF16),
    ]
}

fn write_ours(path: &Path) -> Vec<(TensorSpec, Vec<u8>)> {
    let ts = tensors();
    let specs = ts.iter().map(|(s, _)| s.clone()).collect();
    let out = BufWriter::new(File::create(path).unwrap());
    let mut w = GgufWriter::new(out, metadata(), specs).unwrap();
    for (s, bytes) in &ts {
        w.write_tensor(&s.name, bytes).unwrap();
    }
    w.finish().unwrap();
    ts
}

fn theirs(v: &Value) -> MetadataValue {
    fn arr(ty: GGUFValueType, values: Vec<MetadataValue>) -> MetadataValue {
        MetadataValue::Array(Box::new(MetadataArray::new(ty, values).unwrap()))
    }
    match v {
        Value::U8(x) => MetadataValue::U8(*x),
        Value::I8(x) => MetadataValue::I8(*x),
        Value::U16(x) => MetadataValue::U16(*x),
        Value::I16(x) => MetadataValue::I16(*x),
        Value::U32(x) => MetadataValue::U32(*x),
        Value::I32(x) => MetadataValue::I32(*x),
        Value::F32(x) => MetadataValue::F32(*x),
        Value::Bool(x) => MetadataValue::Bool(*x),
        Value::String(x) => MetadataValue::String(x.clone()),
        Value::U64(x) => MetadataValue::U64(*x),
        Value::I64(x) => MetadataValue::I64(*x),
        Value::F64(x) => MetadataValue::F64(*x),
        Value::Array(Array::String(xs)) => {
            arr(GGUFValueType::String, xs.iter().map(|x| MetadataValue::String(x.clone())).collect())
        }
        Value::Array(Array::F32(xs)) => arr(GGUFValueType::F32, xs.iter().map(|&x| MetadataValue::F32(x)).collect()),
        Value::Array(Array::I32(xs)) => arr(GGUFValueType::I32, xs.iter().map(|&x| MetadataValue::I32(x)).collect()),
        Value::Array(Array::U64(xs)) => arr(GGUFValueType::U64, xs.iter().map(|&x| MetadataValue::U64(x)).collect()),
        other => panic!("not used in this test: {other:?}"),
    }
}

#[test]
fn gguf_rs_lib_reads_our_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ours.gguf");
    let ts = write_ours(&path);
    let ours = GgufFile::open(&path).unwrap();

    let mut r = GGUFFileReader::new(File::open(&path).unwrap()).unwrap();
    assert_eq!(r.header().version, 3);
    assert_eq!(r.tensor_count(), ts.len());
    assert_eq!(r.tensor_data_offset(), ours.data_start());
    assert_eq!(r.metadata().len(), metadata().len());
    for (key, value) in metadata() {
        assert_eq!(r.metadata().get(&key), Some(&theirs(&value)), "{key}");
    }
    let infos: Vec<_> = r.tensor_infos().to_vec();
    let mut expected_offset = 0;
    for ((info, (spec, bytes)), our) in infos.iter().zip(&ts).zip(ours.tensors()) {
        assert_eq!(info.name(), spec.name);
        assert_eq!(info.tensor_type() as u32, spec.ty.id());
        assert_eq!(info.shape().dims(), spec.dims.as_slice());
        assert_eq!(info.data_offset(), our.offset);
        // Gap-free offsets, 32-byte padded, as llama.cpp requires.
        assert_eq!(our.offset, expected_offset);
        expected_offset += bytes.len().div_ceil(32) as u64 * 32;
        let data = r.load_tensor_data(&spec.name).unwrap().unwrap();
        assert_eq!(data.as_slice(), bytes.as_slice());
    }
}

#[test]
fn we_read_gguf_rs_lib_file() {
    let mut b = GGUFBuilder::new()
        .add_metadata("general.architecture", MetadataValue::String("llama".into()))
        .add_metadata("llama.block_count", MetadataValue::U32(3))
        .add_metadata("test.scores", theirs(&Value::f32s(vec![1.0, 2.0])));
    for (spec, bytes) in tensors() {
        let ty = TensorType::from_u32(spec.ty.id()).unwrap();
        b = b.add_tensor(spec.name.clone(), spec.dims.clone(), ty, bytes).unwrap();
    }
    let (bytes, _) = b.build_to_bytes().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("theirs.gguf");
    std::fs::write(&path, bytes).unwrap();

    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.get("llama.block_count").and_then(Value::as_u32), Some(3));
    assert_eq!(f.get("test.scores"), Some(&Value::f32s(vec![1.0, 2.0])));
    assert_eq!(f.get("general.architecture").and_then(Value::as_str), Some("llama"));
    let ts = tensors();
    assert_eq!(f.tensors().len(), ts.len());
    for (spec, data) in &ts {
        let t = f.tensor(&spec.name).unwrap();
        assert_eq!((&t.dims, t.ty), (&spec.dims, spec.ty));
        assert_eq!(f.tensor_data(t), data.as_slice());
    }
}

fn stories() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories260k/stories260k-f32.gguf")
}

#[test]
fn rewriting_stories260k_is_byte_identical() {
    let src = GgufFile::open(&stories()).unwrap();
    let specs =
        src.tensors().iter().map(|t| TensorSpec { name: t.name.clone(), dims: t.dims.clone(), ty: t.ty }).collect();
    let mut w = GgufWriter::new(Vec::new(), src.metadata().to_vec(), specs).unwrap();
    for t in src.tensors() {
        w.write_tensor(&t.name, src.tensor_data(t)).unwrap();
    }
    let out = w.finish().unwrap();
    let original = std::fs::read(stories()).unwrap();
    assert_eq!(out.len(), original.len());
    assert!(out == original, "re-written file differs from the llama.cpp-converted original");
}

/// Reads a file with gguf-py's `GGUFReader` and prints one line per KV and per tensor.
const PY_DUMP: &str = r#"
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
for k, f in r.fields.items():
    if not k.startswith("GGUF."):
        print("kv", k, [int(t) for t in f.types], repr(f.contents()))
for t in r.tensors:
    print("tensor", t.name, int(t.tensor_type), [int(d) for d in t.shape], t.data_offset, t.n_bytes, bytes(t.data.tobytes()).hex()[:16])
"#;

#[test]
fn python_gguf_reads_our_file() {
    let ok = Command::new("python3").args(["-c", "import gguf"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: python3 with the `gguf` package is not available");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ours.gguf");
    let ts = write_ours(&path);
    let ours = GgufFile::open(&path).unwrap();
    let out = Command::new("python3").args(["-c", PY_DUMP]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let kvs: Vec<&str> = lines.iter().copied().filter(|l| l.starts_with("kv ")).collect();
    assert_eq!(kvs.len(), metadata().len());
    assert!(kvs.contains(&"kv llama.block_count [4] 2"), "{kvs:?}");
    assert!(kvs.contains(&"kv tokenizer.ggml.tokens [9, 8] ['<unk>', '<s>', '▁hé']"), "{kvs:?}");
    assert!(kvs.contains(&"kv tokenizer.ggml.token_type [9, 5] [2, 3, 1]"), "{kvs:?}");
    assert!(kvs.contains(&"kv test.u64 [10] 1099511627776"), "{kvs:?}");
    let tensor_lines: Vec<&str> = lines.iter().copied().filter(|l| l.starts_with("tensor ")).collect();
    assert_eq!(tensor_lines.len(), ts.len());
    for ((line, (spec, bytes)), t) in tensor_lines.iter().zip(&ts).zip(ours.tensors()) {
        let dims: Vec<String> = spec.dims.iter().map(u64::to_string).collect();
        let hex: String = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
        let expected = format!(
            "tensor {} {} [{}] {} {} {}",
            spec.name,
            spec.ty.id(),
            dims.join(", "),
            ours.data_start() + t.offset,
            bytes.len(),
            hex
        );
        assert_eq!(*line, expected);
    }
}
