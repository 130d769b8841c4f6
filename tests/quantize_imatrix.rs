//! `tgi quantize --imatrix` against `llama-quantize --imatrix`: with the committed importance matrix of
//! stories-distill-4l every type's tensors are byte-identical to what llama-quantize wrote (hashes recorded by
//! tests/reference/make_imatrix_quant_refs.py), with the same `quantize.imatrix.*` metadata, and the filters give
//! the excluded tensors the bytes of no matrix. On stories260k, with matrices written here: a tensor with an entry
//! is the weighted encoder's rows and nothing else changes; the warning and the refusals.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::gguf_refs::{compare, tensor_hashes};
use common::{assert_fails, assert_ok, model, root, tgi};
use tgi_formats::gguf::{GgufFile, Value};
use tgi_formats::imatrix::{Imatrix, ImatrixEntry};
use tgi_formats::quant::quantize_row_weighted;
use tgi_formats::GgmlType;

/// The committed matrix, relative to the repository root (where the tests and the reference script run, so
/// `quantize.imatrix.file` is the same string in both files).
const MATRIX: &str = "tests/reference/imatrix/stories-distill-4l.imatrix.gguf";

fn reference(name: &str) -> serde_json::Value {
    let path = root().join("tests/reference").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn distill() -> PathBuf {
    model("stories-distill-4l/hf")
}

fn stories() -> PathBuf {
    model("stories260k/hf")
}

/// The importance of column `i` of entry `seed`: uneven, with zeros.
fn importance(seed: usize, i: usize) -> f32 {
    if i.is_multiple_of(7) {
        0.0
    } else {
        ((i * 31 + seed * 17) % 101) as f32 * 0.37 + 0.01
    }
}

/// Writes a GGUF importance matrix with `(name, columns)` entries (sums = importance · count).
fn write_matrix(dir: &Path, entries: &[(&str, usize)]) -> PathBuf {
    let mut m = Imatrix { datasets: vec!["calib.txt".into()], chunk_count: 5, chunk_size: 64, ..Default::default() };
    for (seed, (name, cols)) in entries.iter().enumerate() {
        let mut e = ImatrixEntry::new(*cols, 1);
        e.counts = vec![320];
        e.sums = (0..*cols).map(|i| importance(seed, i) * 320.0).collect();
        m.entries.insert(name.to_string(), e);
    }
    let path = dir.join("m.imatrix.gguf");
    m.write_gguf(std::fs::File::create(&path).unwrap()).unwrap();
    path
}

fn run(args: &[&str], input: &Path, ty: &str, out: &Path) -> Output {
    let mut all: Vec<&std::ffi::OsStr> = vec!["quantize".as_ref(), input.as_os_str(), "--type".as_ref(), ty.as_ref()];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    all.extend(["-o".as_ref(), out.as_os_str(), "--force".as_ref(), "--json".as_ref()]);
    tgi(all)
}

/// The `quantize.imatrix.*` keys of a file, in order.
fn imatrix_kv(path: &Path) -> Vec<(String, Value)> {
    let f = GgufFile::open(path).unwrap();
    f.metadata().iter().filter(|(k, _)| k.starts_with("quantize.imatrix.")).cloned().collect()
}

/// The `quantize.imatrix.*` keys of a file as JSON, as the reference records them.
fn imatrix_json(path: &Path) -> serde_json::Value {
    let kv = imatrix_kv(path).into_iter().map(|(k, v)| {
        let v = match v {
            Value::String(s) => serde_json::Value::from(s),
            other => serde_json::Value::from(other.as_u64().expect("an integer")),
        };
        (k, v)
    });
    serde_json::Value::Object(kv.collect())
}

#[test]
fn every_type_matches_llama_quantize_with_the_matrix() {
    let refs = reference("llamacpp_imatrix_quant.json");
    assert_eq!(refs["imatrix"]["file"], MATRIX);
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (name, want) in refs["runs"].as_object().expect("runs") {
        let ty = want["llama_quantize_type"].as_str().unwrap();
        let mut args = vec!["--imatrix", MATRIX];
        args.extend(want["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()));
        let out = dir.path().join(format!("{}.gguf", name.replace(['+', '='], "-")));
        assert_ok(&run(&args, &distill(), ty, &out));
        let ft = GgufFile::open(&out).unwrap().get("general.file_type").and_then(|v| v.as_u64());
        if ft != want["file_type"].as_u64() {
            failures.push(format!("{name}: general.file_type {ft:?}, llama.cpp {}", want["file_type"]));
        }
        let kv = imatrix_json(&out);
        if kv != want["imatrix_kv"] {
            failures.push(format!("{name}: metadata {kv}, llama.cpp {}", want["imatrix_kv"]));
        }
        failures.extend(compare(&out, want).into_iter().map(|m| format!("{name}: {m}")));
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn excluded_tensors_get_the_bytes_of_no_matrix() {
    // --exclude-weights ffn_down: the ffn_down tensors as llama-quantize writes them without a matrix, the others as
    // with the whole matrix.
    let plain = reference("llamacpp_quant.json");
    let plain = &plain["models"]["stories-distill-4l"]["presets"]["q4_k_m"]["tensors"];
    let with = reference("llamacpp_imatrix_quant.json");
    let with = &with["runs"]["q4_k_m"]["tensors"];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("excl.gguf");
    assert_ok(&run(&["--imatrix", MATRIX, "--exclude-weights", "ffn_down"], &distill(), "q4_k_m", &out));
    let mut excluded = 0;
    for (name, (_, hash)) in tensor_hashes(&out) {
        let want = if name.contains("ffn_down") { &plain[&name] } else { &with[&name] };
        assert_eq!(hash, want["sha256"].as_str().unwrap(), "{name}");
        excluded += name.contains("ffn_down") as usize;
    }
    assert_eq!(excluded, 4);
    // The matrix does change those tensors.
    assert_ne!(plain["blk.0.ffn_down.weight"]["sha256"], with["blk.0.ffn_down.weight"]["sha256"]);
}

/// A tensor's f32 values from an F32 file.
fn f32_values(file: &GgufFile, name: &str) -> Vec<f32> {
    let t = file.tensor(name).unwrap();
    file.tensor_data(t).chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn entries_weigh_their_tensors_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let matrix = write_matrix(dir.path(), &[("blk.0.attn_q.weight", 64), ("blk.1.ffn_up.weight", 64)]);
    let m = matrix.to_str().unwrap();
    let [f32, plain, with, excl] = ["f32", "plain", "with", "excl"].map(|n| dir.path().join(format!("{n}.gguf")));
    assert_ok(&run(&[], &stories(), "f32", &f32));
    assert_ok(&run(&[], &stories(), "q4_0", &plain));
    let o = run(&["--imatrix", m], &stories(), "q4_0", &with);
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no entry for") && err.contains("token_embd.weight") && err.contains("blk.0.attn_k.weight"));
    assert!(!err.contains("blk.0.attn_q.weight"), "{err}");
    assert_ok(&run(&["--imatrix", m, "--exclude-weights", "attn_q"], &stories(), "q4_0", &excl));

    let (plain_h, with_h, excl_h) = (tensor_hashes(&plain), tensor_hashes(&with), tensor_hashes(&excl));
    for (name, h) in &plain_h {
        let weighted = name == "blk.0.attn_q.weight" || name == "blk.1.ffn_up.weight";
        assert_eq!(with_h[name] != *h, weighted, "{name}");
        assert_eq!(excl_h[name] != *h, name == "blk.1.ffn_up.weight", "{name}");
    }
    // The weighted tensors are the weighted encoder's rows of the F32 values.
    let (f32, with) = (GgufFile::open(&f32).unwrap(), GgufFile::open(&with).unwrap());
    for (seed, name) in ["blk.0.attn_q.weight", "blk.1.ffn_up.weight"].into_iter().enumerate() {
        // What llama-quantize derives from the file: sums / count.
        let qw: Vec<f32> = (0..64).map(|i| importance(seed, i) * 320.0 / 320.0).collect();
        let t = with.tensor(name).unwrap();
        assert_eq!(t.ty, GgmlType::Q4_0);
        let mut want = Vec::new();
        for row in f32_values(&f32, name).chunks_exact(64) {
            let mut bytes = vec![0u8; 36];
            quantize_row_weighted(GgmlType::Q4_0, row, &mut bytes, &qw).unwrap();
            want.extend(bytes);
        }
        assert_eq!(with.tensor_data(t), &want[..], "{name}");
    }
    // The metadata as llama-quantize writes it; the entries counted after the filters.
    let kv = imatrix_kv(&dir.path().join("with.gguf"));
    let keys: Vec<&str> = kv.iter().map(|(k, _)| k.as_str()).collect();
    let want_keys = ["quantize.imatrix.file", "quantize.imatrix.dataset", "quantize.imatrix.entries_count"];
    assert_eq!(keys, [&want_keys[..], &["quantize.imatrix.chunks_count"]].concat());
    assert_eq!(kv[0].1, Value::String(m.into()));
    assert_eq!(kv[1].1, Value::String("calib.txt".into()));
    assert_eq!((kv[2].1.clone(), kv[3].1.clone()), (Value::U32(2), Value::U32(5)));
    assert_eq!(imatrix_kv(&excl)[2].1, Value::U32(1));
}

#[test]
fn filters_that_leave_nothing_mean_no_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let matrix = write_matrix(dir.path(), &[("blk.0.attn_q.weight", 64)]);
    let (plain, none) = (dir.path().join("plain.gguf"), dir.path().join("none.gguf"));
    assert_ok(&run(&[], &stories(), "q4_k_m", &plain));
    let o = run(&["--imatrix", matrix.to_str().unwrap(), "--include-weights", "ffn"], &stories(), "q4_k_m", &none);
    assert_ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no entry of"));
    assert_eq!(std::fs::read(&plain).unwrap(), std::fs::read(&none).unwrap());
}

#[test]
fn refusals() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.gguf");
    let s = stories();
    // An entry of another size: the matrix was made for another model (token_embd's is ignored, as llama.cpp does).
    let wrong = write_matrix(dir.path(), &[("token_embd.weight", 100), ("blk.1.attn_v.weight", 32)]);
    let o = run(&["--imatrix", wrong.to_str().unwrap()], &s, "q4_0", &out);
    assert_fails(&o, 2, "made for another model");
    assert!(String::from_utf8_lossy(&o.stderr).contains("blk.1.attn_v.weight"));
    assert!(!out.exists());
    let embd = write_matrix(dir.path(), &[("token_embd.weight", 100)]);
    assert_ok(&run(&["--imatrix", embd.to_str().unwrap()], &s, "q4_0", &out));
    std::fs::remove_file(&out).unwrap();

    let m = write_matrix(dir.path(), &[("blk.0.attn_q.weight", 64)]);
    let m = m.to_str().unwrap();
    let both = run(&["--imatrix", m, "--include-weights", "attn", "--exclude-weights", "ffn"], &s, "q4_0", &out);
    assert_fails(&both, 2, "cannot be combined");
    assert_fails(&run(&["--exclude-weights", "ffn"], &s, "q4_0", &out), 2, "--imatrix only");
    assert_fails(&run(&["--imatrix", "nonexistent.gguf"], &s, "q4_0", &out), 2, "nonexistent.gguf");
    let config = s.join("config.json");
    assert_fails(&run(&["--imatrix", config.to_str().unwrap()], &s, "q4_0", &out), 2, "--imatrix");
    let nf4 = tgi(["quantize", s.to_str().unwrap(), "--format", "nf4", "--imatrix", m, "-o", out.to_str().unwrap()]);
    assert_fails(&nf4, 2, "--imatrix applies to --format gguf only");
    // The preset llama-quantize writes only with a matrix and tgi does not write (Q2_K_S) is named as such
    // (iq2_xxs and the other written ones are refused per tensor, which stories260k's 64-wide rows never reach).
    let iq = tgi(["quantize", s.to_str().unwrap(), "--type", "q2_k_s", "-o", out.to_str().unwrap()]);
    assert_fails(&iq, 2, "--imatrix");
    assert!(!out.exists());
}
