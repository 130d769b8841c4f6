//! The IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ1_S and IQ1_M presets end to end against llama.cpp (references recorded by
//! `tests/reference/make_iq4_quant_refs.py --family iq2`): with the committed importance matrix of
//! stories-distill-4l, `tgi quantize` writes llama-quantize's tensors byte for byte (the whole file from the
//! converter's `stories-distill-4l-f32.gguf`), with the same file type, and stories260k's (whose 64-wide rows fall
//! back to IQ4_NL); without a matrix it refuses the stories-distill-4l runs, as llama-quantize refuses them.

mod common;

use common::iquant::{distill_f32, files_mismatches, quantize_args, reference, run_args};
use common::{assert_fails, tgi};

/// The llama-quantize types of the family.
const TYPES: [&str; 6] = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M"];

#[test]
fn iq2_files_equal_llama_quantize() {
    let dir = tempfile::tempdir().unwrap();
    let distill = distill_f32(dir.path());
    let failures = files_mismatches(&reference("iq2"), &TYPES, &distill, dir.path());
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn iq2_presets_without_a_matrix_are_refused_as_llama_quantize_refuses_them() {
    let refs = reference("iq2");
    let dir = tempfile::tempdir().unwrap();
    let distill = distill_f32(dir.path());
    let out = dir.path().join("out.gguf");
    let mut refused = 0;
    for (name, run) in refs["runs"].as_object().unwrap() {
        let Some(error) = run.get("error") else { continue };
        assert!(error.as_str().unwrap().contains("requires an imatrix"), "{name}");
        let ty = run["llama_quantize_type"].as_str().unwrap();
        assert_fails(&tgi(quantize_args(&distill, ty, &run_args(run), &out)), 2, "--imatrix");
        assert!(!out.exists(), "{name}");
        refused += 1;
    }
    assert_eq!(refused, TYPES.len());
}
