//! IQ4_NL and IQ4_XS end to end against llama.cpp (references recorded by tests/reference/make_iq4_quant_refs.py):
//! `tgi quantize` writes llama-quantize's tensors byte for byte, with the same file type, with and without the
//! committed importance matrix of stories-distill-4l, and whole files for stories260k (whose 64-wide rows make
//! IQ4_XS fall back to IQ4_NL and its 172-wide `ffn_down` to F16); `tgi perplexity` on the IQ4_XS files is
//! llama-perplexity's. (From the converter's `stories-distill-4l-f32.gguf`, which the repository does not carry,
//! the four stories-distill-4l files are whole-file identical too: `input_sha256` says which input that is.)

mod common;

use common::iquant::{check_perplexity, distill_f32, files_mismatches, reference};

#[test]
fn iq4_files_equal_llama_quantize() {
    let dir = tempfile::tempdir().unwrap();
    let distill = distill_f32(dir.path());
    let failures = files_mismatches(&reference("iq4"), &["IQ4_NL", "IQ4_XS"], &distill, dir.path());
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn iq4_xs_perplexity_matches_llama_perplexity() {
    check_perplexity(&reference("iq4"), "iq4_xs", &["stories-distill-4l+iq4_xs", "stories-distill-4l+iq4_xs+imatrix"]);
}
