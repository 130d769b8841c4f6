//! Tensor-by-tensor comparison of a GGUF file with the hashes recorded from llama.cpp's tools
//! (tests/reference/*.json: per tensor its type name and the SHA-256 of its data).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tgi_formats::gguf::GgufFile;

/// name -> (type name, sha256) of every tensor in a GGUF file.
pub fn tensor_hashes(path: &Path) -> BTreeMap<String, (String, String)> {
    let f = GgufFile::open(path).unwrap();
    f.tensors()
        .iter()
        .map(|t| {
            let hash = format!("{:x}", Sha256::digest(f.tensor_data(t)));
            (t.name.clone(), (t.ty.ggml_name().to_ascii_uppercase(), hash))
        })
        .collect()
}

/// Compares our file with llama.cpp's tensor by tensor; returns the mismatches.
pub fn compare(ours: &Path, want: &Value) -> Vec<String> {
    let got = tensor_hashes(ours);
    let mut bad = Vec::new();
    let want = want["tensors"].as_object().unwrap();
    for (name, w) in want {
        match got.get(name) {
            None => bad.push(format!("{name}: missing")),
            Some((ty, hash)) => {
                if ty != w["type"].as_str().unwrap() {
                    bad.push(format!("{name}: type {ty}, llama.cpp {}", w["type"]));
                } else if hash != w["sha256"].as_str().unwrap() {
                    bad.push(format!("{name}: {ty} bytes differ"));
                }
            }
        }
    }
    for name in got.keys().filter(|n| !want.contains_key(*n)) {
        bad.push(format!("{name}: not in llama.cpp's file"));
    }
    bad
}
