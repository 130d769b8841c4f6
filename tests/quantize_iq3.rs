//! IQ3_XXS, IQ3_S and IQ3_M end to end against llama.cpp (references recorded by
//! `tests/reference/make_iq4_quant_refs.py --family iq3`): `tgi quantize` writes llama-quantize's tensors byte for
//! byte, with the same file type, with and without the committed importance matrix of stories-distill-4l, and
//! whole files for stories260k (whose 64-wide rows make IQ3_S fall back to IQ4_NL); IQ3_XXS tensors (`--tensor-type
//! ffn_up=iq3_xxs`) likewise with the matrix, and refused without one as llama-quantize refuses them; `tgi
//! perplexity` on the IQ3_S files is llama-perplexity's. The iq3_xxs preset (attn_q and attn_k in IQ2_S) is written
//! with the matrix and refused without one, as llama-quantize refuses it.

mod common;

use common::iquant::{check_perplexity, distill_f32, files_mismatches, quantize_args, reference, run_args};
use common::{assert_fails, tgi};

#[test]
fn iq3_files_equal_llama_quantize() {
    let dir = tempfile::tempdir().unwrap();
    let distill = distill_f32(dir.path());
    let failures = files_mismatches(&reference("iq3"), &["IQ3_XXS", "IQ3_S", "IQ3_M"], &distill, dir.path());
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn iq3_xxs_without_a_matrix_is_refused_as_llama_quantize_refuses_it() {
    let refs = reference("iq3");
    let dir = tempfile::tempdir().unwrap();
    let distill = distill_f32(dir.path());
    let out = dir.path().join("out.gguf");
    for name in ["stories-distill-4l+iq3_xxs", "stories-distill-4l+iq3_s+ffn_up-iq3_xxs"] {
        let run = &refs["runs"][name];
        assert!(run["error"].as_str().unwrap().contains("requires an imatrix"), "{name}");
        let ty = run["llama_quantize_type"].as_str().unwrap();
        assert_fails(&tgi(quantize_args(&distill, ty, &run_args(run), &out)), 2, "--imatrix");
        assert!(!out.exists(), "{name}");
    }
}

#[test]
fn iq3_s_perplexity_matches_llama_perplexity() {
    check_perplexity(&reference("iq3"), "iq3_s", &["stories-distill-4l+iq3_s", "stories-distill-4l+iq3_s+imatrix"]);
}
