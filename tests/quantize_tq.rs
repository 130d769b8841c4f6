//! TQ1_0 and TQ2_0 (ternary) end to end against llama.cpp (references recorded by
//! `tests/reference/make_iq4_quant_refs.py --family tq`): `tgi quantize` writes llama-quantize's tensors byte for
//! byte, with the same file type, with and without the committed importance matrix of stories-distill-4l (which
//! both types ignore, as ggml does; the other tensors use it), and whole files for stories260k (whose 64-wide
//! rows make both fall back to Q4_0); `tgi perplexity` on the TQ2_0 files is llama-perplexity's. (From the
//! converter's `stories-distill-4l-f32.gguf` the stories-distill-4l files are whole-file identical too.)
//! The two types store the same values, so the engine generates the same greedy text from either, at every
//! kernel level this CPU runs.

mod common;

use common::iquant::{check_perplexity, distill_f32, files_mismatches, quantize, reference};
use common::{assert_fails, assert_ok, tgi};

#[test]
fn tq_files_equal_llama_quantize() {
    let dir = tempfile::tempdir().unwrap();
    let distill = distill_f32(dir.path());
    let failures = files_mismatches(&reference("tq"), &["TQ1_0", "TQ2_0"], &distill, dir.path());
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn tq2_0_perplexity_matches_llama_perplexity() {
    check_perplexity(&reference("tq"), "tq2_0", &["stories-distill-4l+tq2_0", "stories-distill-4l+tq2_0+imatrix"]);
}

#[test]
fn tq1_0_and_tq2_0_generate_the_same_greedy_text_at_every_level() {
    let dir = tempfile::tempdir().unwrap();
    let distill = distill_f32(dir.path());
    let files: Vec<_> = ["tq1_0", "tq2_0"]
        .iter()
        .map(|ty| {
            let out = dir.path().join(format!("{ty}.gguf"));
            quantize(&distill, ty, &[], &out);
            out
        })
        .collect();
    for level in ["scalar", "avx2", "avx-vnni", "avx512-vnni"] {
        let mut texts = Vec::new();
        for file in &files {
            let args = ["generate".as_ref(), "-m".as_ref(), file.as_os_str(), "--cpu-kernels".as_ref(), level.as_ref()];
            let rest = ["--temperature", "0", "-n", "16", "Once upon a time"];
            let out = tgi(args.into_iter().chain(rest.iter().map(|a| a.as_ref())));
            if !out.status.success() && level != "scalar" {
                assert_fails(&out, 2, &format!("--cpu-kernels: this CPU cannot run the {level} kernels"));
                continue;
            }
            texts.push(assert_ok(&out));
        }
        if let [a, b] = texts.as_slice() {
            assert!(!a.trim().is_empty(), "{level}: no text");
            assert_eq!(a, b, "{level}: TQ1_0 and TQ2_0 generate differently");
        }
    }
}
