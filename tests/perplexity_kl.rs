//! `tgi perplexity --kl-divergence-base/--kl-divergence`: a model against itself gives 0, a quantized one a
//! small positive KL divergence, and a base file made from other settings is refused.

mod common;

use std::path::Path;

use common::{assert_fails, assert_ok, model, tgi};
use serde_json::Value;

/// `tgi perplexity --json` of the bundled 260K model on the held-out text, with extra flags (8 chunks of 64
/// tokens unless they set --chunks/--ctx).
fn ppl(base: &Path, extra: &[&str]) -> std::process::Output {
    let hf = model("stories260k/hf");
    let text = model("stories-distill-4l/text/heldout.txt");
    let mut args = vec!["perplexity".as_ref(), "-m".as_ref(), hf.as_os_str(), "--json".as_ref()];
    for (flag, default) in [("--ctx", "64"), ("--chunks", "8")] {
        if !extra.contains(&flag) {
            args.extend([flag, default].map(std::ffi::OsStr::new));
        }
    }
    args.push("--kl-divergence-base".as_ref());
    args.push(base.as_os_str());
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    args.push(text.as_os_str());
    tgi(args)
}

fn kl(out: &std::process::Output) -> Value {
    let v: Value = serde_json::from_str(&assert_ok(out)).unwrap();
    v["kl_divergence"].clone()
}

#[test]
fn kl_divergence_against_self_and_quantized() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.kld");
    let saved: Value = serde_json::from_str(&assert_ok(&ppl(&base, &[]))).unwrap();
    assert!(saved["kl_divergence"].is_null());
    assert_fails(&ppl(&base, &[]), 2, "already exists");

    let same = kl(&ppl(&base, &["--kl-divergence"]));
    assert_eq!(same["positions"], 8 * 31);
    assert!(same["mean"].as_f64().unwrap().abs() < 1e-6, "{same}");
    assert!(same["max"].as_f64().unwrap().abs() < 1e-6, "{same}");
    assert_eq!(same["same_top_p"], 1.0);

    let mut previous = 0.0;
    for q in ["q8_0", "q4_0"] {
        let k = kl(&ppl(&base, &["--kl-divergence", "--quantize", q]));
        let mean = k["mean"].as_f64().unwrap();
        assert!(mean > 1e-6 && mean < 0.5, "{q}: {k}");
        assert!(mean > previous, "{q} should diverge more than the finer type: {k}");
        assert!(k["max"].as_f64().unwrap() >= k["p99"].as_f64().unwrap());
        assert!(k["p99"].as_f64().unwrap() >= k["median"].as_f64().unwrap());
        assert!(k["same_top_p"].as_f64().unwrap() > 0.5);
        previous = mean;
    }

    assert_fails(&ppl(&base, &["--kl-divergence", "--chunks", "4"]), 2, "made with chunks 8, this run has 4");
    assert_fails(&ppl(&base, &["--kl-divergence", "--ctx", "32"]), 2, "made with --ctx 64");
    let other = dir.path().join("other.kld");
    let hf = model("stories260k/hf");
    let text = model("stories-distill-4l/text/calibration.txt");
    let args = ["perplexity".as_ref(), "-m".as_ref(), hf.as_os_str(), "--ctx".as_ref(), "64".as_ref()];
    let tail =
        ["--chunks".as_ref(), "8".as_ref(), "--kl-divergence-base".as_ref(), other.as_os_str(), text.as_os_str()];
    assert_ok(&tgi(args.iter().chain(&tail)));
    assert_fails(&ppl(&other, &["--kl-divergence"]), 2, "made from another text or tokenizer");
    std::fs::write(&other, b"not a base file at all, definitely").unwrap();
    assert_fails(&ppl(&other, &["--kl-divergence"]), 2, "bad magic");
    assert_fails(&ppl(&dir.path().join("none.kld"), &["--kl-divergence"]), 2, "cannot read");
    assert_fails(&tgi(["perplexity", "--kl-divergence", "x.txt"]), 2, "--kl-divergence-base");
}
