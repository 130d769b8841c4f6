//! The CLI surface: help, completions, JSON summaries.

mod common;

use common::{assert_ok, model, tgi};

#[test]
fn help_and_completions() {
    for args in [vec!["--help"], vec!["quantize", "--help"], vec!["completions", "--help"]] {
        let out = assert_ok(&tgi(&args));
        assert!(out.contains("Usage"), "{args:?}: {out}");
    }
    let quantize_help = assert_ok(&tgi(["quantize", "--help"]));
    for flag in ["--type", "--output-tensor-type", "--token-embedding-type", "--tensor-type", "--json", "--force"] {
        assert!(quantize_help.contains(flag), "{flag} missing from help");
    }
    assert!(quantize_help.contains("q4_k_m") && quantize_help.contains("q2_k"));
    for shell in ["bash", "zsh", "fish"] {
        let out = assert_ok(&tgi(["completions", shell]));
        assert!(out.contains("quantize"), "{shell}");
    }
    assert_eq!(tgi(["completions", "tcsh"]).status.code(), Some(2));
}

#[test]
fn json_summary_describes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("q.gguf");
    let out = tgi([
        "quantize".as_ref(),
        model("stories-distill-4l/hf").as_os_str(),
        "--type".as_ref(),
        "q4_k_m".as_ref(),
        "--tensor-type".as_ref(),
        "ffn_up=q8_0".as_ref(),
        "-o".as_ref(),
        target.as_os_str(),
        "--json".as_ref(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&assert_ok(&out)).unwrap();
    assert_eq!(v["preset"], "q4_k_m");
    assert_eq!(v["tensors"], 39);
    assert_eq!(v["output_bytes"].as_u64(), Some(std::fs::metadata(&target).unwrap().len()));
    let types: Vec<&str> = v["by_type"].as_array().unwrap().iter().map(|t| t["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["f32", "q4_K", "q6_K", "q8_0"]);
    let up = v["per_tensor"].as_array().unwrap().iter().find(|t| t["name"] == "blk.0.ffn_up.weight").unwrap();
    assert_eq!(up["type"], "q8_0");
    let bpw = v["bits_per_weight"].as_f64().unwrap();
    assert!(bpw > 4.5 && bpw < 6.0, "{bpw}");
    let mean = v["mean_relative_rmse"].as_f64().unwrap();
    assert!(mean > 0.005 && mean < 0.12, "{mean}");
}
