//! Safetensors tests: valid files and shard sets, each hostile header/layout case giving an error,
//! and mutation/truncation never panicking.

use std::path::{Path, PathBuf};

use super::*;

/// A safetensors file from a raw header string and data bytes.
fn raw(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A valid file: tensors laid out back to back in the given order.
fn file(tensors: &[(&str, &str, &[usize], Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let offsets = [data.len(), data.len() + bytes.len()];
        header.insert(name.to_string(), serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": offsets}));
        data.extend_from_slice(bytes);
    }
    raw(&serde_json::Value::Object(header).to_string(), &data)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn mixed() -> Vec<u8> {
    file(&[
        ("w.f32", "F32", &[2, 2], f32_bytes(&[1.0, -2.0, 3.5, 0.0])),
        (
            "w.f16",
            "F16",
            &[3],
            [1.0f32, 0.5, -4.0].iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
        ),
        (
            "w.bf16",
            "BF16",
            &[1, 2],
            [2.0f32, -0.125].iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
        ),
        ("ids", "I32", &[2], vec![1, 0, 0, 0, 2, 0, 0, 0]),
        ("fp8", "F8_E4M3", &[4], vec![0x38; 4]),
    ])
}

#[test]
fn reads_single_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "m.safetensors", &mixed());
    let set = SafetensorsSet::open_files(std::slice::from_ref(&path)).unwrap();
    let metas = set.tensors();
    let names: Vec<&str> = metas.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["w.f32", "w.f16", "w.bf16", "ids", "fp8"]);
    assert_eq!(metas[0].shape, vec![2, 2]);
    assert_eq!(metas[3].dtype, DType::I32);
    assert_eq!(metas[4].dtype, DType::Other("F8_E4M3"));
    assert_eq!(set.read_f32("w.f32").unwrap(), vec![1.0, -2.0, 3.5, 0.0]);
    assert_eq!(set.read_f32("w.f16").unwrap(), vec![1.0, 0.5, -4.0]);
    assert_eq!(set.read_f32("w.bf16").unwrap(), vec![2.0, -0.125]);
    assert_eq!(set.raw_bytes("ids").unwrap(), &[1, 0, 0, 0, 2, 0, 0, 0]);
    for (name, dtype) in [("ids", "I32"), ("fp8", "F8_E4M3")] {
        let e = set.read_f32(name).unwrap_err();
        assert!(matches!(e, SourceError::NotFloat { .. }), "{e}");
        assert!(e.to_string().contains(&format!("m.safetensors: tensor '{name}' is {dtype}, which cannot")), "{e}");
    }
    let e = set.read_f32("missing").unwrap_err();
    assert!(e.to_string().ends_with("m.safetensors: no tensor named 'missing'"), "{e}");
    assert_eq!(set.file_of("ids"), Some(path.as_path()));
}

/// The error from opening `bytes` as a file named `bad.safetensors`.
fn open_err(bytes: &[u8]) -> SafetensorsError {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "bad.safetensors", bytes);
    let e = SafetensorsSet::open_files(&[path]).err().unwrap();
    assert!(e.to_string().contains("bad.safetensors: "), "message does not name the file: {e}");
    e
}

#[test]
fn hostile_files_are_errors() {
    let too_short = open_err(&[1, 0, 0]);
    assert!(matches!(too_short, SafetensorsError::TooShort { file_size: 3, .. }), "{too_short}");
    let e = open_err(&u64::MAX.to_le_bytes());
    assert!(matches!(e, SafetensorsError::HeaderPastEnd { .. }), "{e}");
    let e = open_err(&raw("{}", &[])[..9]);
    assert!(matches!(e, SafetensorsError::HeaderPastEnd { len: 2, file_size: 9, .. }), "{e}");

    let entry = |name: &str, dtype: &str, shape: &str, a: usize, b: usize| {
        format!(r#""{name}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[{a},{b}]}}"#)
    };
    let one = |e: String, data: usize| raw(&format!("{{{e}}}"), &vec![0u8; data]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", raw("{not json", &[])),
        ("header not an object", raw("[1,2]", &[])),
        ("unknown dtype", one(entry("t", "F7", "[2]", 0, 2), 2)),
        ("end past the data", one(entry("t", "F32", "[250]", 0, 1000), 16)),
        ("size does not match shape", one(entry("t", "F32", "[4]", 0, 8), 8)),
        ("shape overflows", one(entry("t", "F32", "[9223372036854775807,4]", 0, 8), 8)),
        ("start after end", one(entry("t", "U8", "[0]", 8, 0), 8)),
        ("trailing bytes", one(entry("t", "U8", "[4]", 0, 4), 8)),
        (
            "overlap",
            raw(&format!("{{{},{}}}", entry("a", "F32", "[2]", 0, 8), entry("b", "F32", "[2]", 4, 12)), &[0; 12]),
        ),
        ("gap", raw(&format!("{{{},{}}}", entry("a", "F32", "[1]", 0, 4), entry("b", "F32", "[1]", 8, 12)), &[0; 12])),
        ("sub-byte slice", one(entry("t", "F4", "[3]", 0, 1), 1)),
    ];
    for (what, bytes) in cases {
        let e = open_err(&bytes);
        assert!(matches!(e, SafetensorsError::Invalid { .. }), "{what}: {e}");
    }
    let mut not_utf8 = raw("{\"a\":1}", &[]);
    not_utf8[9] = 0xff;
    let e = open_err(&not_utf8);
    assert!(e.to_string().contains("invalid UTF-8"), "{e}");
}

#[test]
fn mutation_and_truncation_never_panic() {
    let file = mixed();
    let path = Path::new("fuzz.safetensors");
    let check = |buf: &[u8]| {
        if let Ok((n, md)) = parse_header(buf, path) {
            // Whatever is accepted must describe bytes inside the buffer.
            for name in md.offset_keys() {
                let (a, b) = md.info(&name).unwrap().data_offsets;
                assert!(a <= b && 8 + n + b <= buf.len(), "{name}");
            }
        }
    };
    for len in 0..=file.len() {
        check(&file[..len]);
    }
    for pos in 0..file.len() {
        for x in [0x01u8, 0x20, 0x80, 0xff] {
            let mut m = file.clone();
            m[pos] ^= x;
            check(&m);
        }
        for v in [b'0', b'9', b'"', b'[', b'}', b'-', 0] {
            let mut m = file.clone();
            m[pos] = v;
            check(&m);
        }
    }
}

/// Writes a two-shard checkpoint with the given index JSON.
fn sharded(dir: &Path, index: &str) {
    write(dir, "model-00001-of-00002.safetensors", &file(&[("a", "F32", &[1], f32_bytes(&[1.0]))]));
    write(dir, "model-00002-of-00002.safetensors", &file(&[("b", "F32", &[2], f32_bytes(&[2.0, 3.0]))]));
    write(dir, INDEX_FILE, index.as_bytes());
}

const INDEX: &str = r#"{"metadata":{"total_size":12},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}"#;

#[test]
fn opens_sharded_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path(), INDEX);
    let set = SafetensorsSet::open_dir(dir.path()).unwrap();
    assert_eq!(set.files().count(), 2);
    let names: Vec<String> = set.tensors().into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(set.read_f32("b").unwrap(), vec![2.0, 3.0]);
    assert!(set.file_of("b").unwrap().ends_with("model-00002-of-00002.safetensors"));
    let e = set.raw_bytes("c").unwrap_err();
    assert_eq!(e.to_string(), format!("{}: no tensor named 'c'", dir.path().display()));
}

#[test]
fn bad_shard_sets_are_errors() {
    let case = |index: &str| {
        let dir = tempfile::tempdir().unwrap();
        sharded(dir.path(), index);
        SafetensorsSet::open_dir(dir.path()).err().unwrap()
    };
    let e = case(r#"{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00003-of-00002.safetensors"}}"#);
    assert!(matches!(e, SafetensorsError::MissingShard { .. }), "{e}");
    assert!(e.to_string().contains("shard 'model-00003-of-00002.safetensors' does not exist"), "{e}");
    let e = case(r#"{"weight_map":{"a":"model-00002-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}"#);
    assert!(matches!(e, SafetensorsError::NotInShard { .. }), "{e}");
    let e = case(r#"{"weight_map":{"a":"../model-00001-of-00002.safetensors"}}"#);
    assert!(matches!(e, SafetensorsError::BadShardName { .. }), "{e}");
    let e = case(r#"{"weight_map":{"a":"/etc/passwd"}}"#);
    assert!(matches!(e, SafetensorsError::BadShardName { .. }), "{e}");
    for bad in ["{", r#"{"weight_map":[1]}"#, r#"{"nothing":{}}"#] {
        let e = case(bad);
        assert!(matches!(e, SafetensorsError::BadIndex { .. }), "{e}");
        assert!(e.to_string().contains(INDEX_FILE), "{e}");
    }

    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "x.safetensors", &file(&[("a", "F32", &[1], f32_bytes(&[1.0]))]));
    write(dir.path(), "y.safetensors", &file(&[("a", "F32", &[1], f32_bytes(&[2.0]))]));
    let e = SafetensorsSet::open_files(&[dir.path().join("x.safetensors"), dir.path().join("y.safetensors")])
        .err()
        .unwrap();
    assert!(matches!(e, SafetensorsError::DuplicateTensor { .. }), "{e}");
    assert!(e.to_string().starts_with("tensor 'a' is in both "), "{e}");

    let e = SafetensorsSet::open_dir(tempfile::tempdir().unwrap().path()).err().unwrap();
    assert!(matches!(e, SafetensorsError::NoCheckpoint { .. }), "{e}");
    assert!(matches!(SafetensorsSet::open_files(&[]), Err(SafetensorsError::NoFiles)));
    let e = SafetensorsSet::open_files(&[dir.path().join("nope.safetensors")]).err().unwrap();
    assert!(matches!(e, SafetensorsError::Io { .. }) && e.to_string().contains("nope.safetensors"), "{e}");
}

#[test]
fn stories260k_hf_opens() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories260k/hf");
    let set = SafetensorsSet::open_dir(&dir).unwrap();
    let metas = set.tensors();
    assert_eq!(metas.len(), 47);
    assert!(metas.iter().all(|m| m.dtype == DType::F32));
    let q = metas.iter().find(|m| m.name == "model.layers.0.self_attn.k_proj.weight").unwrap();
    assert_eq!(q.shape, vec![32, 64]);
    assert_eq!(set.read_f32(&q.name).unwrap().len(), 32 * 64);
}
