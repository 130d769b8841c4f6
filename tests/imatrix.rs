//! `tgi imatrix` against llama.cpp's `llama-imatrix` on the same model and text: the files
//! tests/reference/imatrix/ holds were written by llama-imatrix (make_imatrix_refs.sh), and tgi's matrix must have
//! the same entries with the same counts and every sum within 1e-3 relative.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_fails, assert_ok, model, root, tgi};
use tgi_formats::imatrix::{Imatrix, ImatrixEntry};

/// The chunking make_imatrix_refs.sh used.
const CTX: &str = "128";
const CHUNKS: &str = "24";

fn reference(name: &str) -> PathBuf {
    root().join("tests/reference/imatrix").join(name)
}

/// `tgi imatrix` on stories-distill-4l over its calibration text, as the reference was made; returns the JSON line.
fn compute(out: &Path, extra: &[&str]) -> serde_json::Value {
    let text = model("stories-distill-4l/text/calibration.txt");
    let mut args: Vec<std::ffi::OsString> = vec![
        "imatrix".into(),
        "-m".into(),
        model("stories-distill-4l/hf").into_os_string(),
        "-f".into(),
        text.into_os_string(),
        "-c".into(),
        CTX.into(),
        "--chunks".into(),
        CHUNKS.into(),
        "-o".into(),
        out.as_os_str().to_owned(),
        "--json".into(),
    ];
    args.extend(extra.iter().map(Into::into));
    serde_json::from_str(assert_ok(&tgi(args)).trim()).unwrap()
}

/// The mismatches between two entries: counts, and sums beyond 1e-3 of the reference's (relative, with a floor of
/// 1e-6 of the entry's largest sum for sums near zero).
fn differences(name: &str, got: &ImatrixEntry, want: &ImatrixEntry) -> Vec<String> {
    if got.counts != want.counts || got.sums.len() != want.sums.len() {
        return vec![format!(
            "{name}: counts {:?} ({} sums) against {:?} ({})",
            got.counts,
            got.sums.len(),
            want.counts,
            want.sums.len()
        )];
    }
    let floor = 1e-6 * want.sums.iter().fold(0f32, |m, v| m.max(v.abs()));
    got.sums
        .iter()
        .zip(&want.sums)
        .enumerate()
        .filter(|(_, (g, w))| (*g - *w).abs() > 1e-3 * w.abs() + floor)
        .take(3)
        .map(|(i, (g, w))| format!("{name}[{i}]: {g} against {w}"))
        .collect()
}

fn assert_matches(got: &Imatrix, want: &Imatrix) {
    let names = |m: &Imatrix| m.entries.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(got), names(want));
    let bad: Vec<String> = want.entries.iter().flat_map(|(name, w)| differences(name, &got.entries[name], w)).collect();
    assert!(bad.is_empty(), "{} mismatches: {bad:#?}", bad.len());
    assert_eq!((got.chunk_count, got.chunk_size), (want.chunk_count, want.chunk_size));
}

#[test]
fn matches_llama_imatrix_with_the_output_layer() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d4l.imatrix.gguf");
    let summary = compute(&out, &["--process-output"]);
    let got = Imatrix::read(&out, 0).unwrap();
    let want = Imatrix::read(&reference("stories-distill-4l.imatrix.gguf"), 0).unwrap();
    assert_eq!(want.entries.len(), 4 * 7 + 1, "every projection and the output layer");
    assert_matches(&got, &want);
    // llama-imatrix's perplexity estimate for the same chunks (make_imatrix_refs.sh's log).
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reference("perplexity.json")).unwrap()).unwrap();
    let (ppl, want_ppl) = (summary["perplexity"].as_f64().unwrap(), expected["perplexity"].as_f64().unwrap());
    assert!((ppl - want_ppl).abs() < 1e-3 * want_ppl, "perplexity {ppl} against llama-imatrix's {want_ppl}");
}

#[test]
fn legacy_files_read_and_write_as_llama_cpp_does() {
    // llama-imatrix's .dat of the same run gives the same importance as its GGUF file.
    let want = Imatrix::read(&reference("stories-distill-4l.imatrix.gguf"), 0).unwrap();
    let dat = Imatrix::read(&reference("stories-distill-4l.imatrix.dat"), CTX.parse().unwrap()).unwrap();
    for (name, w) in &want.entries {
        let (a, b) = (dat.entries[name].importance(), w.importance());
        assert!(a.iter().zip(&b).all(|(a, b)| (a - b).abs() <= 1e-5 * b.abs().max(1e-3)), "{name}");
    }
    // tgi's .dat of the reference, read back.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("combined.dat");
    let reference = reference("stories-distill-4l.imatrix.gguf");
    assert_ok(&tgi(["imatrix".as_ref(), "--in-file".as_ref(), reference.as_os_str(), "-o".as_ref(), out.as_os_str()]));
    let back = Imatrix::read(&out, CTX.parse().unwrap()).unwrap();
    assert_eq!(back.entries.len(), want.entries.len());
}

#[test]
fn combining_adds_the_counts_and_bad_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let reference = reference("stories-distill-4l.imatrix.gguf");
    let out = dir.path().join("twice.gguf");
    let r = reference.as_os_str();
    assert_ok(&tgi([
        "imatrix".as_ref(),
        "--in-file".as_ref(),
        r,
        "--in-file".as_ref(),
        r,
        "-o".as_ref(),
        out.as_os_str(),
    ]));
    let (once, twice) = (Imatrix::read(&reference, 0).unwrap(), Imatrix::read(&out, 0).unwrap());
    for (name, e) in &once.entries {
        assert_eq!(twice.entries[name].counts, e.counts.iter().map(|c| 2 * c).collect::<Vec<_>>());
    }
    assert_eq!(twice.chunk_count, 2 * once.chunk_count);
    // Nothing to do, an existing output, and a file that is not a matrix: exit 2, nothing written.
    assert_fails(&tgi(["imatrix", "-o", "x.gguf"]), 2, "nothing to compute");
    assert_fails(
        &tgi(["imatrix".as_ref(), "--in-file".as_ref(), r, "-o".as_ref(), out.as_os_str()]),
        2,
        "already exists",
    );
    let junk = dir.path().join("junk.dat");
    std::fs::write(&junk, b"not a matrix").unwrap();
    let bad = dir.path().join("bad.gguf");
    assert_fails(
        &tgi(["imatrix".as_ref(), "--in-file".as_ref(), junk.as_os_str(), "-o".as_ref(), bad.as_os_str()]),
        2,
        "not an importance matrix",
    );
    assert!(!bad.exists());
}
